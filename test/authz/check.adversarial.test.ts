/**
 * The adversarial suite: hostile CheckRequests through the real gRPC server, each with the denial
 * DESIGN.md documents for it (or an allow, for the benign controls). The world answers like a real
 * one with narrow permissions, so a parsing mistake shows up as a wrong allow, not as luck:
 *   - the user may get/list/watch pods in team-a, only WATCH configmaps there (no list), and only
 *     touch the secret named allowed-secret;
 *   - every allow is checked for header hygiene (no caller-identity header survives, the caller's
 *     credential never travels on) and every denial for its table status and for not echoing the token.
 * After the batch the process must still be SERVING.
 */
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REASONS } from "../../src/authz/reasons.ts";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import type { CheckResponse } from "../support/envoy.ts";
import { envoyCheckRequest, summarize } from "../support/envoy.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken, SECRET, userToken } from "../support/tokens.ts";
import { healthStatus } from "../support/grpc-health.ts";
import { attacker, b64url, caseVariants, craft, nowSeconds, signatureOf, validPluginPayload, validUserPayload } from "../support/jwt-craft.ts";

type Expected = keyof typeof REASONS | "allow" | "grpc-error";

interface Case {
  readonly name: string;
  readonly expect: Expected;
  readonly policy?: string | undefined;
  readonly method?: string;
  /** Path with query string; kube-api-proxy's pods list in team-a by default. */
  readonly path?: string;
  /** A valid PluginToken as Bearer by default. */
  readonly headers?: Record<string, string>;
  /** A whole CheckRequest, for shapes envoyCheckRequest does not build (raw header_map, oversized). */
  readonly raw?: object;
  /** For allows: the SubjectAccessReview verbs the gateway must have asked (proves what it parsed). */
  readonly sarVerbs?: readonly string[];
}

const C = `/clusters/${ids.cluster}`;
const PODS = `${C}/api/v1/namespaces/team-a/pods`;
const RUNTIME = `/installations/${ids.installation}/runtime/index.html`;

// ---------------------------------------------------------------- the world
const SAR_RULES = [
  { resource: "pods", namespace: "team-a", verbs: ["get", "list", "watch"] },
  { resource: "configmaps", namespace: "team-a", verbs: ["watch"] },
  { resource: "secrets", namespace: "team-a", verbs: ["get", "list", "watch"], name: "allowed-secret" },
] as const;

function sarAllows(a: AccessAttributes): boolean {
  if (a.kind === "non-resource") return a.verb === "get" && (a.path === "/version" || a.path.startsWith("/openapi/"));
  return SAR_RULES.some(
    (r) =>
      a.group === "" &&
      a.subresource === "" &&
      r.resource === a.resource &&
      r.namespace === a.namespace &&
      (r.verbs as readonly string[]).includes(a.verb) &&
      (!("name" in r) || r.name === a.name),
  );
}

// ---------------------------------------------------------------- tokens
const P = await pluginToken();
const U = await userToken();
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
/** What a browser sends with a same-origin request: the session cookie counts only then (or from a listed Origin). */
const SAME_ORIGIN = { "sec-fetch-site": "same-origin" } as const;
const plug = (claims: Record<string, unknown>) => craft({ alg: "HS256", typ: "JWT" }, validPluginPayload(claims));
const plugPayload = (payload: object | string, header: object = { alg: "HS256", typ: "JWT" }) => craft(header, payload);
const withSecret = (secret: string | Buffer, payload: object = validPluginPayload(), header: object = { alg: "HS256", typ: "JWT" }) =>
  craft(header, payload, { hmac: "sha256", secret });

/** A listening server standing in for an attacker's key URL: portcullis must never fetch from it. */
const keyServerHits: string[] = [];
const keyServer = createServer((req, res) => {
  keyServerHits.push(req.url ?? "");
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [{ kty: "oct", k: b64url(attacker.secret) }] }));
});
await new Promise<void>((r) => keyServer.listen(0, "127.0.0.1", () => r()));
const keyUrl = `http://127.0.0.1:${(keyServer.address() as AddressInfo).port}/jwks.json`;

const rsaPublicPem = attacker.rsa.publicKey.export({ type: "spki", format: "pem" }).toString();
const rsaPublicDer = attacker.rsa.publicKey.export({ type: "spki", format: "der" });
const rsaPublicJwk = JSON.stringify(attacker.rsa.publicKey.export({ format: "jwk" }));

// ---------------------------------------------------------------- JWT classes
const noneAlg: Case[] = caseVariants("none").flatMap((alg): Case[] => [
  { name: `alg "${alg}", empty signature`, expect: "invalid-token", headers: bearer(craft({ alg, typ: "JWT" }, validPluginPayload(), { signature: "" })) },
  { name: `alg "${alg}", junk signature`, expect: "invalid-token", headers: bearer(craft({ alg, typ: "JWT" }, validPluginPayload(), { signature: "AAAA" })) },
  { name: `alg "${alg}", HMAC'd with the real secret`, expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg, typ: "JWT" })) },
]);
const noneAlgPluginProxy: Case[] = caseVariants("none").map((alg) => ({
  name: `plugin-proxy: alg "${alg}", empty signature`,
  policy: "plugin-proxy",
  path: RUNTIME,
  expect: "invalid-token" as const,
  headers: bearer(craft({ alg }, validPluginPayload(), { signature: "" })),
}));

const otherAlgorithms: Case[] = [
  { name: "HS384 with the real secret", expect: "invalid-token", headers: bearer(craft({ alg: "HS384" }, validPluginPayload(), { hmac: "sha384", secret: SECRET })) },
  { name: "HS512 with the real secret", expect: "invalid-token", headers: bearer(craft({ alg: "HS512" }, validPluginPayload(), { hmac: "sha512", secret: SECRET })) },
  { name: "RS256 with an attacker RSA key", expect: "invalid-token", headers: bearer(craft({ alg: "RS256" }, validPluginPayload(), { rsa: "RSA-SHA256", key: attacker.rsa.privateKey })) },
  { name: "ES256 with an attacker EC key", expect: "invalid-token", headers: bearer(craft({ alg: "ES256" }, validPluginPayload(), { ec: attacker.ec.privateKey })) },
  { name: "EdDSA with an attacker Ed25519 key", expect: "invalid-token", headers: bearer(craft({ alg: "EdDSA" }, validPluginPayload(), { ed25519: attacker.ed25519.privateKey })) },
  { name: "alg missing", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { typ: "JWT" })) },
  { name: "alg hs256 (lower case)", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "hs256" })) },
  { name: "control: typ JOSE instead of JWT is still HS256", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", typ: "JOSE" })) },
];

const keyConfusion: Case[] = [
  { name: "HS256 keyed with the RSA public key PEM", expect: "invalid-token", headers: bearer(withSecret(rsaPublicPem)) },
  { name: "HS256 keyed with the PEM, no trailing newline", expect: "invalid-token", headers: bearer(withSecret(rsaPublicPem.trimEnd())) },
  { name: "HS256 keyed with the RSA public key DER", expect: "invalid-token", headers: bearer(withSecret(rsaPublicDer)) },
  { name: "HS256 keyed with the RSA public JWK text", expect: "invalid-token", headers: bearer(withSecret(rsaPublicJwk)) },
  { name: "HS256 keyed with an empty secret", expect: "invalid-token", headers: bearer(withSecret("")) },
  { name: "HS256 keyed with the secret's SHA-256", expect: "invalid-token", headers: bearer(withSecret(createHash("sha256").update(SECRET).digest())) },
];

