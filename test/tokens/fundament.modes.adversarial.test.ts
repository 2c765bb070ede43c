/**
 * The adversarial suite's JWT classes (test/authz/check.adversarial.test.ts, crafted by jwt-craft.ts)
 * rerun through the real gRPC server in each `tokens.mode`, with authn-api's JWKS served by a local
 * https endpoint. A token signed with the shared secret is allowed only where HS256 is accepted
 * (hs256, migration), one signed with authn-api's key only where the JWKS is (migration,
 * asymmetric); every forgery, confusion and malformation is 401 invalid-token in every mode. Key
 * URLs in headers (jku, x5u) are never fetched.
 */
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TokenMode } from "../../src/tokens/fundament.ts";
import { FakeWorld } from "../support/fakes.ts";
import { type AuthnKey, newAuthnKey, startJwksServer, type JwksServer } from "../support/jwks-server.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids, pluginClaims, SECRET } from "../support/tokens.ts";
import { attacker, b64url, caseVariants, craft, nowSeconds, validPluginPayload } from "../support/jwt-craft.ts";

/** What a case expects: a forgery is refused everywhere; a genuine token is allowed where its kind is accepted. */
type Expect = "invalid-token" | "allow-if-hs256" | "allow-if-asymmetric";
interface Case {
  readonly name: string;
  readonly expect: Expect;
  readonly token: () => Promise<string> | string;
}

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;
const RUNTIME = `/installations/${ids.installation}/runtime/index.html`;

let jwks: JwksServer;
const real = {} as Record<"EdDSA" | "ES256" | "RS256", AuthnKey>;
const keyServerHits: string[] = [];
const keyServer = createServer((req, res) => {
  keyServerHits.push(req.url ?? "");
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [{ kty: "oct", k: b64url(attacker.secret) }] }));
});
let keyUrl = "";

beforeAll(async () => {
  jwks = await startJwksServer();
  for (const alg of ["EdDSA", "ES256", "RS256"] as const) real[alg] = jwks.addKey(alg);
  await new Promise<void>((r) => keyServer.listen(0, "127.0.0.1", () => r()));
  keyUrl = `http://127.0.0.1:${(keyServer.address() as AddressInfo).port}/jwks.json`;
});
afterAll(async () => {
  await jwks.stop();
  await new Promise<void>((r) => keyServer.close(() => r()));
  expect(keyServerHits).toEqual([]);
});

const hs = (header: object = { alg: "HS256", typ: "JWT" }, payload: object = validPluginPayload(), secret: string | Buffer = SECRET) => craft(header, payload, { hmac: "sha256", secret });
const asym = (alg: "EdDSA" | "ES256" | "RS256", claims: Record<string, unknown> = {}, options: { kid?: string; alg?: string; expiresInSeconds?: number } = {}) =>
  jwks.sign(real[alg], pluginClaims(claims), options);
const withHeader = async (jwt: Promise<string>, change: (h: Record<string, unknown>) => Record<string, unknown>) => {
  const [h, p, s] = (await jwt).split(".");
  return `${b64url(JSON.stringify(change(JSON.parse(Buffer.from(h!, "base64url").toString()) as Record<string, unknown>)))}.${p}.${s}`;
};
const now = nowSeconds();

