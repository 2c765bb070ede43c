/**
 * FUN-17 §9's asymmetric tokens: the REAL TokenVerifier with jose's remote JWKS (src/tokens/jwks.ts)
 * against a local https JWKS. Every algorithm in every mode; the migration metric; rotation (a new
 * kid is fetched on first sight, a removed key stops verifying once the key set's cache age has
 * passed); unknown kids refetch at most once per cooldown; a failing JWKS is a 503, never an allow
 * and never a verdict on HS256 tokens; algorithm confusion refused in every mode.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { createHmac } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { configSchema } from "../../src/config/schema.ts";
import type { TokenVerified } from "../../src/metrics/events.ts";
import { type AsymmetricAlgorithm, type TokenMode, TokenVerifier } from "../../src/tokens/fundament.ts";
import { remotePublicKeys } from "../../src/tokens/jwks.ts";
import { type AuthnKey, newAuthnKey, startJwksServer, type JwksServer } from "../support/jwks-server.ts";
import { pluginClaims, SECRET, sign, userClaims } from "../support/tokens.ts";
import { b64url, craft, validPluginPayload } from "../support/jwt-craft.ts";

let jwks: JwksServer;
const keys = {} as Record<AsymmetricAlgorithm, AuthnKey>;

beforeAll(async () => {
  jwks = await startJwksServer();
  for (const alg of ["EdDSA", "ES256", "RS256"] as const) keys[alg] = jwks.addKey(alg);
});
afterAll(async () => jwks.stop());

function verifier(mode: TokenMode, options: { cacheMaxAgeMs?: number; cooldownMs?: number; algorithms?: AsymmetricAlgorithm[]; url?: string } = {}) {
  return new TokenVerifier({
    mode,
    secrets: mode === "asymmetric" ? [] : [new TextEncoder().encode(SECRET)],
    ...(mode === "hs256"
      ? {}
      : {
          publicKeys: remotePublicKeys({
            url: options.url ?? jwks.url,
            algorithms: options.algorithms ?? ["EdDSA", "ES256", "RS256"],
            cacheMaxAgeMs: options.cacheMaxAgeMs ?? 600_000,
            cooldownMs: options.cooldownMs ?? 30_000,
            timeoutMs: 2_000,
            caFile: jwks.caFile,
          }),
        }),
    issuer: "fundament-authn-api",
    clockToleranceSeconds: 5,
    maxLifetimeSeconds: { user: 86_400, plugin: 900 },
    cacheMaxEntries: 1_000,
  });
}

const MODES = ["hs256", "migration", "asymmetric"] as const;
const accepts = (mode: TokenMode, kind: "HS256" | "asymmetric") => (kind === "HS256" ? mode !== "asymmetric" : mode !== "hs256");

describe.each(MODES)("mode %s", (mode) => {
  it.each(["EdDSA", "ES256", "RS256"] as const)("%s PluginTokens and UserTokens: accepted unless the mode is hs256, same claim checks", async (alg) => {
    const v = verifier(mode);
    const plugin = await v.verify(await jwks.sign(keys[alg], pluginClaims()));
    const user = await v.verify(await jwks.sign(keys[alg], userClaims()));
    expect(plugin.ok && plugin.claims.type).toBe(accepts(mode, "asymmetric") ? "plugin" : false);
    expect(user.ok && user.claims.type).toBe(accepts(mode, "asymmetric") ? "user" : false);
    // The claim checks are the HS256 ones: a malformed claim or another issuer is refused whatever signed it.
    expect((await v.verify(await jwks.sign(keys[alg], pluginClaims({ cluster_id: "not-a-uuid" })))).ok).toBe(false);
    expect((await v.verify(await jwks.sign(keys[alg], pluginClaims(), { expiresInSeconds: -60 }))).ok).toBe(false);
  });

  it("HS256 with the shared secret: refused only in asymmetric mode", async () => {
    const result = await verifier(mode).verify(await sign(pluginClaims()));
    expect(result.ok).toBe(accepts(mode, "HS256"));
    if (!result.ok && mode === "asymmetric") expect(result.detail).toContain("HS256 is not accepted");
  });

  // Algorithm confusion: none of these may verify in any mode.
  const rsaPem = () => keys.RS256.publicKey.export({ type: "spki", format: "pem" }).toString();
  const confusions: Array<{ name: string; token: () => Promise<string> | string }> = [
    { name: "HS256 keyed with the RS256 public key PEM", token: () => craft({ alg: "HS256", kid: keys.RS256.kid }, validPluginPayload(), { hmac: "sha256", secret: rsaPem() }) },
    { name: "HS256 keyed with the RS256 public key DER", token: () => craft({ alg: "HS256" }, validPluginPayload(), { hmac: "sha256", secret: keys.RS256.publicKey.export({ type: "spki", format: "der" }) }) },
    { name: "HS256 keyed with the ES256 public JWK text", token: () => craft({ alg: "HS256", kid: keys.ES256.kid }, validPluginPayload(), { hmac: "sha256", secret: JSON.stringify(keys.ES256.jwk) }) },
    { name: "HS256 keyed with the Ed25519 public key bytes", token: () => craft({ alg: "HS256", kid: keys.EdDSA.kid }, validPluginPayload(), { hmac: "sha256", secret: Buffer.from(String(keys.EdDSA.jwk["x"]), "base64url") }) },
    { name: "RS256 signature, header swapped to ES256 (same kid)", token: async () => swapAlg(await jwks.sign(keys.RS256, pluginClaims()), "ES256") },
    { name: "ES256 signature, header swapped to EdDSA (same kid)", token: async () => swapAlg(await jwks.sign(keys.ES256, pluginClaims()), "EdDSA") },
    { name: "EdDSA signature, header swapped to HS256 (same kid)", token: async () => swapAlg(await jwks.sign(keys.EdDSA, pluginClaims()), "HS256") },
    { name: "RS256 signature, header swapped to PS256", token: async () => swapAlg(await jwks.sign(keys.RS256, pluginClaims()), "PS256") },
    { name: "ES256 with an unknown kid (an attacker's key)", token: () => jwks.sign(newAuthnKey("ES256"), pluginClaims()) },
    { name: "RS256 by an attacker's key naming the real kid", token: () => jwks.sign(newAuthnKey("RS256"), pluginClaims(), { kid: keys.RS256.kid }) },
    { name: "EdDSA by an attacker's key, no kid", token: () => craft({ alg: "EdDSA" }, validPluginPayload(), { ed25519: newAuthnKey("EdDSA").privateKey }) },
    { name: "an attacker's key embedded as jwk", token: () => { const k = newAuthnKey("ES256"); return craft({ alg: "ES256", jwk: k.jwk }, validPluginPayload(), { ec: k.privateKey }); } },
    { name: "alg none, the real kid", token: () => craft({ alg: "none", kid: keys.ES256.kid }, validPluginPayload(), { signature: "" }) },
    { name: "alg missing, a real signature", token: async () => dropAlg(await jwks.sign(keys.ES256, pluginClaims())) },
  ];
  it.each(confusions)("refuses $name", async ({ token }) => {
    const result = await verifier(mode).verify(await token());
    expect(result.ok).toBe(false);
  });
});

/** The same signature under a header naming another algorithm (the kid kept). */
function swapAlg(jwt: string, alg: string): string {
  const [h, p, s] = jwt.split(".");
  const header = JSON.parse(Buffer.from(h!, "base64url").toString()) as Record<string, unknown>;
  return `${b64url(JSON.stringify({ ...header, alg }))}.${p}.${s}`;
}

