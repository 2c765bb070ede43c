/** TokenVerifier with frozen time: classification by aud, claim formats, rotation, tolerance, caching. */
import { describe, expect, it } from "vitest";
import { mentionsPluginAudience, SharedStrings, TokenVerifier } from "../../src/tokens/fundament.ts";
import { timersArmedBy } from "../support/timers-armed.ts";
import { ids, OLD_SECRET, pluginClaims, SECRET, sign, userClaims } from "../support/tokens.ts";

const NOW = 1_900_000_000_000;
const nowS = NOW / 1000;
const verifier = (now = () => NOW) =>
  new TokenVerifier({
    mode: "hs256",
    secrets: [SECRET, OLD_SECRET].map((s) => new TextEncoder().encode(s)),
    issuer: "fundament-authn-api",
    clockToleranceSeconds: 5,
    maxLifetimeSeconds: { user: 86_400, plugin: 900 },
    cacheMaxEntries: 100,
    now,
  });
const at = { exp: nowS + 900, iat: nowS };

describe("TokenVerifier", () => {
  it.each([
    { name: "UserToken", claims: userClaims(), type: "user" },
    { name: "PluginToken", claims: pluginClaims(), type: "plugin" },
    { name: "another service's token", claims: userClaims({ aud: "organization-api" }), type: "other-audience" },
    { name: "aud array with one known audience", claims: pluginClaims({ aud: ["fundament-plugin", "x"] }), type: "plugin" },
    { name: "unpinned definition hash claim", claims: pluginClaims({ definition_hash: "" }), type: "plugin" },
  ])("classifies $name as $type", async ({ claims, type }) => {
    const result = await verifier().verify(await sign(claims, at));
    expect(result.ok && result.claims.type).toBe(type);
  });

  it.each([
    { name: "both audiences", claims: userClaims({ aud: ["fundament-user", "fundament-plugin"] }) },
    { name: "sub not a UUID", claims: userClaims({ sub: "admin" }) },
    { name: "sub upper-case UUID", claims: userClaims({ sub: "5B0C3C2E-7F3A-4D8E-9A51-2D9F0C1E8A01" }) },
    { name: "groups not an array", claims: userClaims({ groups: "admins" }) },
    { name: "organization_ids holds a number", claims: userClaims({ organization_ids: [1] }) },
    { name: "cluster_id a number", claims: pluginClaims({ cluster_id: 7 }) },
    { name: "installation_id missing", claims: pluginClaims({ installation_id: undefined }) },
    { name: "installation_name with CR/LF", claims: pluginClaims({ installation_name: "a\r\nb" }) },
    { name: "plugin_name upper case", claims: pluginClaims({ plugin_name: "Cert" }) },
    { name: "definition_hash not sha256", claims: pluginClaims({ definition_hash: "md5:abc" }) },
    { name: "definition_hash short", claims: pluginClaims({ definition_hash: "sha256:abcd" }) },
  ])("rejects $name", async ({ claims }) => {
    expect((await verifier().verify(await sign(claims, at))).ok).toBe(false);
  });

  it.each([
    { name: "inside the tolerance after exp", exp: nowS - 4, ok: true },
    { name: "past the tolerance", exp: nowS - 6, ok: false },
    { name: "nbf inside the tolerance", nbf: nowS + 4, ok: true },
    { name: "nbf past the tolerance", nbf: nowS + 6, ok: false },
    { name: "iat in the future past the tolerance", iat: nowS + 60, ok: false },
  ])("time: $name", async ({ exp, nbf, iat, ok }) => {
    const token = await sign(userClaims(), { exp: exp ?? nowS + 900, iat: iat ?? nowS, ...(nbf === undefined ? {} : { nbf }) });
    expect((await verifier().verify(token)).ok).toBe(ok);
  });

  it("verifies with any listed secret, and with none other", async () => {
    expect((await verifier().verify(await sign(userClaims(), { ...at, secret: OLD_SECRET }))).ok).toBe(true);
    expect((await verifier().verify(await sign(userClaims(), { ...at, secret: "x".repeat(40) }))).ok).toBe(false);
  });

  it("serves a cached verification only until the token's exp", async () => {
    let now = NOW;
    const v = verifier(() => now);
    const token = await sign(userClaims(), { exp: nowS + 60, iat: nowS });
    expect((await v.verify(token)).ok).toBe(true);
    now = NOW + 59_000;
    expect((await v.verify(token)).ok).toBe(true);
    now = NOW + 61_000;
    expect((await v.verify(token)).ok).toBe(true); // within the 5 s tolerance, re-verified
    now = NOW + 66_000;
    expect((await v.verify(token)).ok).toBe(false);
  });

  it("keeps each cached token's own claims when tokens share an installation, organizations and groups", async () => {
    const v = verifier();
    const tokens = [
      { sub: ids.user, claims: pluginClaims({ sub: ids.user }) },
      { sub: ids.otherUser, claims: pluginClaims({ sub: ids.otherUser }) },
      { sub: ids.user, claims: userClaims({ sub: ids.user, organization_ids: ["o-1", "o-2"], groups: ["g-1"] }) },
      { sub: ids.otherUser, claims: userClaims({ sub: ids.otherUser, organization_ids: ["o-2", "o-1"], groups: [] }) },
    ];
    const signed = await Promise.all(tokens.map((t) => sign(t.claims, at)));
    // Twice: the first pass verifies and caches, the second is answered from the cache.
    for (let pass = 0; pass < 2; pass++) {
      for (const [i, token] of signed.entries()) {
        const result = await v.verify(token);
        if (!result.ok || result.claims.type === "other-audience") throw new Error(`token ${i} did not verify`);
        expect(result.claims.sub).toBe(tokens[i]!.sub);
        if (result.claims.type === "plugin") expect(result.claims.installationId).toBe(ids.installation);
        else expect([result.claims.organizationIds, result.claims.groups]).toEqual([tokens[i]!.claims["organization_ids"], tokens[i]!.claims["groups"]]);
      }
    }
  });

  // lru-cache keeps a clock reading for 1 ms by arming a timer each time it reads one (issue 55).
  it("arms no timer when it answers from its cache", async () => {
    const v = verifier();
    const token = await sign(userClaims(), at);
    expect((await v.verify(token)).ok).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 5));
    let hit: Promise<unknown> | undefined;
    expect(timersArmedBy(() => (hit = v.verify(token)))).toBe(0);
    expect(await hit).toMatchObject({ ok: true });
  });

  it("never says why with the token in it", async () => {
    const token = await sign(userClaims(), { exp: nowS - 3600, iat: nowS - 7200 });
    const result = await verifier().verify(token);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.detail).not.toContain(token.split(".")[2]!);
  });
});

