/**
 * A local OIDC provider for tests: https on 127.0.0.1 with a self-signed certificate made for the
 * test (openssl), serving the discovery document, a JWKS whose keys the test rotates, and UserInfo.
 * It counts every request, so tests can assert what portcullis fetched, and can be told to
 * misbehave (slow, oversized, redirecting, naming another issuer, failing or garbage JWKS).
 */
import { execFileSync } from "node:child_process";
import { generateKeyPairSync, type KeyObject, randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt, SignJWT } from "jose";

export interface SigningKey {
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly jwk: Record<string, unknown>;
}

export interface Misbehaviour {
  /** Added before every answer. */
  delayMs?: number;
  /** The JWKS answer is padded past this many bytes. */
  oversizeJwksBytes?: number;
  discoveryStatus?: number;
  jwksStatus?: number;
  /** Served as the JWKS instead of the key set (garbage, or a document that is not one). */
  jwksBody?: string;
  /** What the discovery document claims as its issuer. */
  discoveryIssuer?: string;
  jwksUri?: string;
}

export interface LocalProvider {
  readonly issuer: string;
  /** The discovery URL, as a Project's jwks subject names it. */
  readonly endpoint: string;
  /** PEM of the self-signed certificate: the CA a client must be told to trust. */
  readonly ca: string;
  readonly fetches: { discovery: number; jwks: number; userinfo: number };
  readonly misbehave: Misbehaviour;
  /** UserInfo answers by the bearer token's sub. */
  readonly userInfo: Map<string, Record<string, unknown>>;
  addKey(): SigningKey;
  removeKey(kid: string): void;
  sign(key: SigningKey, claims: Record<string, unknown>, options?: { kid?: string; issuer?: string; expiresInSeconds?: number }): Promise<string>;
  stop(): Promise<void>;
}

/** A self-signed certificate for 127.0.0.1, made once per test process. */
let tls: { key: string; cert: string } | undefined;
function selfSigned(): { key: string; cert: string } {
  if (tls !== undefined) return tls;
  const dir = mkdtempSync(join(tmpdir(), "portcullis-oidc-"));
  try {
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1",
      "-subj", "/CN=portcullis test provider", "-addext", "subjectAltName=IP:127.0.0.1",
    ], { stdio: "ignore" });
    tls = { key: readFileSync(join(dir, "key.pem"), "utf8"), cert: readFileSync(join(dir, "cert.pem"), "utf8") };
    return tls;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function newSigningKey(): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const kid = randomUUID();
  return { kid, privateKey, jwk: { ...publicKey.export({ format: "jwk" }), kid, alg: "ES256", use: "sig" } };
}

export async function startLocalProvider(): Promise<LocalProvider> {
  const { key, cert } = selfSigned();
  const keys = new Map<string, SigningKey>();
  const fetches = { discovery: 0, jwks: 0, userinfo: 0 };
  const misbehave: Misbehaviour = {};
  const userInfo = new Map<string, Record<string, unknown>>();
  let issuer = "";

  const server: Server = createServer({ key, cert }, (req, res) => {
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      setTimeout(() => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(typeof body === "string" ? body : JSON.stringify(body));
      }, misbehave.delayMs ?? 0);
    };
    switch (req.url) {
      case "/.well-known/openid-configuration":
        fetches.discovery++;
        if (misbehave.discoveryStatus === 302) return answer(302, "", { location: `${issuer}/elsewhere` });
        return answer(misbehave.discoveryStatus ?? 200, {
          issuer: misbehave.discoveryIssuer ?? issuer,
          jwks_uri: misbehave.jwksUri ?? `${issuer}/jwks`,
          userinfo_endpoint: `${issuer}/userinfo`,
          id_token_signing_alg_values_supported: ["ES256"],
        });
      case "/jwks": {
        fetches.jwks++;
        if (misbehave.jwksStatus !== undefined) return answer(misbehave.jwksStatus, { error: "unavailable" });
        if (misbehave.jwksBody !== undefined) return answer(200, misbehave.jwksBody);
        const jwks: Record<string, unknown> = { keys: [...keys.values()].map((k) => k.jwk) };
        if (misbehave.oversizeJwksBytes !== undefined) jwks["padding"] = "x".repeat(misbehave.oversizeJwksBytes);
        return answer(200, jwks);
      }
      case "/userinfo": {
        fetches.userinfo++;
        const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
        const sub = token === undefined ? undefined : decodeJwt(token).sub;
        const info = sub === undefined ? undefined : userInfo.get(sub);
        return info === undefined ? answer(401, { error: "invalid_token" }) : answer(200, info);
      }
      default:
        return answer(404, { error: "not found" });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  issuer = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    issuer,
    endpoint: `${issuer}/.well-known/openid-configuration`,
    ca: cert,
    fetches,
    misbehave,
    userInfo,
    addKey() {
      const k = newSigningKey();
      keys.set(k.kid, k);
      return k;
    },
    removeKey(kid) {
      keys.delete(kid);
    },
    sign(k, claims, options = {}) {
      return new SignJWT(claims)
        .setProtectedHeader({ alg: "ES256", kid: options.kid ?? k.kid, typ: "JWT" })
        .setIssuer(options.issuer ?? issuer)
        .setIssuedAt()
        .setExpirationTime(Math.floor(Date.now() / 1000) + (options.expiresInSeconds ?? 600))
        .sign(k.privateKey);
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