const CASES: Case[] = [
  // alg none, every spelling
  ...caseVariants("none").flatMap((alg): Case[] => [
    { name: `alg "${alg}", empty signature`, expect: "invalid-token", token: () => craft({ alg, typ: "JWT" }, validPluginPayload(), { signature: "" }) },
    { name: `alg "${alg}", HMAC'd with the real secret`, expect: "invalid-token", token: () => hs({ alg, typ: "JWT" }) },
    { name: `alg "${alg}", the real ES256 kid, empty signature`, expect: "invalid-token", token: () => craft({ alg, kid: real.ES256.kid }, validPluginPayload(), { signature: "" }) },
  ]),
  // other algorithms and attackers' keys
  { name: "HS384 with the real secret", expect: "invalid-token", token: () => craft({ alg: "HS384" }, validPluginPayload(), { hmac: "sha384", secret: SECRET }) },
  { name: "HS512 with the real secret", expect: "invalid-token", token: () => craft({ alg: "HS512" }, validPluginPayload(), { hmac: "sha512", secret: SECRET }) },
  { name: "RS256 with an attacker RSA key", expect: "invalid-token", token: () => craft({ alg: "RS256" }, validPluginPayload(), { rsa: "RSA-SHA256", key: attacker.rsa.privateKey }) },
  { name: "ES256 with an attacker EC key", expect: "invalid-token", token: () => craft({ alg: "ES256" }, validPluginPayload(), { ec: attacker.ec.privateKey }) },
  { name: "EdDSA with an attacker Ed25519 key", expect: "invalid-token", token: () => craft({ alg: "EdDSA" }, validPluginPayload(), { ed25519: attacker.ed25519.privateKey }) },
  { name: "ES256 by an attacker key naming the real kid", expect: "invalid-token", token: () => craft({ alg: "ES256", kid: real.ES256.kid }, validPluginPayload(), { ec: attacker.ec.privateKey }) },
  { name: "an unknown kid", expect: "invalid-token", token: () => jwks.sign(newAuthnKey("EdDSA"), pluginClaims()) },
  { name: "alg missing", expect: "invalid-token", token: () => hs({ typ: "JWT" }) },
  { name: "alg hs256 (lower case)", expect: "invalid-token", token: () => hs({ alg: "hs256" }) },
  { name: "alg es256 (lower case), real signature", expect: "invalid-token", token: () => withHeader(asym("ES256"), (h) => ({ ...h, alg: "es256" })) },
  // key confusion: public keys as HMAC secrets
  { name: "HS256 keyed with the attacker RSA public key PEM", expect: "invalid-token", token: () => hs(undefined, undefined, attacker.rsa.publicKey.export({ type: "spki", format: "pem" }).toString()) },
  { name: "HS256 keyed with authn-api's RS256 public key PEM", expect: "invalid-token", token: () => hs({ alg: "HS256", kid: real.RS256.kid }, undefined, real.RS256.publicKey.export({ type: "spki", format: "pem" }).toString()) },
  { name: "HS256 keyed with authn-api's RS256 public key DER", expect: "invalid-token", token: () => hs(undefined, undefined, real.RS256.publicKey.export({ type: "spki", format: "der" })) },
  { name: "HS256 keyed with authn-api's ES256 JWK text", expect: "invalid-token", token: () => hs({ alg: "HS256", kid: real.ES256.kid }, undefined, JSON.stringify(real.ES256.jwk)) },
  { name: "HS256 keyed with authn-api's Ed25519 key bytes", expect: "invalid-token", token: () => hs({ alg: "HS256", kid: real.EdDSA.kid }, undefined, Buffer.from(String(real.EdDSA.jwk["x"]), "base64url")) },
  { name: "HS256 keyed with an empty secret", expect: "invalid-token", token: () => hs(undefined, undefined, "") },
  { name: "HS256 keyed with the secret's SHA-256", expect: "invalid-token", token: () => hs(undefined, undefined, createHash("sha256").update(SECRET).digest()) },
  // alg swapped under a real signature
  { name: "RS256 signature under ES256", expect: "invalid-token", token: () => withHeader(asym("RS256"), (h) => ({ ...h, alg: "ES256" })) },
  { name: "ES256 signature under RS256", expect: "invalid-token", token: () => withHeader(asym("ES256"), (h) => ({ ...h, alg: "RS256" })) },
  { name: "EdDSA signature under HS256", expect: "invalid-token", token: () => withHeader(asym("EdDSA"), (h) => ({ ...h, alg: "HS256" })) },
  { name: "RS256 signature under PS256", expect: "invalid-token", token: () => withHeader(asym("RS256"), (h) => ({ ...h, alg: "PS256" })) },
  { name: "ES256 signature, kid of the RS256 key", expect: "invalid-token", token: () => withHeader(asym("ES256"), (h) => ({ ...h, kid: real.RS256.kid })) },
  // key references in the header are never followed
  { name: "jku to an attacker key set, attacker secret", expect: "invalid-token", token: () => hs({ alg: "HS256", jku: keyUrl }, undefined, attacker.secret) },
  { name: "x5u, attacker secret", expect: "invalid-token", token: () => hs({ alg: "HS256", x5u: keyUrl }, undefined, attacker.secret) },
  { name: "embedded jwk, ES256 signed with it", expect: "invalid-token", token: () => craft({ alg: "ES256", jwk: attacker.ec.publicKey.export({ format: "jwk" }) }, validPluginPayload(), { ec: attacker.ec.privateKey }) },
  { name: "control: jku on a real HS256 token is ignored", expect: "allow-if-hs256", token: () => hs({ alg: "HS256", jku: keyUrl }) },
  { name: "control: jku on a real ES256 token is ignored", expect: "allow-if-asymmetric", token: () => withHeaderSigned("ES256", { jku: keyUrl }) },
  { name: "control: kid on a real HS256 token is ignored", expect: "allow-if-hs256", token: () => hs({ alg: "HS256", kid: real.ES256.kid }) },
  // critical headers
  { name: "crit naming an unknown extension (HS256)", expect: "invalid-token", token: () => hs({ alg: "HS256", crit: ["x-fundament"], "x-fundament": 1 }) },
  { name: "crit naming an unknown extension (EdDSA)", expect: "invalid-token", token: () => withHeaderSigned("EdDSA", { crit: ["x-fundament"], "x-fundament": 1 }) },
  // time
  { name: "HS256 expired an hour ago", expect: "invalid-token", token: () => hs(undefined, validPluginPayload({ exp: now - 3600 })) },
  { name: "RS256 expired an hour ago", expect: "invalid-token", token: () => asym("RS256", {}, { expiresInSeconds: -3600 }) },
  { name: "EdDSA iat two minutes ahead", expect: "invalid-token", token: () => withPayloadSigned("EdDSA", { iat: now + 120 }) },
  { name: "ES256 wrong issuer", expect: "invalid-token", token: () => withPayloadSigned("ES256", { iss: "fundament-authn-api/" }) },
  // genuine tokens
  { name: "HS256 with the shared secret", expect: "allow-if-hs256", token: () => hs() },
  { name: "control: typ JOSE on HS256", expect: "allow-if-hs256", token: () => hs({ alg: "HS256", typ: "JOSE" }) },
  ...(["EdDSA", "ES256", "RS256"] as const).map((alg): Case => ({ name: `${alg} by authn-api's key`, expect: "allow-if-asymmetric", token: () => asym(alg) })),
];

