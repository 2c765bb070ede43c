/**
 * carriedPluginToken: past MAX_CARRIED_TOKENS the request is refused, and the PluginToken among the
 * stuffing is still found for the audit line at the cost of one verification, never one per value.
 */
import { describe, expect, it, vi } from "vitest";
import { carriedPluginToken, identifyFundamentCaller, otherCarriersTrace } from "../../src/authz/fundament-identity.ts";
import { TokenVerifier } from "../../src/tokens/fundament.ts";
import { ids, pluginClaims, pluginToken, SECRET, sign, userToken } from "../support/tokens.ts";

function recordingVerifier() {
  const verifier = new TokenVerifier({
    mode: "hs256",
    secrets: [new TextEncoder().encode(SECRET)],
    issuer: "fundament-authn-api",
    clockToleranceSeconds: 5,
    maxLifetimeSeconds: { user: 86_400, plugin: 900 },
    cacheMaxEntries: 100,
  });
  return { verifier, verify: vi.spyOn(verifier, "verify") };
}

const cookies = (tokens: string[]) => tokens.map((t) => `fundament_auth=${t}`).join("; ");
const junk = (n: number) => Array.from({ length: n }, (_, i) => `junk${i}.x.y`);
// Names the plugin audience but is signed with another secret: a forged candidate.
const forged = () => sign(pluginClaims(), { secret: "another-secret-that-is-long-enough-for-hs256-0123" });

describe("carriedPluginToken", () => {
  it.each<{ name: string; headers: () => Promise<Record<string, string>>; tooMany: boolean; plugin: boolean; verifications: number; candidates?: number }>([
    { name: "four tokens: each verified", headers: async () => ({ cookie: cookies([...junk(3), await pluginToken()]) }), tooMany: false, plugin: true, verifications: 4 },
    { name: "five: only the one naming the plugin audience", headers: async () => ({ cookie: cookies([...junk(4), await pluginToken()]) }), tooMany: true, plugin: true, verifications: 1 },
    { name: "a thousand in Authorization: one", headers: async () => ({ authorization: [...junk(999), await pluginToken()].map((t) => `Bearer ${t}`).join(", ") }), tooMany: true, plugin: true, verifications: 1 },
    { name: "across carriers: one", headers: async () => ({ authorization: `Bearer ${await userToken()}`, cookie: cookies(junk(3)), "sec-websocket-protocol": `base64url.bearer.authorization.k8s.io.${Buffer.from(await pluginToken()).toString("base64url")}` }), tooMany: true, plugin: true, verifications: 1 },
    { name: "none names the plugin audience: none", headers: async () => ({ cookie: cookies([...junk(4), await userToken()]) }), tooMany: true, plugin: false, verifications: 0 },
    { name: "forty forged candidates: still one, all counted", headers: async () => ({ cookie: cookies(await Promise.all(Array.from({ length: 40 }, forged))) }), tooMany: true, plugin: false, verifications: 1, candidates: 40 },
    { name: "a forged candidate before the real one: counted both", headers: async () => ({ cookie: cookies([...junk(3), await forged(), await pluginToken()]) }), tooMany: true, plugin: false, verifications: 1, candidates: 2 },
    // Was read up to the fifth token; now not split at all (credentials.ts MAX_CREDENTIAL_HEADERS_LENGTH):
    // identifyFundamentCaller refuses the request (below).
    { name: "a 3 MB cookie full of tokens: not read, none verified", headers: async () => ({ cookie: `fundament_auth=${await pluginToken()}; `.repeat(10_000) }), tooMany: false, plugin: false, verifications: 0, candidates: 0 },
  ])("$name", async ({ headers, tooMany, plugin, verifications, candidates }) => {
    const { verifier, verify } = recordingVerifier();
    const carried = await carriedPluginToken(await headers(), verifier);
    expect(carried.tooMany).toBe(tooMany);
    if (candidates !== undefined) expect(carried.pluginAudienceCandidates).toBe(candidates);
    expect(carried.plugin?.claims.installationId).toBe(plugin ? ids.installation : undefined);
    expect(verify).toHaveBeenCalledTimes(verifications);
  });

  it("the credential already read is neither verified again nor the candidate", async () => {
    const { verifier, verify } = recordingVerifier();
    const token = await pluginToken();
    const carried = await carriedPluginToken({ authorization: `Bearer ${token}`, cookie: cookies(junk(4)) }, verifier, { source: "bearer", token });
    expect(carried).toEqual({ plugin: undefined, tooMany: true, pluginAudienceCandidates: 0 });
    expect(verify).not.toHaveBeenCalled();
  });
});

describe("the decision trace of the other carriers", () => {
  it.each([
    { name: "too many, no PluginToken verified: the candidates seen", carried: { plugin: undefined, tooMany: true, pluginAudienceCandidates: 3 }, trace: "too many tokens; plugin_audience_candidates: 3" },
    { name: "too many, none names the plugin audience", carried: { plugin: undefined, tooMany: true, pluginAudienceCandidates: 0 }, trace: "too many tokens; plugin_audience_candidates: 0" },
    { name: "a PluginToken in the cookie", carried: { plugin: { source: "cookie" as const, claims: pluginClaims() as never }, tooMany: false, pluginAudienceCandidates: 1 }, trace: "plugin token in cookie" },
  ])("$name", ({ carried, trace }) => {
    expect(otherCarriersTrace(carried)).toBe(trace);
  });
});

describe("credential headers over 64 KiB together", () => {
  it("are refused invalid-token before any is read, naming no token", async () => {
    const { verifier, verify } = recordingVerifier();
    const token = await userToken();
    const headers = { authorization: `Bearer ${token}`, cookie: `fundament_auth=${token}; pad=${"x".repeat(40_000)}`, "sec-websocket-protocol": "v5.channel.k8s.io, ".repeat(1_500) };
    const denied = await identifyFundamentCaller(headers, { bearer: ["user"] }, verifier);
    expect(denied).toEqual({ kind: "deny", reason: "invalid-token", message: "credential headers too large" });
    expect(verify).not.toHaveBeenCalled();
  });
});