function dropAlg(jwt: string): string {
  const [h, p, s] = jwt.split(".");
  const { alg: _alg, ...header } = JSON.parse(Buffer.from(h!, "base64url").toString()) as Record<string, unknown>;
  return `${b64url(JSON.stringify(header))}.${p}.${s}`;
}

describe("the migration metric", () => {
  it("counts each accepted token by algorithm and type, cache hits included", async () => {
    const seen: TokenVerified[] = [];
    const onVerified = (m: unknown) => void seen.push(m as TokenVerified);
    subscribe("portcullis:token-verified", onVerified);
    try {
      const v = verifier("migration");
      const hs = await sign(userClaims());
      await v.verify(hs);
      await v.verify(hs);
      await v.verify(await jwks.sign(keys.EdDSA, pluginClaims()));
      await v.verify(await jwks.sign(keys.RS256, userClaims()));
      await v.verify(craft({ alg: "HS256" }, validPluginPayload(), { hmac: "sha256", secret: "wrong" }));
    } finally {
      unsubscribe("portcullis:token-verified", onVerified);
    }
    expect(seen).toEqual([
      { alg: "HS256", type: "user" },
      { alg: "HS256", type: "user" },
      { alg: "EdDSA", type: "plugin" },
      { alg: "RS256", type: "user" },
    ]);
  });
});

