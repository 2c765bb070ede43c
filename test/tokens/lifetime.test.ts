/**
 * A token's lifetime is bounded (issue 42 §4; FUN-17 §3, §10): `iat` is required, and `exp − iat`
 * above its type's bound (tokens.maxLifetimeSeconds: PluginToken 15 minutes, UserToken 24 h, as
 * authn-api mints them) plus the clock tolerance is refused, 401 `invalid-token`. Tokens are signed
 * with jose, with HS256 and with an asymmetric key; time is frozen.
 */
import { randomUUID } from "node:crypto";
import { createLocalJWKSet, type JWTPayload, SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import { identifyFundamentCaller } from "../../src/authz/fundament-identity.ts";
import { configSchema } from "../../src/config/schema.ts";
import { tokenVerifierFor } from "../../src/server/token-verifier.ts";
import { TokenVerifier } from "../../src/tokens/fundament.ts";
import { newAuthnKey } from "../support/jwks-server.ts";
import { pluginClaims, SECRET, userClaims } from "../support/tokens.ts";

const NOW = 1_900_000_000_000;
const nowS = NOW / 1000;
const SKEW = 5;
const DEFAULT_BOUNDS = { user: 86_400, plugin: 900 };
const YEAR = 365 * 86_400;
const EDDSA = newAuthnKey("EdDSA");

function verifier(bounds = DEFAULT_BOUNDS): TokenVerifier {
  return new TokenVerifier({
    mode: "migration",
    secrets: [new TextEncoder().encode(SECRET)],
    publicKeys: { keys: createLocalJWKSet({ keys: [EDDSA.jwk] }), algorithms: ["EdDSA"], cacheMaxAgeMs: 600_000 },
    issuer: "fundament-authn-api",
    clockToleranceSeconds: SKEW,
    maxLifetimeSeconds: bounds,
    cacheMaxEntries: 100,
    now: () => NOW,
  });
}

type Alg = "HS256" | "EdDSA";

/** Signed as authn-api signs; `iat` undefined leaves the claim out. */
function mint(claims: Record<string, unknown>, time: { iat?: number | string; exp: number }, alg: Alg): Promise<string> {
  // A string iat is the malformed case: JWTPayload would not let it be written.
  const jwt = new SignJWT({ ...claims, jti: randomUUID(), ...(time.iat === undefined ? {} : { iat: time.iat }) } as JWTPayload)
    .setProtectedHeader(alg === "HS256" ? { alg, typ: "JWT" } : { alg, kid: EDDSA.kid, typ: "JWT" })
    .setIssuer("fundament-authn-api")
    .setExpirationTime(time.exp);
  return alg === "HS256" ? jwt.sign(new TextEncoder().encode(SECRET)) : jwt.sign(EDDSA.privateKey);
}

const types = [
  { type: "plugin", claims: pluginClaims(), bound: DEFAULT_BOUNDS.plugin },
  { type: "user", claims: userClaims(), bound: DEFAULT_BOUNDS.user },
] as const;

/** (iat, exp) for one token type's bound; `detail` is what a refusal says (undefined: accepted). */
const rows = (bound: number, type: string) => [
  { name: "no iat", iat: undefined, exp: nowS + 60, detail: "claim iat failed: missing" },
  { name: "iat not a number", iat: String(nowS), exp: nowS + 60, detail: "claim iat failed: invalid" },
  { name: "exp - iat = the bound (as authn-api mints it)", iat: nowS, exp: nowS + bound, detail: undefined },
  { name: "exp - iat = the bound + the skew", iat: nowS, exp: nowS + bound + SKEW, detail: undefined },
  { name: "exp - iat = the bound + the skew + 1 s", iat: nowS, exp: nowS + bound + SKEW + 1, detail: `${type} token lifetime (exp - iat) above ${bound} s` },
  { name: "year-long", iat: nowS, exp: nowS + YEAR, detail: `${type} token lifetime (exp - iat) above ${bound} s` },
  { name: "minted long ago, exp still ahead", iat: nowS - YEAR, exp: nowS + 60, detail: `${type} token lifetime (exp - iat) above ${bound} s` },
  { name: "iat in the future beyond the skew", iat: nowS + SKEW + 1, exp: nowS + SKEW + 1 + bound, detail: "token issued in the future" },
  { name: "iat in the future within the skew", iat: nowS + SKEW, exp: nowS + SKEW + bound, detail: undefined },
];

describe.each(types)("a $type token's lifetime", ({ type, claims, bound }) => {
  describe.each(["HS256", "EdDSA"] as const)("signed %s", (alg) => {
    it.each(rows(bound, type))("$name", async ({ iat, exp, detail }) => {
      const result = await verifier().verify(await mint(claims, { ...(iat === undefined ? {} : { iat }), exp }, alg));
      if (detail === undefined) expect(result).toMatchObject({ ok: true, claims: { type } });
      else expect(result).toEqual({ ok: false, detail });
    });
  });

  it("is refused as invalid-token at the gate", async () => {
    const token = await mint(claims, { iat: nowS, exp: nowS + YEAR }, "HS256");
    const denied = await identifyFundamentCaller({ authorization: `Bearer ${token}` }, { bearer: ["user", "plugin"] }, verifier());
    expect(denied).toMatchObject({ kind: "deny", reason: "invalid-token" });
  });
});

describe("the bound is configuration", () => {
  it("a PluginToken of an hour: refused by default, accepted with maxLifetimeSeconds.plugin 3600; a UserToken keeps its own bound", async () => {
    const hour = await mint(pluginClaims(), { iat: nowS, exp: nowS + 3600 }, "HS256");
    expect((await verifier().verify(hour)).ok).toBe(false);
    expect((await verifier({ user: 86_400, plugin: 3600 }).verify(hour)).ok).toBe(true);
    // The UserToken bound is not the PluginToken's: a 2-hour session passes where a 2-hour PluginToken does not.
    const twoHours = { iat: nowS, exp: nowS + 7200 };
    expect((await verifier({ user: 86_400, plugin: 3600 }).verify(await mint(userClaims(), twoHours, "HS256"))).ok).toBe(true);
    expect((await verifier({ user: 86_400, plugin: 3600 }).verify(await mint(pluginClaims(), twoHours, "HS256"))).ok).toBe(false);
    // And the other way round.
    const day = await mint(userClaims(), { iat: nowS, exp: nowS + 86_400 }, "HS256");
    expect((await verifier({ user: 3600, plugin: 900 }).verify(day)).ok).toBe(false);
  });

  it("tokens.maxLifetimeSeconds defaults to 15 minutes and 24 h and reaches the verifier", async () => {
    process.env["PORTCULLIS_LIFETIME_TEST_SECRET"] = SECRET;
    const tokens = (maxLifetimeSeconds?: object) =>
      configSchema.parse({
        tokens: { secrets: [{ env: "PORTCULLIS_LIFETIME_TEST_SECRET" }], ...(maxLifetimeSeconds === undefined ? {} : { maxLifetimeSeconds }) },
        openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
      }).tokens!;
    expect(tokens().maxLifetimeSeconds).toEqual({ user: 86_400, plugin: 900 });
    const now = Math.floor(Date.now() / 1000);
    const sixteenMinutes = await mint(pluginClaims(), { iat: now, exp: now + 960 }, "HS256");
    expect(await tokenVerifierFor(tokens()).verify(sixteenMinutes)).toEqual({ ok: false, detail: "plugin token lifetime (exp - iat) above 900 s" });
    expect((await tokenVerifierFor(tokens({ plugin: 960 })).verify(sixteenMinutes)).ok).toBe(true);
  });
});