const attackerJwk = { kty: "oct", k: b64url(attacker.secret) };
const keyReferences: Case[] = [
  // jose verifies with the key portcullis passes it and never reads these headers: signed with the
  // real secret they change nothing; signed with the key they point to they are forgeries.
  { name: "jku, real secret → ignored", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", jku: keyUrl })) },
  { name: "jku, attacker key it points to", expect: "invalid-token", headers: bearer(withSecret(attacker.secret, validPluginPayload(), { alg: "HS256", jku: keyUrl })) },
  { name: "x5u, real secret → ignored", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", x5u: keyUrl })) },
  { name: "x5u, attacker key it points to", expect: "invalid-token", headers: bearer(withSecret(attacker.secret, validPluginPayload(), { alg: "HS256", x5u: keyUrl })) },
  { name: "embedded jwk, real secret → ignored", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", jwk: attackerJwk })) },
  { name: "embedded jwk, signed with that jwk", expect: "invalid-token", headers: bearer(withSecret(attacker.secret, validPluginPayload(), { alg: "HS256", jwk: attackerJwk })) },
  { name: "embedded RSA jwk, RS256 signed with it", expect: "invalid-token", headers: bearer(craft({ alg: "RS256", jwk: JSON.parse(rsaPublicJwk) }, validPluginPayload(), { rsa: "RSA-SHA256", key: attacker.rsa.privateKey })) },
  { name: "kid naming another key, real secret → ignored", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", kid: "attacker" })) },
  { name: "kid path traversal, real secret → ignored", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", kid: "../../../../dev/null" })) },
  { name: "kid /dev/null, empty secret", expect: "invalid-token", headers: bearer(withSecret("", validPluginPayload(), { alg: "HS256", kid: "../../../../dev/null" })) },
  { name: "kid SQL injection, attacker secret", expect: "invalid-token", headers: bearer(withSecret(attacker.secret, validPluginPayload(), { alg: "HS256", kid: "x' UNION SELECT 'attacker" })) },
  { name: "x5c chain, attacker secret", expect: "invalid-token", headers: bearer(withSecret(attacker.secret, validPluginPayload(), { alg: "HS256", x5c: ["MIIB"] })) },
];

const criticalHeaders: Case[] = [
  { name: "crit [b64] with b64 false (unencoded payload)", expect: "invalid-token", headers: bearer(`${b64url(JSON.stringify({ alg: "HS256", b64: false, crit: ["b64"] }))}.${JSON.stringify(validPluginPayload())}.AAAA`) },
  {
    name: "crit [b64] with b64 false, base64url-safe payload",
    expect: "invalid-token",
    headers: bearer(craft({ alg: "HS256", b64: false, crit: ["b64"] }, validPluginPayload())),
  },
  { name: "control: crit [b64] with b64 true is a normal JWS", expect: "allow", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", b64: true, crit: ["b64"] })) },
  { name: "crit naming an unknown extension", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", crit: ["x-fundament"], "x-fundament": 1 })) },
  { name: "crit naming exp", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", crit: ["exp"], exp: 1 })) },
  { name: "crit empty list", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", crit: [] })) },
  { name: "crit not a list", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", crit: "b64", b64: true })) },
  { name: "crit names a header that is absent", expect: "invalid-token", headers: bearer(withSecret(SECRET, validPluginPayload(), { alg: "HS256", crit: ["x-missing"] })) },
];

const now = nowSeconds();
const times: Case[] = [
  { name: "expired an hour ago", expect: "invalid-token", headers: bearer(plug({ exp: now - 3600 })) },
  { name: "expired 10 s ago (outside 5 s tolerance)", expect: "invalid-token", headers: bearer(plug({ exp: now - 10 })) },
  { name: "control: expired 2 s ago (inside tolerance)", expect: "allow", headers: bearer(plug({ exp: now - 2 })) },
  { name: "nbf 2 minutes ahead", expect: "invalid-token", headers: bearer(plug({ nbf: now + 120 })) },
  { name: "iat 2 minutes ahead", expect: "invalid-token", headers: bearer(plug({ iat: now + 120 })) },
  { name: "control: iat 3 s ahead (inside tolerance)", expect: "allow", headers: bearer(plug({ iat: now + 3 })) },
  { name: "exp missing", expect: "invalid-token", headers: bearer(plug({ exp: undefined })) },
  { name: "exp as a string", expect: "invalid-token", headers: bearer(plug({ exp: String(now + 900) })) },
  { name: "exp null", expect: "invalid-token", headers: bearer(plug({ exp: null })) },
  { name: "nbf as a string", expect: "invalid-token", headers: bearer(plug({ nbf: "0" })) },
  { name: "iat as a string", expect: "invalid-token", headers: bearer(plug({ iat: "0" })) },
  { name: "exp 0", expect: "invalid-token", headers: bearer(plug({ exp: 0 })) },
  { name: "exp negative", expect: "invalid-token", headers: bearer(plug({ exp: -1 })) },
];

const issuers: Case[] = [
  { name: "wrong issuer", expect: "invalid-token", headers: bearer(plug({ iss: "evil-authn-api" })) },
  { name: "issuer with a trailing slash", expect: "invalid-token", headers: bearer(plug({ iss: "fundament-authn-api/" })) },
  { name: "issuer in another case", expect: "invalid-token", headers: bearer(plug({ iss: "Fundament-Authn-Api" })) },
  { name: "issuer with a leading space", expect: "invalid-token", headers: bearer(plug({ iss: " fundament-authn-api" })) },
  { name: "issuer as a list", expect: "invalid-token", headers: bearer(plug({ iss: ["fundament-authn-api"] })) },
  { name: "issuer missing", expect: "invalid-token", headers: bearer(plug({ iss: undefined })) },
];

const audiences: Case[] = [
  { name: "aud holds both audiences", expect: "invalid-token", headers: bearer(plug({ aud: ["fundament-plugin", "fundament-user"] })) },
  { name: "aud holds both audiences, user first", expect: "invalid-token", headers: bearer(plug({ aud: ["fundament-user", "fundament-plugin"] })) },
  { name: "aud missing", expect: "invalid-token", headers: bearer(plug({ aud: undefined })) },
  { name: "aud a number", expect: "invalid-token", headers: bearer(plug({ aud: 5 })) },
  { name: "aud an object", expect: "invalid-token", headers: bearer(plug({ aud: { "fundament-plugin": true } })) },
  { name: "aud null", expect: "invalid-token", headers: bearer(plug({ aud: null })) },
  { name: "aud of another service", expect: "wrong-audience", headers: bearer(plug({ aud: "organization-api" })) },
  { name: "aud in another case", expect: "wrong-audience", headers: bearer(plug({ aud: "Fundament-Plugin" })) },
  { name: "control: aud as a one-element list", expect: "allow", headers: bearer(plug({ aud: ["fundament-plugin"] })) },
  { name: "UserToken on plugin-proxy", expect: "wrong-audience", policy: "plugin-proxy", path: RUNTIME, headers: bearer(U) },
  { name: "PluginToken in the cookie (UserToken only there)", expect: "wrong-audience", headers: { cookie: `fundament_auth=${P}`, ...SAME_ORIGIN } },
];

const [h, p, s] = P.split(".") as [string, string, string];
const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/** The base64url character whose 6-bit value differs from `c`'s by `mask`. */
const flipBit = (c: string, mask: number) => B64URL[B64URL.indexOf(c) ^ mask]!;
const otherSig = signatureOf(await pluginToken({ sub: ids.otherUser }));
const signatures: Case[] = [
  { name: "signature missing (two segments)", expect: "invalid-token", headers: bearer(`${h}.${p}`) },
  { name: "signature empty", expect: "invalid-token", headers: bearer(`${h}.${p}.`) },
  { name: "signature truncated by one character", expect: "invalid-token", headers: bearer(`${h}.${p}.${s.slice(0, -1)}`) },
  { name: "signature truncated to half", expect: "invalid-token", headers: bearer(`${h}.${p}.${s.slice(0, s.length / 2)}`) },
  { name: "signature of another token", expect: "invalid-token", headers: bearer(`${h}.${p}.${otherSig}`) },
  { name: "payload swapped, signature kept", expect: "invalid-token", headers: bearer(`${h}.${b64url(JSON.stringify(validPluginPayload({ sub: ids.otherUser })))}.${s}`) },
  { name: "signature with base64 padding", expect: "invalid-token", headers: bearer(`${P}=`) },
  { name: "signature in standard base64 (+/)", expect: "invalid-token", headers: bearer(`${h}.${p}.${Buffer.from(s, "base64url").toString("base64")}`) },
  { name: "a fourth segment", expect: "invalid-token", headers: bearer(`${P}.${s}`) },
  { name: "JWE-shaped (five segments)", expect: "invalid-token", headers: bearer(`${h}.${p}.${s}.${s}.${s}`) },
  { name: "a signature bit flipped", expect: "invalid-token", headers: bearer(`${h}.${p}.${s.slice(0, -1)}${flipBit(s.at(-1)!, 0b100000)}`) },
  // 32 bytes take 43 base64url characters: the last one's two low bits carry nothing, and jose (like
  // most decoders) ignores them. Same bytes, same signature: not a forgery, documented in SECURITY.md.
  { name: "control: unused low bits of the last signature character changed", expect: "allow", headers: bearer(`${h}.${p}.${s.slice(0, -1)}${flipBit(s.at(-1)!, 0b01)}`) },
  { name: "header not JSON", expect: "invalid-token", headers: bearer(craft("not json", validPluginPayload())) },
  { name: "header a JSON list", expect: "invalid-token", headers: bearer(craft("[]", validPluginPayload())) },
  { name: "payload not JSON", expect: "invalid-token", headers: bearer(plugPayload("{not json")) },
  { name: "payload a JSON list", expect: "invalid-token", headers: bearer(plugPayload("[1,2]")) },
  { name: "payload a JSON number", expect: "invalid-token", headers: bearer(plugPayload("5")) },
];

// JSON.parse keeps the last of duplicate keys, as Go's encoding/json in authn-api does: a signed
// token means what both sides read, and each duplicate below is judged on its last value.
const base = validPluginPayload();
const rawPayload = (fields: string[]) => plugPayload(`{${[...Object.entries(base).map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`), ...fields].join(",")}}`);
const duplicates: Case[] = [
  { name: "two aud: plugin then user (last wins: a UserToken)", expect: "allow", headers: bearer(rawPayload([`"aud":"fundament-user"`])), sarVerbs: [] },
  { name: "two aud on plugin-proxy: plugin then user", expect: "wrong-audience", policy: "plugin-proxy", path: RUNTIME, headers: bearer(rawPayload([`"aud":"fundament-user"`])) },
  { name: "two sub: the last not a UUID", expect: "invalid-token", headers: bearer(rawPayload([`"sub":"admin"`])) },
  { name: "two cluster_id: the last another cluster", expect: "cluster-mismatch", headers: bearer(rawPayload([`"cluster_id":"${ids.otherCluster}"`])) },
  { name: "two installation_id: the last another installation", expect: "installation-mismatch", policy: "plugin-proxy", path: RUNTIME, headers: bearer(rawPayload([`"installation_id":"${ids.otherInstallation}"`])) },
  { name: "two iss: the last wrong", expect: "invalid-token", headers: bearer(rawPayload([`"iss":"evil"`])) },
  { name: "two exp: the last in the past", expect: "invalid-token", headers: bearer(rawPayload([`"exp":${now - 3600}`])) },
];

const big = (n: number) => "A".repeat(n);
const sizes: Case[] = [
  { name: "a 100 KB token", expect: "invalid-token", headers: bearer(`${h}.${big(100_000)}.${s}`) },
  { name: "a token one byte over 8 KiB", expect: "invalid-token", headers: bearer(`${h}.${big(8193 - h.length - s.length - 2)}.${s}`) },
  { name: "a 1 MB Authorization header", expect: "invalid-token", headers: { authorization: `Bearer ${big(1_000_000)}` } },
  { name: "control: a 7 KB UserToken (big name claim)", expect: "allow", headers: bearer(await userToken({ name: "n".repeat(5000) })) },
];

const nonAscii: Case[] = [
  { name: "é inside the token", expect: "invalid-token", headers: bearer(`${h}.${p}é.${s}`) },
  { name: "zero-width space inside the token", expect: "invalid-token", headers: bearer(`${h}.\u200b${p}.${s}`) },
  { name: "fullwidth dot as separator", expect: "invalid-token", headers: bearer(`${h}\uff0e${p}.${s}`) },
  { name: "right-to-left override before the token", expect: "invalid-token", headers: bearer(`\u202e${P}`) },
  { name: "Cyrillic е in Bearer", expect: "invalid-token", headers: { authorization: `B\u0435arer ${P}` } },
  { name: "no-break space after Bearer", expect: "invalid-token", headers: { authorization: `Bearer\u00a0${P}` } },
  { name: "emoji in a claim", expect: "invalid-token", headers: bearer(plug({ installation_name: "cert-manager\u{1f600}" })) },
];

const schemes: Case[] = [
  { name: "control: bearer (lower case)", expect: "allow", headers: { authorization: `bearer ${P}` } },
  { name: "control: BEARER (upper case)", expect: "allow", headers: { authorization: `BEARER ${P}` } },
  { name: "control: two spaces after Bearer", expect: "allow", headers: { authorization: `Bearer  ${P}` } },
  { name: "control: trailing spaces", expect: "allow", headers: { authorization: `Bearer ${P}   ` } },
  { name: "control: leading space", expect: "allow", headers: { authorization: ` Bearer ${P}` } },
  { name: "tab after Bearer", expect: "invalid-token", headers: { authorization: `Bearer\t${P}` } },
  { name: "Bearer alone", expect: "invalid-token", headers: { authorization: "Bearer" } },
  { name: "Bearer and a space", expect: "invalid-token", headers: { authorization: "Bearer " } },
  { name: "Bearerx (no space)", expect: "invalid-token", headers: { authorization: `Bearer${P}` } },
  { name: "Basic scheme", expect: "invalid-token", headers: { authorization: "Basic dXNlcjpwYXNz" } },
  { name: "Token scheme", expect: "invalid-token", headers: { authorization: `Token ${P}` } },
  { name: "the token without a scheme", expect: "invalid-token", headers: { authorization: P } },
  { name: "Bearer with two tokens separated by a space", expect: "invalid-token", headers: { authorization: `Bearer ${P} ${P}` } },
  { name: "empty Authorization", expect: "missing-token", headers: { authorization: "" } },
  { name: "whitespace-only Authorization", expect: "missing-token", headers: { authorization: " \t " } },
  { name: "no credentials at all", expect: "missing-token", headers: {} },
  { name: "CR LF inside the value", expect: "invalid-token", headers: { authorization: `Bearer ${P}\r\nx-evil: 1` } },
  { name: "NUL after the token", expect: "invalid-token", headers: { authorization: `Bearer ${P}\u0000` } },
];

const rawHeaders = (entries: Array<[string, string]>, path = PODS, policy = "kube-api-proxy") => ({
  attributes: {
    request: { http: { method: "GET", path, header_map: { headers: entries.map(([key, value]) => ({ key, raw_value: Buffer.from(value, "latin1") })) } } },
    context_extensions: { policy },
  },
});
const wsBearer = (t: string) => `base64url.bearer.authorization.k8s.io.${b64url(t)}`;
const multiple: Case[] = [
  { name: "Envoy-merged Bearer a, Bearer b", expect: "invalid-token", headers: { authorization: `Bearer ${P}, Bearer ${U}` } },
  { name: "Envoy-merged, the same token twice", expect: "invalid-token", headers: { authorization: `Bearer ${P}, Bearer ${P}` } },
  { name: "Envoy-merged without space", expect: "invalid-token", headers: { authorization: `Bearer ${P},Bearer ${P}` } },
  { name: "two raw Authorization entries (encode_raw_headers)", expect: "invalid-token", raw: rawHeaders([["authorization", `Bearer ${P}`], ["authorization", `Bearer ${U}`]]) },
  { name: "raw Authorization entries differing in case", expect: "invalid-token", raw: rawHeaders([["Authorization", `Bearer ${P}`], ["authorization", `Bearer ${P}`]]) },
  {
    name: "headers map keys differing in case",
    expect: "invalid-token",
    raw: { attributes: { request: { http: { method: "GET", path: PODS, headers: { Authorization: `Bearer ${U}`, authorization: `Bearer ${P}` } } }, context_extensions: { policy: "kube-api-proxy" } } },
  },
  { name: "Bearer and WebSocket bearer together", expect: "invalid-token", headers: { ...bearer(P), "sec-websocket-protocol": wsBearer(P) } },
  { name: "two WebSocket bearer subprotocols", expect: "invalid-token", headers: { "sec-websocket-protocol": `${wsBearer(P)}, ${wsBearer(P)}` } },
  { name: "WebSocket bearer not base64url", expect: "invalid-token", headers: { "sec-websocket-protocol": "base64url.bearer.authorization.k8s.io.***" } },
  { name: "two fundament_auth cookies", expect: "invalid-token", headers: { cookie: `fundament_auth=${U}; fundament_auth=${U}`, ...SAME_ORIGIN } },
  { name: "two fundament_auth cookies merged with a comma", expect: "invalid-token", headers: { cookie: `fundament_auth=${U}, fundament_auth=${U}`, ...SAME_ORIGIN } },
  { name: "the cookie without Origin or Sec-Fetch-Site (a plugin page's GET navigation)", expect: "missing-token", headers: { cookie: `fundament_auth=${U}` } },
  { name: "the cookie on a same-site navigation", expect: "missing-token", headers: { cookie: `fundament_auth=${U}`, "sec-fetch-site": "same-site", "sec-fetch-mode": "navigate" } },
  { name: "the cookie from an unlisted Origin claiming same-origin", expect: "missing-token", headers: { cookie: `fundament_auth=${U}`, origin: "https://plugin-proxy.fundament.io", ...SAME_ORIGIN } },
  { name: "control: Bearer wins over the cookie (browser sends both)", expect: "allow", headers: { ...bearer(P), cookie: `fundament_auth=${U}` } },
  // The cookie takes a UserToken only: a PluginToken planted there refuses the request, whatever else it carries (and is audited).
  { name: "a PluginToken cookie beside a UserToken Bearer", expect: "wrong-audience", headers: { ...bearer(U), cookie: `fundament_auth=${P}` } },
  { name: "a PluginToken cookie beside a PluginToken Bearer", expect: "wrong-audience", headers: { ...bearer(P), cookie: `theme=dark; fundament_auth=${P}` } },
  { name: "a PluginToken cookie on a navigation (no Origin)", expect: "wrong-audience", headers: { cookie: `fundament_auth=${P}` } },
  { name: "a UserToken Bearer and a PluginToken subprotocol", expect: "invalid-token", headers: { ...bearer(U), "sec-websocket-protocol": wsBearer(P) } },
  { name: "five tokens in one request", expect: "invalid-token", headers: { ...bearer(P), cookie: `fundament_auth=${U}; fundament_auth=a.b.c; fundament_auth=d.e.f; fundament_auth=g.h.i` } },
  { name: "control: WebSocket bearer alone", expect: "allow", headers: { "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(P)}` } },
];

const claimTypes: Case[] = [
  { name: "cluster_id a number", expect: "invalid-token", headers: bearer(plug({ cluster_id: 42 })) },
  { name: "cluster_id upper-case UUID", expect: "invalid-token", headers: bearer(plug({ cluster_id: ids.cluster.toUpperCase() })) },
  { name: "cluster_id with braces", expect: "invalid-token", headers: bearer(plug({ cluster_id: `{${ids.cluster}}` })) },
  { name: "installation_id a number", expect: "invalid-token", headers: bearer(plug({ installation_id: 7 })) },
  { name: "groups a string (UserToken)", expect: "invalid-token", headers: bearer(craft({ alg: "HS256" }, validUserPayload({ groups: "system:masters" }))) },
  { name: "organization_ids holding a number (UserToken)", expect: "invalid-token", headers: bearer(craft({ alg: "HS256" }, validUserPayload({ organization_ids: [1] }))) },
  { name: "sub not a UUID", expect: "invalid-token", headers: bearer(plug({ sub: "admin" })) },
  { name: "sub an upper-case UUID", expect: "invalid-token", headers: bearer(plug({ sub: ids.user.toUpperCase() })) },
  { name: "sub a number", expect: "invalid-token", headers: bearer(plug({ sub: 1 })) },
  { name: "sub with a path", expect: "invalid-token", headers: bearer(plug({ sub: `${ids.user}/../admin` })) },
  { name: "installation_name with CR/LF", expect: "invalid-token", headers: bearer(plug({ installation_name: "cert-manager\r\nx-evil: 1" })) },
  { name: "installation_name upper case", expect: "invalid-token", headers: bearer(plug({ installation_name: "Cert-Manager" })) },
  { name: "installation_name of 64 characters", expect: "invalid-token", headers: bearer(plug({ installation_name: "a".repeat(64) })) },
  { name: "installation_name of 57 characters (plugin- prefix would pass 63)", expect: "invalid-token", headers: bearer(plug({ installation_name: "a".repeat(57) })) },
  { name: "installation_name starting with a dash", expect: "invalid-token", headers: bearer(plug({ installation_name: "-cert-manager" })) },
  { name: "installation_name with a slash", expect: "invalid-token", headers: bearer(plug({ installation_name: "cert-manager/../kube-system" })) },
  { name: "plugin_name with a dot", expect: "invalid-token", headers: bearer(plug({ plugin_name: "cert.manager" })) },
  { name: "plugin_version with a space", expect: "invalid-token", headers: bearer(plug({ plugin_version: "1.4.0 beta" })) },
  { name: "definition_hash upper-case hex", expect: "invalid-token", headers: bearer(plug({ definition_hash: `sha256:${"AB".repeat(32)}` })) },
  { name: "definition_hash of another algorithm", expect: "invalid-token", headers: bearer(plug({ definition_hash: `md5:${"ab".repeat(16)}` })) },
];

// ---------------------------------------------------------------- paths
const other = ids.otherCluster;
const paths: Case[] = [
  { name: "%2F in the namespace (decoded like Go: team-a/kube-system/pods)", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/team-a%2Fkube-system/pods` },
  { name: "%2F after the cluster id", expect: "bad-request", path: `/clusters/${ids.cluster}%2Fapi/v1/pods` },
  { name: "%2e%2e segments", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a/pods/%2e%2e/%2e%2e/kube-system/secrets` },
  { name: "%2E%2E (upper-case escapes)", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a/pods/%2E%2E/%2E%2E/kube-system/secrets` },
  { name: "mixed %2e.", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a/%2e./kube-system/secrets` },
  { name: "literal .. segment", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a/../kube-system/secrets` },
  { name: "/./ segment", expect: "bad-request", path: `${C}/api/v1/./namespaces/team-a/pods` },
  { name: "// after the cluster id", expect: "bad-request", path: `${C}//api/v1/namespaces/team-a/pods` },
  { name: "// inside the API path", expect: "bad-request", path: `${C}/api/v1/namespaces//pods` },
  { name: "control: trailing slash", expect: "allow", path: `${C}/api/v1/namespaces/team-a/pods/`, sarVerbs: ["list"] },
  { name: "; parameter on the namespace", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/team-a;x=y/pods` },
  { name: "; parameter on the resource", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/team-a/pods;type=secrets` },
  { name: "/clusters/<id>/../<other>/…", expect: "bad-request", path: `${C}/../${other}/api/v1/namespaces/team-a/pods` },
  { name: "/clusters/<other>/../<id>/…", expect: "cluster-mismatch", path: `/clusters/${other}/../${ids.cluster}/api/v1/namespaces/team-a/pods` },
  { name: "cluster id in upper case", expect: "bad-request", path: `/clusters/${ids.cluster.toUpperCase()}/api/v1/pods` },
  { name: "cluster id percent-encoded", expect: "bad-request", path: `/clusters/%30${ids.cluster.slice(1)}/api/v1/pods` },
  { name: "another cluster", expect: "cluster-mismatch", path: `/clusters/${other}/api/v1/namespaces/team-a/pods` },
  { name: "%00 in the path", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a%00/pods` },
  { name: "%0d%0a in the path", expect: "bad-request", path: `${C}/api/v1/namespaces/team-a%0d%0ax-evil:1/pods` },
  { name: "invalid escape %zz", expect: "bad-request", path: `${C}/api/v1/namespaces/%zz/pods` },
  { name: "invalid UTF-8 %ff", expect: "bad-request", path: `${C}/api/v1/namespaces/%ff/pods` },
  { name: "/healthz of the cluster", expect: "not-found", path: `${C}/healthz` },
  { name: "/logs of the cluster", expect: "not-found", path: `${C}/logs/kube-apiserver.log` },
  { name: "the cluster root", expect: "not-found", path: C },
  { name: "API root in upper case", expect: "not-found", path: `${C}/API/v1/pods` },
  { name: "/clusters/ alone", expect: "bad-request", path: "/clusters/" },
  { name: "/cluster/ (singular)", expect: "bad-request", path: `/cluster/${ids.cluster}/api/v1/pods` },
  { name: "secrets of kube-system", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/kube-system/secrets` },
  { name: "another secret in team-a", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/team-a/secrets/db-password` },
  { name: "control: the allowed secret", expect: "allow", path: `${C}/api/v1/namespaces/team-a/secrets/allowed-secret`, sarVerbs: ["get"] },
  { name: "legacy /watch/ path verb", expect: "allow", path: `${C}/api/v1/watch/namespaces/team-a/configmaps`, sarVerbs: ["watch"] },
  { name: "legacy /proxy/ path verb", expect: "user-sar-denied", path: `${C}/api/v1/proxy/namespaces/team-a/pods/web:8080/` },
  { name: "/api/v1/watch with nothing after it", expect: "bad-request", path: `${C}/api/v1/watch` },
  { name: "control: /version", expect: "allow", path: `${C}/version`, sarVerbs: ["get"] },
  { name: "POST /version", expect: "user-sar-denied", method: "POST", path: `${C}/version` },
  { name: "plugin-proxy: installation id in upper case", expect: "installation-mismatch", policy: "plugin-proxy", path: `/installations/${ids.installation.toUpperCase()}/runtime/` },
  { name: "plugin-proxy: another installation", expect: "installation-mismatch", policy: "plugin-proxy", path: `/installations/${ids.otherInstallation}/runtime/` },
  { name: "plugin-proxy: %2F after the installation id", expect: "not-found", policy: "plugin-proxy", path: `/installations/${ids.installation}%2Fruntime/x` },
  { name: "plugin-proxy: empty installation id", expect: "bad-request", policy: "plugin-proxy", path: "/installations//runtime/" },
  { name: "plugin-proxy: .. back out of the controller", expect: "bad-request", policy: "plugin-proxy", path: `/installations/${ids.installation}/controller/../../${ids.otherInstallation}/controller/status` },
  { name: "plugin-proxy: %2e%2e back out of the controller", expect: "bad-request", policy: "plugin-proxy", path: `/installations/${ids.installation}/controller/%2e%2e/%2e%2e/${ids.otherInstallation}/controller/status` },
  { name: "plugin-proxy: %2F%2e%2e%2F inside a segment", expect: "bad-request", policy: "plugin-proxy", path: `/installations/${ids.installation}/controller/x%2F%2e%2e%2F%2e%2e%2F${ids.otherInstallation}/controller/status` },
  { name: "plugin-proxy: runtimes (not a route)", expect: "not-found", policy: "plugin-proxy", path: `/installations/${ids.installation}/runtimes/x` },
  { name: "plugin-proxy: control, runtime without a trailing slash", expect: "allow", policy: "plugin-proxy", path: `/installations/${ids.installation}/runtime` },
  { name: "plugin-assets: %2e%2e out of a plugin's console", expect: "not-found", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/%2e%2e/%2e%2e/%2e%2e/installations/x" },
  { name: "plugin-assets: .. out of a plugin's console", expect: "not-found", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/../../grafana/1.0.0/console/a.js" },
  { name: "plugin-assets: POST", expect: "method-not-allowed", policy: "plugin-assets", method: "POST", path: "/plugins/cert-manager/1.4.0/console/index.html" },
  { name: "plugin-assets: control, GET", expect: "allow", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/index.html" },
];

// Go's url.ParseQuery (kube-apiserver) drops a pair holding `;` or a bad escape and reads the rest;
// the gateway must authorize the verb kube will really run. configmaps: WATCH only, never list.
const CM = `${C}/api/v1/namespaces/team-a/configmaps`;
const SECRETS = `${C}/api/v1/namespaces/team-a/secrets`;
const queries: Case[] = [
  { name: "control: ?watch=true", expect: "allow", path: `${CM}?watch=true`, sarVerbs: ["watch"] },
  { name: "control: ?watch (empty value is true)", expect: "allow", path: `${CM}?watch`, sarVerbs: ["watch"] },
  { name: "control: ?watch=TRUE", expect: "allow", path: `${CM}?watch=TRUE`, sarVerbs: ["watch"] },
  { name: "control: ?watch=true&watch=false (first wins)", expect: "allow", path: `${CM}?watch=true&watch=false`, sarVerbs: ["watch"] },
  { name: "?watch=false&watch=true (first wins: list)", expect: "user-sar-denied", path: `${CM}?watch=false&watch=true` },
  { name: "?wAtch=1 (names are case-sensitive: list)", expect: "user-sar-denied", path: `${CM}?wAtch=1` },
  { name: "?watch=0", expect: "user-sar-denied", path: `${CM}?watch=0` },
  { name: "?watch=False", expect: "user-sar-denied", path: `${CM}?watch=False` },
  { name: "?watch=fal%73e (escaped false)", expect: "user-sar-denied", path: `${CM}?watch=fal%73e` },
  // A pair Go drops (`;`, a bad escape) is dropped here too, and the rest is reviewed as kube-apiserver
  // reads it (issue 42 §6): a watch whose pair is lost is reviewed as the list kube-apiserver runs.
  { name: "?watch=1; (Go drops the pair: a list)", expect: "user-sar-denied", path: `${CM}?watch=1;` },
  { name: "?watch=1;x=y (Go drops the pair: a list)", expect: "user-sar-denied", path: `${CM}?watch=1;x=y` },
  { name: "?x=1;watch=1 (Go drops the pair: a list)", expect: "user-sar-denied", path: `${CM}?x=1;watch=1` },
  { name: "?watch=%zz (bad escape, Go drops it: a list)", expect: "user-sar-denied", path: `${CM}?watch=%zz` },
  { name: "?watch%zz=1 (bad escape in the name: a list)", expect: "user-sar-denied", path: `${CM}?watch%zz=1` },
  { name: "?watch=1;&watch=0 (the first Go reads is 0: a list)", expect: "user-sar-denied", path: `${CM}?watch=1;&watch=0` },
  { name: "control: ?watch=1&x=%zz (Go drops the bad pair alone)", expect: "allow", path: `${CM}?watch=1&x=%zz`, sarVerbs: ["watch"] },
  { name: "control: ?watch=1&x=a;b (Go drops the bad pair alone)", expect: "allow", path: `${CM}?watch=1&x=a;b`, sarVerbs: ["watch"] },
  { name: "control: ?watch=0%zz&watch=1 (the first Go reads is 1)", expect: "allow", path: `${CM}?watch=0%zz&watch=1`, sarVerbs: ["watch"] },
  { name: "control: ?watch=%31 (escaped 1)", expect: "allow", path: `${CM}?watch=%31`, sarVerbs: ["watch"] },
  { name: "?watch+=1 (name is 'watch ')", expect: "user-sar-denied", path: `${CM}?watch+=1` },
  { name: "#?watch=1 fragment (Go's server keeps the # in the path)", expect: "bad-request", path: `${CM}#?watch=1` },
  { name: "control: fieldSelector on the allowed secret", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret`, sarVerbs: ["list"] },
  { name: "control: fieldSelector with ==", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3D%3Dallowed-secret`, sarVerbs: ["list"] },
  { name: "fieldSelector with != (all but one)", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name!%3Dallowed-secret` },
  { name: "fieldSelector on another field", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.namespace%3Dteam-a` },
  { name: "fieldSelector pair with ; (Go drops it: every secret)", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret;` },
  { name: "fieldSelector with a bad escape (Go drops it: every secret)", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret%zz` },
  { name: "control: fieldSelector beside a %zz pair (issue 42 §6)", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret&%zz=1`, sarVerbs: ["list"] },
  { name: "control: a dropped first fieldSelector, then the allowed one", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3Ddb;&fieldSelector=metadata.name%3Dallowed-secret`, sarVerbs: ["list"] },
  { name: "the allowed fieldSelector dropped, then another one", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret%zz&fieldSelector=metadata.name%3Ddb` },
  { name: "fieldSelector + 10,000 & (Go drops the whole query: every secret)", expect: "bad-request", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret${"&".repeat(10_000)}` },
  { name: "control: fieldSelector + 9,999 & (10,000 parameters, Go reads them)", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret${"&".repeat(9_999)}`, sarVerbs: ["list"] },
  { name: "watch + 10,000 & (Go drops the whole query: a list)", expect: "bad-request", path: `${CM}?watch=1${"&".repeat(10_000)}` },
  { name: "fieldSelector value not UTF-8 once unescaped", expect: "bad-request", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret%FF` },
  { name: "control: fieldSelector repeated (first wins)", expect: "allow", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=metadata.name%3Ddb`, sarVerbs: ["list"] },
  { name: "fieldSelector repeated, other first", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Ddb&fieldSelector=metadata.name%3Dallowed-secret` },
  { name: "fieldSelector that does not parse", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3D%3D%3D` },
  { name: "fieldSelector plus a bad labelSelector (decode fails: every secret)", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret&labelSelector=((` },
  { name: "fieldSelector plus a bad limit (decode fails: every secret)", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret&limit=ten` },
  { name: "fieldSelector name with a slash", expect: "user-sar-denied", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret%2F..` },
  { name: "DELETE with the allowed fieldSelector (deletecollection)", expect: "user-sar-denied", method: "DELETE", path: `${SECRETS}?fieldSelector=metadata.name%3Dallowed-secret` },
];

// ---------------------------------------------------------------- headers
const SMUGGLED = {
  "x-fundament-user-id": ids.otherUser,
  "x-fundament-cluster-id": ids.otherCluster,
  "x-fundament-upstream-service": "kube-apiserver",
  "x-fundament-upstream-namespace": "kube-system",
  "x-konfidence-project": "someone-elses",
  "x-konfidence-roles": "admin",
};
const allowedRoutes: Array<{ route: string; policy: string; path: string; headers: Record<string, string> }> = [
  { route: "kube-api-proxy (PluginToken)", policy: "kube-api-proxy", path: PODS, headers: bearer(P) },
  { route: "kube-api-proxy (UserToken)", policy: "kube-api-proxy", path: PODS, headers: bearer(U) },
  { route: "kube-api-proxy (UserToken cookie)", policy: "kube-api-proxy", path: PODS, headers: { cookie: `fundament_auth=${U}`, ...SAME_ORIGIN } },
  { route: "plugin-proxy runtime", policy: "plugin-proxy", path: RUNTIME, headers: bearer(P) },
  { route: "plugin-proxy controller", policy: "plugin-proxy", path: `/installations/${ids.installation}/controller/status`, headers: bearer(P) },
  { route: "plugin-assets", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/index.html", headers: {} },
];
const smuggling: Case[] = allowedRoutes.flatMap(({ route, policy, path, headers }) =>
  Object.entries(SMUGGLED).map(([name, value]): Case => ({ name: `${route}: client sends ${name}`, expect: "allow", policy, path, headers: { ...headers, [name]: value } })),
);

const WS_BEARER = "base64url.bearer.authorization.k8s.io.";
const credentialsOnward: Case[] = [
  { name: "plugin-proxy: a UserToken in the WebSocket subprotocol", expect: "allow", policy: "plugin-proxy", path: RUNTIME, headers: { ...bearer(P), "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(U)}` } },
  { name: "plugin-proxy: the PluginToken as the only subprotocol", expect: "allow", policy: "plugin-proxy", path: `/installations/${ids.installation}/controller/status`, headers: { ...bearer(P), "sec-websocket-protocol": wsBearer(P) } },
  { name: "plugin-proxy: a UserToken cookie beside the PluginToken", expect: "allow", policy: "plugin-proxy", path: RUNTIME, headers: { ...bearer(P), cookie: `fundament_auth=${U}; theme=dark` } },
  { name: "plugin-assets: a UserToken in the WebSocket subprotocol", expect: "allow", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/index.html", headers: { "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(U)}` } },
  { name: "plugin-assets: a UserToken cookie", expect: "allow", policy: "plugin-assets", path: "/plugins/cert-manager/1.4.0/console/index.html", headers: { cookie: `fundament_auth=${U}` } },
  { name: "kube-api-proxy: the PluginToken in the subprotocol is not passed on", expect: "allow", headers: { "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(P)}` } },
  // What is left of the list once the bearer entry is dropped is the client's text: it must not turn into a 500.
  { name: "kube-api-proxy: non-ASCII beside the bearer subprotocol", expect: "allow", headers: { "sec-websocket-protocol": `v5.channel.k8s.io\u00e9, ${wsBearer(P)}` } },
  { name: "kube-api-proxy: a control character beside the bearer subprotocol", expect: "allow", headers: { "sec-websocket-protocol": `v5\u0001, ${wsBearer(U)}` } },
  { name: "plugin-proxy: non-ASCII beside the bearer subprotocol", expect: "allow", policy: "plugin-proxy", path: RUNTIME, headers: { ...bearer(P), "sec-websocket-protocol": `\u00e9, ${wsBearer(P)}` } },
];

const impersonation: Case[] = [
  ...["impersonate-user", "impersonate-group", "impersonate-uid", "impersonate-extra-scopes", "impersonate-extra-"].map(
    (name): Case => ({ name: `PluginToken with ${name}`, expect: "impersonation-forbidden", headers: { ...bearer(P), [name]: "system:admin" } }),
  ),
  { name: "PluginToken with Impersonate-User (mixed case, lower-cased by Envoy)", expect: "impersonation-forbidden", headers: { ...bearer(P), "Impersonate-User": "admin" } },
  { name: "PluginToken with IMPERSONATE-GROUP in raw headers", expect: "impersonation-forbidden", raw: rawHeaders([["authorization", `Bearer ${P}`], ["IMPERSONATE-GROUP", "system:masters"]]) },
  { name: "PluginToken with an empty impersonate-user", expect: "impersonation-forbidden", headers: { ...bearer(P), "impersonate-user": "" } },
  { name: "PluginToken over WebSocket with impersonate-user", expect: "impersonation-forbidden", headers: { "sec-websocket-protocol": wsBearer(P), "impersonate-user": "admin" } },
];

const claimInjection: Case[] = [
  { name: "installation_name with CR LF and a header", expect: "invalid-token", headers: bearer(plug({ installation_name: "a\r\nx-fundament-user-id: admin" })) },
  { name: "plugin_name with LF", expect: "invalid-token", headers: bearer(plug({ plugin_name: "cert\nmanager" })) },
  { name: "sub with CR LF", expect: "invalid-token", headers: bearer(plug({ sub: `${ids.user}\r\n` })) },
  { name: "cluster_id with NUL", expect: "invalid-token", headers: bearer(plug({ cluster_id: `${ids.cluster}\u0000` })) },
  { name: "installation_id with a tab", expect: "invalid-token", headers: bearer(plug({ installation_id: `${ids.installation}\t` })) },
  { name: "plugin_version with DEL", expect: "invalid-token", headers: bearer(plug({ plugin_version: "1.4.0\u007f" })) },
  { name: "definition_hash with LF", expect: "invalid-token", headers: bearer(plug({ definition_hash: `sha256:${"ab".repeat(32)}\n` })) },
  { name: "plugin-proxy: installation_name with CR LF", expect: "invalid-token", policy: "plugin-proxy", path: RUNTIME, headers: bearer(plug({ installation_name: "a\r\nb" })) },
];

const manyHeaders = (n: number, valueSize = 16) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-junk-${i}`, "v".repeat(valueSize)]));
const oversized: Case[] = [
  { name: "control: 5,000 junk headers around a valid token", expect: "allow", headers: { ...manyHeaders(5_000), ...bearer(P), "x-fundament-user-id": "admin" } },
  { name: "20,000 junk headers, no token", expect: "missing-token", headers: manyHeaders(20_000) },
  { name: "a 1 MB junk header value with a valid token", expect: "allow", headers: { ...bearer(P), "x-junk": "v".repeat(1_000_000) } },
  { name: "a 900 KB cookie holding the token twice", expect: "invalid-token", headers: { cookie: `fundament_auth=${U}; ${"a=b; ".repeat(180_000)}fundament_auth=${U}`, ...SAME_ORIGIN } },
  { name: "1,000 raw Authorization entries", expect: "invalid-token", raw: rawHeaders(Array.from({ length: 1_000 }, () => ["authorization", `Bearer ${P}`] as [string, string])) },
  { name: "a 400 KB path", expect: "user-sar-denied", path: `${C}/api/v1/namespaces/${"a/".repeat(200_000)}` },
  { name: "a CheckRequest over the ext_authz port's 1 MiB limit (Envoy fails closed on the error)", expect: "grpc-error", headers: { ...bearer(P), "x-junk": "v".repeat(1_100_000) } },
  { name: "a 60 KB header name", expect: "allow", headers: { ...bearer(P), ["x-" + "n".repeat(60_000)]: "v" } },
];

const policySelection: Case[] = [
  { name: "no policy", expect: "no-policy", policy: undefined, headers: bearer(P) },
  { name: "policy in another case", expect: "no-policy", policy: "Kube-Api-Proxy", headers: bearer(P) },
  { name: "policy with a trailing space", expect: "no-policy", policy: "kube-api-proxy ", headers: bearer(P) },
  { name: "policy __proto__", expect: "no-policy", policy: "__proto__", headers: bearer(P) },
  { name: "policy constructor", expect: "no-policy", policy: "constructor", headers: bearer(P) },
  { name: "policy toString", expect: "no-policy", policy: "toString", headers: bearer(P) },
  { name: "konfidence-api when Konfidence is not configured", expect: "no-policy", policy: "konfidence-api", path: "/api/v1/projects/p/stages", headers: bearer(U) },
  { name: "a CheckRequest without HTTP attributes", expect: "bad-request", raw: { attributes: { context_extensions: { policy: "kube-api-proxy" } } } },
  { name: "a CheckRequest with an empty method", expect: "bad-request", raw: { attributes: { request: { http: { method: "", path: PODS } }, context_extensions: { policy: "kube-api-proxy" } } } },
];

const CLASSES: Record<string, Case[]> = {
  "JWT: alg none, every case variant": [...noneAlg, ...noneAlgPluginProxy],
  "JWT: other algorithms": otherAlgorithms,
  "JWT: key confusion (HS256 keyed with public keys)": keyConfusion,
  "JWT: jku, x5u, jwk, kid, x5c": keyReferences,
  "JWT: crit and b64": criticalHeaders,
  "JWT: exp, nbf, iat": times,
  "JWT: issuer": issuers,
  "JWT: audience": audiences,
  "JWT: signature and structure": signatures,
  "JWT: duplicate JSON keys": duplicates,
  "JWT: size": sizes,
  "JWT: non-ASCII": nonAscii,
  "Authorization: scheme and whitespace": schemes,
  "Authorization: more than one credential": multiple,
  "Claims of the wrong type or shape": claimTypes,
  "Paths: encodings, dot segments, routes": paths,
  "Query: watch and fieldSelector": queries,
  "Headers: caller-identity smuggling": smuggling,
  "Headers: the caller's credential never travels on": credentialsOnward,
  "Headers: impersonation": impersonation,
  "Headers: CR/LF and control characters in claims": claimInjection,
  "Headers: oversized": oversized,
  "Policy selection and malformed CheckRequests": policySelection,
};

// ---------------------------------------------------------------- the run
let world: FakeWorld;
let server: TestServer;
const outcomes = new Map<string, { tried: number; allowed: number; denied: number; grpcErrors: number }>();

beforeAll(async () => {
  world = new FakeWorld();
  world.sarAnswer = (_cluster, _user, a) => sarAllows(a);
  server = await startTestServer(world);
});
afterAll(async () => {
  const status = await healthStatus(`127.0.0.1:${server.server.grpcPort}`);
  await server.stop();
  keyServer.close();
  const total = [...outcomes.values()].reduce((n, o) => n + o.tried, 0);
  console.log(
    `adversarial cases: ${total}, health after the batch: ${status}\n${[...outcomes]
      .map(([cls, o]) => `  ${cls.padEnd(52)} ${String(o.tried).padStart(4)} tried, ${String(o.allowed).padStart(3)} allowed (controls), ${String(o.denied).padStart(4)} denied, ${o.grpcErrors} gRPC errors`)
      .join("\n")}`,
  );
});

function request(c: Case): object {
  if (c.raw !== undefined) return c.raw;
  return envoyCheckRequest({ method: c.method ?? "GET", path: c.path ?? PODS, headers: headersOf(c), policy: "policy" in c ? c.policy : "kube-api-proxy" });
}

function headersOf(c: Case): Record<string, string> {
  return c.headers ?? bearer(P);
}

/** Every credential-looking string the request carried: none may come back in a denial. */
function credentialsIn(c: Case): string[] {
  const values = Object.values(headersOf(c)).flatMap((v) => v.split(/[\s,;=]+/));
  return values.filter((v) => /^[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}\./.test(v)).flatMap((t) => [t, signatureOf(t)]).filter((t) => t.length >= 20);
}

for (const [cls, cases] of Object.entries(CLASSES)) {
  describe(cls, () => {
    it.each(cases)("$name → $expect", async (c) => {
      const tally = outcomes.get(cls) ?? { tried: 0, allowed: 0, denied: 0, grpcErrors: 0 };
      outcomes.set(cls, tally);
      tally.tried++;
      world.sarRequests = [];
      let raw: CheckResponse;
      try {
        raw = await server.checkRaw(request(c));
      } catch (err) {
        tally.grpcErrors++;
        expect(c.expect).toBe("grpc-error");
        expect((err as { code?: number }).code).toBe(8); // RESOURCE_EXHAUSTED, decided by grpc-js before any code of ours
        return;
      }
      const res = summarize(raw);
      expect(typeof raw.status.code).toBe("number");
      if (c.expect === "allow") {
        expect(res).toMatchObject({ allowed: true, grpc: 0 });
        if (!res.allowed) return;
        tally.allowed++;
        assertHygiene(c, res);
        if (c.sarVerbs !== undefined) expect(world.sarRequests.map((a) => a.verb).sort()).toEqual([...c.sarVerbs].sort());
        return;
      }
      expect(res.allowed ? "allow" : res.reason).toBe(c.expect);
      if (res.allowed) return;
      tally.denied++;
      const { http, grpc } = REASONS[c.expect as keyof typeof REASONS];
      expect({ http: res.http, grpc: res.grpc, reason: res.headers["x-portcullis-reason"] }).toEqual({ http, grpc, reason: c.expect });
      const body = JSON.stringify(res.body);
      for (const secret of credentialsIn(c)) expect(body).not.toContain(secret);
    });
  });
}

type Allowed = Extract<ReturnType<typeof summarize>, { allowed: true }>;

/** DESIGN.md "Header hygiene", on every allow. */
function assertHygiene(c: Case, res: Allowed): void {
  const sent = Object.fromEntries(Object.entries(headersOf(c)).map(([k, v]) => [k.toLowerCase(), v]));
  for (const [name, value] of Object.entries(sent)) {
    if (!name.startsWith("x-fundament-") && !name.startsWith("x-konfidence-")) continue;
    // Removed, or overwritten with portcullis's own value, never the client's.
    if (res.removed.includes(name)) continue;
    expect(res.set[name], `${name} survived`).toBeDefined();
    expect(res.set[name]).not.toBe(value);
  }
  expect(res.appendActions.every((a) => a === "OVERWRITE_IF_EXISTS_OR_ADD")).toBe(true);
  const policy = "policy" in c ? c.policy : "kube-api-proxy";
  const callerCredential = sent["authorization"] ?? "";
  if (policy === "kube-api-proxy") {
    expect(res.set["authorization"]).toMatch(/^Bearer sa-token-for-/);
    if (sent["cookie"] !== undefined) expect(res.removed).toContain("cookie");
  } else {
    // The caller's own credential never reaches a plugin pod or the asset server.
    expect(res.set["authorization"]).toBeUndefined();
    for (const name of ["authorization", "cookie"]) if (name in sent) expect(res.removed).toContain(name);
  }
  if (callerCredential !== "") expect(Object.values(res.set)).not.toContain(callerCredential);
  // A bearer subprotocol is a credential too: it is dropped from what travels on, on every route.
  const protocols = sent["sec-websocket-protocol"];
  if (protocols?.includes(WS_BEARER)) {
    const forwarded = res.removed.includes("sec-websocket-protocol") ? "" : (res.set["sec-websocket-protocol"] ?? protocols);
    expect(forwarded).not.toContain(WS_BEARER);
  }
}

it("never fetched a key from a URL named in a token header", () => {
  expect(keyServerHits).toEqual([]);
});

it("keeps serving after the whole batch", async () => {
  expect(await healthStatus(`127.0.0.1:${server.server.grpcPort}`)).toBe("SERVING");
  expect(await server.check({ path: PODS, headers: bearer(await pluginToken()), policy: "kube-api-proxy" })).toMatchObject({ allowed: true });
  expect(server.logs.filter((l) => l["msg"] === "check failed")).toEqual([]);
});
