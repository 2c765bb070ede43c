/**
 * OIDC discovery and token verification against a LOCAL provider (https on 127.0.0.1, its CA made
 * by the test and trusted through configuration): caching and coalescing, key rotation, the
 * unknown-kid flood, the limits on what a provider may answer, and the session provider's groups.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { afterEach, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import type { CacheLookup } from "../../src/metrics/events.ts";
import { OidcProviders, type OidcProvidersOptions } from "../../src/konfidence/oidc.ts";
import { ProviderHttp } from "../../src/konfidence/provider-http.ts";
import { OidcSessions } from "../../src/konfidence/session.ts";
import { newSigningKey, startLocalProvider, type LocalProvider } from "./oidc-provider.ts";
import { TEST_OIDC_OPTIONS } from "../support/oidc-providers.ts";

const AUD = "https://konfidence.example/api";
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((c) => c()));
});

async function provider(): Promise<LocalProvider> {
  const p = await startLocalProvider();
  cleanups.push(() => p.stop());
  return p;
}

function verifier(ca: string | undefined, options: Partial<OidcProvidersOptions> & { maxResponseBytes?: number } = {}) {
  const http = new ProviderHttp({ ...(ca === undefined ? {} : { ca }), timeoutMs: 1_000, maxResponseBytes: options.maxResponseBytes ?? 65_536 });
  cleanups.push(() => http.close());
  const providers = new OidcProviders({
    http,
    ...TEST_OIDC_OPTIONS,
    ...options,
  });
  return { http, providers };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("verification through discovery and JWKS", () => {
  it("verifies a token, then answers from cache: one discovery and one JWKS fetch in all", async () => {
    const p = await provider();
    const key = p.addKey();
    const { providers } = verifier(p.ca);
    const token = await p.sign(key, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD, repository: "acme/app" });
    const lookups: string[] = [];
    const record = (m: unknown) => lookups.push(`${(m as CacheLookup).cache} ${(m as CacheLookup).outcome}`);
    subscribe("portcullis:cache", record);
    try {
      const first = await providers.verify(p.endpoint, token);
      const second = await providers.verify(p.endpoint, token);
      expect(first).toEqual({
        ok: true,
        token: { issuer: p.issuer, sub: "repo:acme/app:ref:refs/heads/main", audiences: [AUD], claims: expect.objectContaining({ repository: "acme/app", iss: p.issuer }) },
      });
      expect(second).toEqual(first);
    } finally {
      unsubscribe("portcullis:cache", record);
    }
    expect(lookups).toEqual(["oidc_discovery miss", "oidc_verified_token miss", "oidc_verified_token hit"]);
    expect(p.fetches).toEqual({ discovery: 1, jwks: 1, userinfo: 0 });
  });

  it("coalesces a cold burst: 50 different tokens, one discovery and one JWKS fetch", async () => {
    const p = await provider();
    const key = p.addKey();
    const { providers } = verifier(p.ca);
    const tokens = await Promise.all(Array.from({ length: 50 }, (_, i) => p.sign(key, { sub: `w${i}`, aud: AUD })));
    const results = await Promise.all(tokens.map((t) => providers.verify(p.endpoint, t)));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(p.fetches).toEqual({ discovery: 1, jwks: 1, userinfo: 0 });
  });

  it.each([
    { name: "signed by a key the provider never published", mint: async (p: LocalProvider) => p.sign(newSigningKey(), { sub: "x", aud: AUD }), detail: "no key of the provider matches the token" },
    { name: "a published kid, another key's signature", mint: async (p: LocalProvider, kid: string) => p.sign(newSigningKey(), { sub: "x", aud: AUD }, { kid }), detail: "token rejected (ERR_JWS_SIGNATURE_VERIFICATION_FAILED)" },
    { name: "of another issuer, signed with the provider's key", mint: async (p: LocalProvider, _kid: string, key = p.addKey()) => p.sign(key, { sub: "x", aud: AUD }, { issuer: `${p.issuer}/other` }), detail: 'claim iss failed: check_failed' },
    { name: "expired", mint: async (p: LocalProvider, _kid: string, key = p.addKey()) => p.sign(key, { sub: "x", aud: AUD }, { expiresInSeconds: -60 }), detail: "token expired" },
    { name: "without sub", mint: async (p: LocalProvider, _kid: string, key = p.addKey()) => p.sign(key, { aud: AUD }), detail: 'claim sub failed: missing' },
  ])("rejects a token $name", async ({ mint, detail }) => {
    const p = await provider();
    const published = p.addKey();
    const { providers } = verifier(p.ca);
    const result = await providers.verify(p.endpoint, await mint(p, published.kid));
    expect(result).toEqual({ ok: false, detail });
  });

  it("rotates keys: a new kid verifies after the cooldown; a removed key stops after the bounded max age", async () => {
    const p = await provider();
    const old = p.addKey();
    const { providers } = verifier(p.ca, { jwksCooldownMs: 200, jwksMaxAgeMs: 1_500 });
    const oldToken = await p.sign(old, { sub: "old", aud: AUD });
    expect(await providers.verify(p.endpoint, oldToken)).toMatchObject({ ok: true });
    expect(p.fetches.jwks).toBe(1);

    // The provider publishes a new key; past the cooldown an unknown kid triggers one refetch.
    const fresh = p.addKey();
    await sleep(250);
    expect(await providers.verify(p.endpoint, await p.sign(fresh, { sub: "new", aud: AUD }))).toMatchObject({ ok: true });
    expect(p.fetches.jwks).toBe(2);

    // The provider removes the old key: within the max age, the cached key set still has it ...
    p.removeKey(old.kid);
    expect(await providers.verify(p.endpoint, await p.sign(old, { sub: "old-2", aud: AUD }))).toMatchObject({ ok: true });
    // ... past it, the set is refetched, and neither a fresh old-key token nor the cached one verifies.
    await sleep(1_600);
    expect(await providers.verify(p.endpoint, await p.sign(old, { sub: "old-3", aud: AUD }))).toEqual({ ok: false, detail: "no key of the provider matches the token" });
    expect(await providers.verify(p.endpoint, oldToken)).toEqual({ ok: false, detail: "no key of the provider matches the token" });
    expect(await providers.verify(p.endpoint, await p.sign(fresh, { sub: "new-2", aud: AUD }))).toMatchObject({ ok: true });
    expect(p.fetches.jwks).toBe(3);
  });

  it("does not turn an unknown-kid flood into a JWKS fetch per request", async () => {
    const p = await provider();
    p.addKey();
    const { providers } = verifier(p.ca, { jwksCooldownMs: 30_000 });
    const attacker = newSigningKey();
    const tokens = await Promise.all(Array.from({ length: 500 }, () => p.sign(attacker, { sub: "x", aud: AUD }, { kid: crypto.randomUUID() })));
    const first = await Promise.all(tokens.slice(0, 250).map((t) => providers.verify(p.endpoint, t)));
    const rest: Awaited<ReturnType<typeof providers.verify>>[] = [];
    for (const t of tokens.slice(250)) rest.push(await providers.verify(p.endpoint, t));
    expect([...first, ...rest].every((r) => !r.ok)).toBe(true);
    // The first key set, plus at most one refetch for unknown kids within the cooldown.
    expect(p.fetches.jwks).toBeLessThanOrEqual(2);
    expect(p.fetches.discovery).toBe(1);
  });
});

describe("what a provider may answer", () => {
  it.each([
    { name: "unreachable", setup: async () => ({ endpoint: "https://127.0.0.1:1/.well-known/openid-configuration", ca: undefined }) },
    { name: "a certificate the configuration does not trust", setup: async (p: LocalProvider) => ({ endpoint: p.endpoint, ca: undefined }) },
    { name: "slower than the deadline", setup: async (p: LocalProvider) => ((p.misbehave.delayMs = 1_500), { endpoint: p.endpoint, ca: p.ca }) },
    { name: "a redirect (never followed)", setup: async (p: LocalProvider) => ((p.misbehave.discoveryStatus = 302), { endpoint: p.endpoint, ca: p.ca }) },
    { name: "a discovery error", setup: async (p: LocalProvider) => ((p.misbehave.discoveryStatus = 500), { endpoint: p.endpoint, ca: p.ca }) },
    { name: "a document naming another issuer", setup: async (p: LocalProvider) => ((p.misbehave.discoveryIssuer = "https://token.actions.githubusercontent.com"), { endpoint: p.endpoint, ca: p.ca }) },
    { name: "a jwks_uri over http", setup: async (p: LocalProvider) => ((p.misbehave.jwksUri = p.issuer.replace("https:", "http:") + "/jwks"), { endpoint: p.endpoint, ca: p.ca }) },
    { name: "an oversized JWKS", setup: async (p: LocalProvider) => ((p.misbehave.oversizeJwksBytes = 100_000), { endpoint: p.endpoint, ca: p.ca }) },
  ])("$name → DependencyUnavailable (503), never a verdict on the token", async ({ setup }) => {
    const p = await provider();
    const key = p.addKey();
    const { endpoint, ca } = await setup(p);
    const { providers } = verifier(ca);
    const token = await p.sign(key, { sub: "x", aud: AUD });
    await expect(providers.verify(endpoint, token)).rejects.toBeInstanceOf(DependencyUnavailable);
  });

  it("recovers when the provider comes back: a failure is not cached, only paused (counts: provider-backoff.test.ts)", async () => {
    const p = await provider();
    const key = p.addKey();
    const { providers } = verifier(p.ca, { failureBackoffInitialMs: 100 });
    p.misbehave.discoveryStatus = 503;
    const token = await p.sign(key, { sub: "x", aud: AUD });
    await expect(providers.verify(p.endpoint, token)).rejects.toBeInstanceOf(DependencyUnavailable);
    delete p.misbehave.discoveryStatus;
    await sleep(150);
    expect(await providers.verify(p.endpoint, token)).toMatchObject({ ok: true });
    expect(p.fetches.discovery).toBe(2);
  });
});

describe("session identity from the platform provider", () => {
  async function sessions(userInfo: boolean) {
    const p = await provider();
    const key = p.addKey();
    const { http, providers } = verifier(p.ca);
    const s = new OidcSessions(providers, http, { endpoint: p.endpoint, audience: "konfidence-ui", groupsClaim: "groups", userInfo, userInfoTtlMs: 60_000, cacheMaxEntries: 100 });
    return { p, key, s };
  }

  it("reads groups from the token's claim", async () => {
    const { p, key, s } = await sessions(false);
    const token = await p.sign(key, { sub: "ada", aud: "konfidence-ui", groups: ["project-devs", "staff"] });
    expect(await s.verify(token)).toEqual({ ok: true, issuer: p.issuer, sub: "ada", groups: new Set(["project-devs", "staff"]) });
    expect(p.fetches.userinfo).toBe(0);
  });

  it("completes missing groups from UserInfo, once per token", async () => {
    const { p, key, s } = await sessions(true);
    p.userInfo.set("ada", { sub: "ada", groups: ["project-pms"] });
    const token = await p.sign(key, { sub: "ada", aud: "konfidence-ui" });
    expect(await s.verify(token)).toEqual({ ok: true, issuer: p.issuer, sub: "ada", groups: new Set(["project-pms"]) });
    expect(await s.verify(token)).toEqual({ ok: true, issuer: p.issuer, sub: "ada", groups: new Set(["project-pms"]) });
    expect(p.fetches.userinfo).toBe(1);
  });

  it.each([
    { name: "another audience", claims: { sub: "ada", aud: "some-other-client", groups: [] }, detail: "the session token is for another audience" },
    { name: "groups that are not a list of strings", claims: { sub: "ada", aud: "konfidence-ui", groups: "admins" }, detail: "claim groups is not a list of strings" },
    { name: "UserInfo refusing the token", claims: { sub: "grace", aud: "konfidence-ui" }, detail: "UserInfo refused the session token" },
    { name: "UserInfo answering for someone else", claims: { sub: "mallory", aud: "konfidence-ui" }, detail: "UserInfo answered for another subject" },
  ])("rejects $name", async ({ claims, detail }) => {
    const { p, key, s } = await sessions(true);
    p.userInfo.set("mallory", { sub: "ada", groups: ["platform-admins"] });
    expect(await s.verify(await p.sign(key, claims))).toEqual({ ok: false, detail });
  });
});