describe("the migration metric, from the cache", () => {
  // An HS256 token's claims are cached alone; a public key's verification keeps its algorithm beside them.
  it("counts a cache hit on a token verified with a public key by its own algorithm", async () => {
    const seen: TokenVerified[] = [];
    const onVerified = (m: unknown) => void seen.push(m as TokenVerified);
    subscribe("portcullis:token-verified", onVerified);
    try {
      const v = verifier("migration");
      const es = await jwks.sign(keys.ES256, pluginClaims());
      const hs = await sign(pluginClaims());
      for (const token of [es, hs, es, hs]) expect((await v.verify(token)).ok).toBe(true);
    } finally {
      unsubscribe("portcullis:token-verified", onVerified);
    }
    expect(seen).toEqual([
      { alg: "ES256", type: "plugin" },
      { alg: "HS256", type: "plugin" },
      { alg: "ES256", type: "plugin" },
      { alg: "HS256", type: "plugin" },
    ]);
  });
});

describe("rotation and the key set's cache", () => {
  it("a new kid is accepted on first sight; a removed key stops verifying once the cache age has passed", async () => {
    const v = verifier("asymmetric", { cacheMaxAgeMs: 1_000, cooldownMs: 100 });
    const old = keys.ES256;
    const before = await jwks.sign(old, pluginClaims());
    expect((await v.verify(before)).ok).toBe(true);

    await new Promise((r) => setTimeout(r, 150)); // past the cooldown: an unknown kid may refetch
    const next = jwks.addKey("ES256");
    expect((await v.verify(await jwks.sign(next, pluginClaims()))).ok).toBe(true);

    jwks.removeKey(old.kid);
    // Within the cache age the old key is still the key set's (bounded staleness, documented).
    expect((await v.verify(await jwks.sign(old, pluginClaims()))).ok).toBe(true);
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await v.verify(await jwks.sign(old, pluginClaims()))).toMatchObject({ ok: false });
    // A token verified before the removal is not served from the verified-token cache past the cache age either.
    expect(await v.verify(before)).toMatchObject({ ok: false });
    keys.ES256 = next;
  });

  it("a flood of unknown kids refetches at most once per cooldown", async () => {
    const v = verifier("asymmetric", { cooldownMs: 60_000 });
    expect((await v.verify(await jwks.sign(keys.EdDSA, pluginClaims()))).ok).toBe(true);
    const fetched = jwks.fetches;
    const results = await Promise.all(Array.from({ length: 50 }, () => jwks.sign(newAuthnKey("EdDSA"), pluginClaims()).then((t) => v.verify(t))));
    expect(results.every((r) => !r.ok)).toBe(true);
    expect(jwks.fetches - fetched).toBeLessThanOrEqual(1);
  });
});

