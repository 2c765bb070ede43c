/**
 * authn-api's public keys (FUN-17 §9), from its JWKS URL through jose's remote key set: keys are
 * picked by `kid` (rotation: a new kid is fetched on first sight), the set is cached and refetched
 * once older than `cacheMaxAgeMs`, and an unknown kid refetches at most once per `cooldownMs`, so a
 * flood of tokens naming made-up kids costs one fetch per cooldown. Fetched over https only, through
 * one keep-alive pool trusting the system roots plus an optional CA bundle, with a deadline.
 */
import { readFileSync } from "node:fs";
import { rootCertificates } from "node:tls";
import { createRemoteJWKSet, customFetch, type FetchImplementation } from "jose";
import { Agent, fetch as undiciFetch } from "undici";
import { ConfigError } from "../config/load.ts";
import { type AsymmetricAlgorithm, AUTHN_JWKS, type PublicKeys } from "./fundament.ts";
import { publishDependencyCall } from "../metrics/events.ts";

export interface JwksOptions {
  readonly url: string;
  readonly algorithms: readonly AsymmetricAlgorithm[];
  readonly cacheMaxAgeMs: number;
  readonly cooldownMs: number;
  readonly timeoutMs: number;
  /** PEM bundle trusted in addition to the system roots (a private CA, or a test's). */
  readonly caFile?: string | undefined;
}

export function remotePublicKeys(options: JwksOptions): PublicKeys {
  const url = new URL(options.url);
  if (url.protocol !== "https:") throw new ConfigError("tokens.jwks.url: expected an https:// URL");
  const ca = options.caFile === undefined ? undefined : readCa(options.caFile);
  const pool = new Agent({ connect: ca === undefined ? {} : { ca: [...rootCertificates, ca] } });
  // Counted as a dependency call, so a failing or slow JWKS shows beside OpenFGA and the API servers.
  const fetchJwks: FetchImplementation = async (target, init) => {
    const started = performance.now();
    let ok = false;
    try {
      const response = await undiciFetch(target, {
        method: init.method,
        headers: Object.fromEntries(init.headers),
        signal: init.signal,
        redirect: "error",
        dispatcher: pool,
      });
      ok = response.ok;
      return response as unknown as Response;
    } finally {
      publishDependencyCall(AUTHN_JWKS, (performance.now() - started) / 1000, ok);
    }
  };
  const keys = createRemoteJWKSet(url, {
    cacheMaxAge: options.cacheMaxAgeMs,
    cooldownDuration: options.cooldownMs,
    timeoutDuration: options.timeoutMs,
    [customFetch]: fetchJwks,
  });
  return { keys, algorithms: options.algorithms, cacheMaxAgeMs: options.cacheMaxAgeMs };
}

function readCa(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`tokens.jwks.caFile: cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
}
