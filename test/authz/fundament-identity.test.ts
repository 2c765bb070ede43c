/**
 * carriedPluginToken: past MAX_CARRIED_TOKENS the request is refused, and the PluginToken among the
 * stuffing is still found for the audit line at the cost of one verification, never one per value.
 */
import { describe, expect, it, vi } from "vitest";
import { carriedPluginToken } from "../../src/authz/fundament-identity.ts";
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
  it.each<{ name: string; headers: () => Promise<Record<string, string>>; tooMany: boolean; plugin: boolean; verifications: number }>([
    { name: "four tokens: each verified", headers: async () => ({ cookie: cookies([...junk(3), await pluginToken()]) }), tooMany: false, plugin: true, verifications: 4 },
    { name: "five: only the one naming the plugin audience", headers: async () => ({ cookie: cookies([...junk(4), await pluginToken()]) }), tooMany: true, plugin: true, verifications: 1 },
    { name: "a thousand in Authorization: one", headers: async () => ({ authorization: [...junk(999), await pluginToken()].map((t) => `Bearer ${t}`).join(", ") }), tooMany: true, plugin: true, verifications: 1 },
    { name: "across carriers: one", headers: async () => ({ authorization: `Bearer ${await userToken()}`, cookie: cookies(junk(3)), "sec-websocket-protocol": `base64url.bearer.authorization.k8s.io.${Buffer.from(await pluginToken()).toString("base64url")}` }), tooMany: true, plugin: true, verifications: 1 },
    { name: "none names the plugin audience: none", headers: async () => ({ cookie: cookies([...junk(4), await userToken()]) }), tooMany: true, plugin: false, verifications: 0 },
    { name: "a thousand forged candidates: still one", headers: async () => ({ cookie: cookies(await Promise.all(Array.from({ length: 1000 }, forged))) }), tooMany: true, plugin: false, verifications: 1 },
  ])("$name", async ({ headers, tooMany, plugin, verifications }) => {
    const { verifier, verify } = recordingVerifier();
    const carried = await carriedPluginToken(await headers(), verifier);
    expect(carried.tooMany).toBe(tooMany);
    expect(carried.plugin?.claims.installationId).toBe(plugin ? ids.installation : undefined);
    expect(verify).toHaveBeenCalledTimes(verifications);
  });

  it("the credential already read is neither verified again nor the candidate", async () => {
    const { verifier, verify } = recordingVerifier();
    const token = await pluginToken();
    const carried = await carriedPluginToken({ authorization: `Bearer ${token}`, cookie: cookies(junk(4)) }, verifier, { source: "bearer", token });
    expect(carried).toEqual({ plugin: undefined, tooMany: true });
    expect(verify).not.toHaveBeenCalled();
  });
});