/** A real key's signature over a header with extra fields (jose would refuse to sign some of them). */
async function withHeaderSigned(alg: "EdDSA" | "ES256", extra: Record<string, unknown>): Promise<string> {
  const key = real[alg];
  const header = { alg, kid: key.kid, typ: "JWT", ...extra };
  return alg === "EdDSA" ? craft(header, validPluginPayload(), { ed25519: key.privateKey }) : craft(header, validPluginPayload(), { ec: key.privateKey });
}

async function withPayloadSigned(alg: "EdDSA" | "ES256", claims: Record<string, unknown>): Promise<string> {
  const key = real[alg];
  const header = { alg, kid: key.kid, typ: "JWT" };
  return alg === "EdDSA" ? craft(header, validPluginPayload(claims), { ed25519: key.privateKey }) : craft(header, validPluginPayload(claims), { ec: key.privateKey });
}

function expected(expect: Expect, mode: TokenMode): "allow" | "invalid-token" {
  if (expect === "allow-if-hs256") return mode === "asymmetric" ? "invalid-token" : "allow";
  if (expect === "allow-if-asymmetric") return mode === "hs256" ? "invalid-token" : "allow";
  return "invalid-token";
}

describe.each(["hs256", "migration", "asymmetric"] as const)("tokens.mode %s", (mode) => {
  let server: TestServer;
  beforeAll(async () => {
    const tokens = {
      mode,
      ...(mode === "asymmetric" ? {} : { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }] }),
      ...(mode === "hs256" ? {} : { jwks: { url: jwks.url, caFile: jwks.caFile } }),
    };
    server = await startTestServer(new FakeWorld(), testConfig({ tokens }));
  });
  afterAll(async () => server.stop());

  it.each(CASES)("$name", async ({ expect: e, token }) => {
    const jwt = await token();
    const want = expected(e, mode);
    for (const [policy, path] of [["kube-api-proxy", PODS], ["plugin-proxy", RUNTIME]] as const) {
      const res = await server.check({ path, headers: { authorization: `Bearer ${jwt}` }, policy });
      const got = res.allowed ? "allow" : res.reason;
      expect(got, `${policy}: ${res.allowed ? "allowed" : JSON.stringify(res.body)}`).toBe(want);
      if (!res.allowed) expect(JSON.stringify(res)).not.toContain(jwt.split(".")[2] || "\u0000");
    }
  });
});
