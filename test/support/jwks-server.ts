/**
 * authn-api's JWKS for tests: https on 127.0.0.1 with a self-signed certificate made for the test
 * (openssl), serving `/jwks` from keys the test adds and removes (EdDSA, ES256, RS256), counting
 * fetches, and failing on cue. `sign` mints Fundament tokens as authn-api would with one of them.
 */
import { execFileSync } from "node:child_process";
import { generateKeyPairSync, type KeyObject, randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SignJWT } from "jose";
import type { AsymmetricAlgorithm } from "../../src/tokens/fundament.ts";

export interface AuthnKey {
  readonly alg: AsymmetricAlgorithm;
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
  readonly jwk: Record<string, unknown>;
}

export interface JwksServer {
  readonly url: string;
  /** A file holding the certificate: `tokens.jwks.caFile`. */
  readonly caFile: string;
  fetches: number;
  /** Answered instead of the key set while set. */
  failWith: number | undefined;
  addKey(alg: AsymmetricAlgorithm): AuthnKey;
  removeKey(kid: string): void;
  sign(key: AuthnKey, claims: Record<string, unknown>, options?: { kid?: string; alg?: string; expiresInSeconds?: number }): Promise<string>;
  stop(): Promise<void>;
}

export function newAuthnKey(alg: AsymmetricAlgorithm): AuthnKey {
  const pair =
    alg === "EdDSA"
      ? generateKeyPairSync("ed25519")
      : alg === "ES256"
        ? generateKeyPairSync("ec", { namedCurve: "P-256" })
        : generateKeyPairSync("rsa", { modulusLength: 2048 });
  const kid = randomUUID();
  return { alg, kid, privateKey: pair.privateKey, publicKey: pair.publicKey, jwk: { ...pair.publicKey.export({ format: "jwk" }), kid, alg, use: "sig" } };
}

export async function startJwksServer(): Promise<JwksServer> {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-jwks-"));
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1",
    "-subj", "/CN=portcullis test authn-api", "-addext", "subjectAltName=IP:127.0.0.1",
  ], { stdio: "ignore" });
  const key = readFileSync(join(dir, "key.pem"), "utf8");
  const cert = readFileSync(join(dir, "cert.pem"), "utf8");
  const caFile = join(dir, "ca.pem");
  writeFileSync(caFile, cert);
  const keys = new Map<string, AuthnKey>();

  const state: JwksServer = {
    url: "",
    caFile,
    fetches: 0,
    failWith: undefined,
    addKey(alg) {
      const k = newAuthnKey(alg);
      keys.set(k.kid, k);
      return k;
    },
    removeKey(kid) {
      keys.delete(kid);
    },
    sign(k, claims, options = {}) {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ jti: randomUUID(), ...claims })
        .setProtectedHeader({ alg: options.alg ?? k.alg, kid: options.kid ?? k.kid, typ: "JWT" })
        .setIssuer("fundament-authn-api")
        .setIssuedAt(now)
        .setExpirationTime(now + (options.expiresInSeconds ?? 900))
        .sign(k.privateKey);
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        rmSync(dir, { recursive: true, force: true });
      }),
  };
  const server: Server = createServer({ key, cert }, (req, res) => {
    if (req.url !== "/jwks") return void res.writeHead(404).end();
    state.fetches++;
    if (state.failWith !== undefined) return void res.writeHead(state.failWith, { "content-type": "application/json" }).end('{"error":"down"}');
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [...keys.values()].map((k) => k.jwk) }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  Object.assign(state, { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/jwks` });
  return state;
}