describe("SharedStrings", () => {
  it.each([
    { name: "repeats held once", max: 10, strings: ["a", "b", "a", "a", "b"], size: 2 },
    { name: "distinct strings up to the bound", max: 3, strings: ["a", "b", "c"], size: 3 },
    { name: "emptied when full, then holds the newcomer", max: 3, strings: ["a", "b", "c", "d"], size: 1 },
    { name: "a held string is found even when the pool is full", max: 2, strings: ["a", "b", "a", "b"], size: 2 },
  ])("$name", ({ max, strings, size }) => {
    const shared = new SharedStrings(max);
    for (const s of strings) expect(shared.intern(s)).toBe(s);
    expect(shared.size).toBe(size);
  });
});

describe("mentionsPluginAudience: which token among many is worth a verification", () => {
  it.each([
    { name: "a PluginToken", claims: pluginClaims(), expected: true },
    { name: "aud a list", claims: { aud: ["x", "fundament-plugin"] }, expected: true },
    // The name at each byte alignment of the payload, so at each of its three base64url spellings.
    { name: "at alignment 0", claims: { a: "", aud: "fundament-plugin" }, expected: true },
    { name: "at alignment 1", claims: { a: "x", aud: "fundament-plugin" }, expected: true },
    { name: "at alignment 2", claims: { a: "xx", aud: "fundament-plugin" }, expected: true },
    { name: "a UserToken", claims: userClaims(), expected: false },
    { name: "a near miss", claims: { aud: "fundament-plug-in" }, expected: false },
  ])("$name → $expected", async ({ claims, expected }) => {
    expect(mentionsPluginAudience(await sign(claims))).toBe(expected);
  });

  it("a token-shaped value that is no JWT mentions nothing, and throws nothing", () => {
    for (const value of ["a.b.c", "....", "x.ZnVuZGFtZW50LXBsdWdpbg.y", "x.!!.y"]) expect(() => mentionsPluginAudience(value)).not.toThrow();
    // base64url of "fundament-plugin" as the payload: mentioned (only a verification decides).
    expect(mentionsPluginAudience("x.ZnVuZGFtZW50LXBsdWdpbg.y")).toBe(true);
    expect(mentionsPluginAudience("a.b.c")).toBe(false);
  });
});