describe("a JWKS that cannot be fetched", () => {
  it.each([
    { name: "answers 500", setup: () => (jwks.failWith = 500) },
    { name: "refuses connections", url: "https://127.0.0.1:1/jwks" },
  ])("$name: asymmetric tokens are a 503 (DependencyUnavailable), HS256 tokens still verify in migration", async ({ setup, url }) => {
    setup?.();
    try {
      const v = verifier("migration", url === undefined ? {} : { url });
      await expect(v.verify(await jwks.sign(keys.RS256, pluginClaims()))).rejects.toBeInstanceOf(DependencyUnavailable);
      expect((await v.verify(await sign(pluginClaims()))).ok).toBe(true);
    } finally {
      jwks.failWith = undefined;
    }
  });

  it("never fetches from a URL that is not https", () => {
    expect(() => remotePublicKeys({ url: "http://127.0.0.1:1/jwks", algorithms: ["ES256"], cacheMaxAgeMs: 1_000, cooldownMs: 100, timeoutMs: 100 })).toThrow(/https/);
  });
});

describe("algorithms narrowed by configuration", () => {
  it("refuses a real key's token whose algorithm is not configured", async () => {
    const v = verifier("asymmetric", { algorithms: ["EdDSA"] });
    expect((await v.verify(await jwks.sign(keys.EdDSA, pluginClaims()))).ok).toBe(true);
    expect((await v.verify(await jwks.sign(keys.RS256, pluginClaims()))).ok).toBe(false);
  });
});

describe("tokens configuration", () => {
  const jwksConfig = { url: "https://authn-api.fundament-system.svc/.well-known/jwks.json" };
  const secrets = [{ env: "S" }];
  it.each([
    { name: "hs256 with secrets", tokens: { secrets }, ok: true },
    { name: "hs256 is the default mode", tokens: { secrets }, ok: true, mode: "hs256" },
    { name: "hs256 without secrets", tokens: {}, ok: false },
    { name: "hs256 with a jwks too", tokens: { secrets, jwks: jwksConfig }, ok: false },
    { name: "migration with both", tokens: { mode: "migration", secrets, jwks: jwksConfig }, ok: true },
    { name: "migration without jwks", tokens: { mode: "migration", secrets }, ok: false },
    { name: "migration without secrets", tokens: { mode: "migration", jwks: jwksConfig }, ok: false },
    { name: "asymmetric with jwks", tokens: { mode: "asymmetric", jwks: jwksConfig }, ok: true },
    { name: "asymmetric with a secret left in (still a forge path)", tokens: { mode: "asymmetric", secrets, jwks: jwksConfig }, ok: false },
    { name: "a jwks over http", tokens: { mode: "asymmetric", jwks: { url: "http://authn-api/jwks" } }, ok: false },
    { name: "an unknown algorithm", tokens: { mode: "asymmetric", jwks: { ...jwksConfig, algorithms: ["HS256"] } }, ok: false },
    { name: "an unknown mode", tokens: { mode: "both", secrets }, ok: false },
  ])("$name → valid: $ok", ({ tokens, ok, mode }) => {
    const result = configSchema.safeParse({ tokens, openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" } });
    expect(result.success).toBe(ok);
    if (mode !== undefined && result.success) expect(result.data.tokens?.mode).toBe(mode);
  });
});

// A sanity check that the confusion table is not vacuous: an HMAC over the same input with the real secret verifies in hs256.
it("control: the crafted HS256 token with the real secret verifies (hs256)", async () => {
  const input = `${b64url(JSON.stringify({ alg: "HS256" }))}.${b64url(JSON.stringify(validPluginPayload()))}`;
  const token = `${input}.${createHmac("sha256", SECRET).update(input).digest("base64url")}`;
  expect((await verifier("hs256").verify(token)).ok).toBe(true);
});
