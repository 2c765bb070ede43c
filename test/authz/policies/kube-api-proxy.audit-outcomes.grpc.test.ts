/**
 * kube-api-proxy writes one audit line per PluginToken request on every outcome (DESIGN.md "Audit
 * line"), also where the answer comes before the gates: a path request mode refuses (an empty
 * segment, a dot segment, an escaped slash: 400 before the policy decides; this file runs in both
 * modes through kube-api-proxy.audit-outcomes.request-mode.test.ts), and a dependency that fails
 * while another carrier's token is read (authn-api's JWKS down in tokens.mode migration: 503), and
 * more tokens than a request may carry, refused with the PluginToken among them audited.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeWorld } from "../../support/fakes.ts";
import { type JwksServer, startJwksServer } from "../../support/jwks-server.ts";
import { startTestServer, testConfig, type TestServer } from "../../support/server.ts";
import { ids, pluginClaims, pluginToken, sign, userToken } from "../../support/tokens.ts";

const base = `/clusters/${ids.cluster}`;

async function auditLines(server: TestServer, requestId: string): Promise<Array<Record<string, unknown>>> {
  await new Promise((r) => setTimeout(r, 50)); // the audit logger is asynchronous
  return server.logs.filter((l) => l["audit"] === "plugin_request" && l["request_id"] === requestId);
}

describe("kube-api-proxy audits a PluginToken request refused for its path's shape", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(new FakeWorld());
  });
  afterAll(async () => server.stop());

  it.each([
    ["an empty segment", `${base}//api/v1/namespaces/team-a/pods`],
    ["a dot segment", `${base}/api/v1/namespaces/team-a/../kube-system/pods`],
    ["an escaped slash", `${base}/api/v1/namespaces/team-a%2Fx/pods`],
    ["an escaped backslash", `${base}/api/v1/namespaces/team-a%5Cx/pods`],
  ])("%s: one line, naming the answer given", async (_name, path) => {
    const requestId = `req-shape-${randomUUID()}`;
    const res = await server.check({ path, headers: { authorization: `Bearer ${await pluginToken()}`, "x-request-id": requestId }, policy: "kube-api-proxy" });
    const lines = await auditLines(server, requestId);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ user: ids.user, cluster_id: ids.cluster, installation_id: ids.installation, decision: res.allowed ? "allowed" : `denied:${res.reason}` });
  });
});

describe("kube-api-proxy audits a PluginToken request when reading another carrier fails", () => {
  let server: TestServer;
  let jwks: JwksServer;
  let otherToken: string;
  beforeAll(async () => {
    jwks = await startJwksServer();
    // A token of authn-api's asymmetric key, carried beside the PluginToken, while the JWKS fails.
    otherToken = await jwks.sign(jwks.addKey("EdDSA"), pluginClaims());
    jwks.failWith = 503;
    const tokens = { mode: "migration", secrets: [{ env: "PORTCULLIS_TEST_SECRET" }], jwks: { url: jwks.url, caFile: jwks.caFile } };
    server = await startTestServer(new FakeWorld(), testConfig({ tokens }));
  });
  afterAll(async () => {
    await server.stop();
    await jwks.stop();
  });

  it("503 dependency-unavailable, and its audit line", async () => {
    const requestId = `req-jwks-down-${randomUUID()}`;
    const res = await server.check({
      path: `${base}/api/v1/namespaces/team-a/pods`,
      headers: { authorization: `Bearer ${await pluginToken()}`, cookie: `fundament_auth=${otherToken}`, "x-request-id": requestId },
      policy: "kube-api-proxy",
    });
    expect(res).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
    const lines = await auditLines(server, requestId);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ user: ids.user, cluster_id: ids.cluster, decision: "denied:dependency-unavailable" });
  });
});

describe("kube-api-proxy audits a PluginToken among more tokens than a request may carry", () => {
  let server: TestServer;
  let otherUserToken: string;
  beforeAll(async () => {
    server = await startTestServer(new FakeWorld());
    otherUserToken = await userToken();
  });
  afterAll(async () => server.stop());

  // Token-shaped values no one can verify: what a probing plugin stuffs around its own token.
  const stuffing = ["a.b.c", "d.e.f", "g.h.i", "j.k.l"];
  const cookies = (tokens: string[]) => tokens.map((t) => `fundament_auth=${t}`).join("; ");

  it.each<{ name: string; path: string; headers: (plugin: string) => Record<string, string>; reason: string }>([
    { name: "in Authorization, merged with four others", path: `${base}/api/v1/namespaces/team-a/pods`, headers: (p) => ({ authorization: [...stuffing, p].map((t) => `Bearer ${t}`).join(", ") }), reason: "invalid-token" },
    { name: "in the cookie, beside four others", path: `${base}/api/v1/namespaces/team-a/pods`, headers: (p) => ({ cookie: cookies([...stuffing, p]), origin: "https://console.example" }), reason: "invalid-token" },
    // The PluginToken is not the credential read here (a UserToken in Authorization is): only the stuffing hides it.
    {
      name: "in the WebSocket bearer subprotocol, a UserToken in Authorization and three cookies beside it",
      path: `${base}/api/v1/namespaces/team-a/pods`,
      headers: (p) => ({ authorization: `Bearer ${otherUserToken}`, "sec-websocket-protocol": `base64url.bearer.authorization.k8s.io.${Buffer.from(p).toString("base64url")}`, cookie: cookies(stuffing.slice(1)) }),
      reason: "invalid-token",
    },
    { name: "on a path whose cluster cannot be read", path: "/clusters/not-a-uuid/api/v1/pods", headers: (p) => ({ authorization: `Bearer ${p}`, cookie: cookies(stuffing) }), reason: "bad-request" },
  ])("$name: refused, and its one audit line", async ({ path, headers, reason }) => {
    const requestId = `req-stuffed-${randomUUID()}`;
    const res = await server.check({ path, headers: { ...headers(await pluginToken()), "x-request-id": requestId }, policy: "kube-api-proxy" });
    expect(res).toMatchObject({ allowed: false, reason });
    const lines = await auditLines(server, requestId);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ user: ids.user, cluster_id: ids.cluster, installation_id: ids.installation, decision: `denied:${reason}` });
  });
});

describe("kube-api-proxy's log line of a stuffed request with no PluginToken verified", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(new FakeWorld());
  });
  afterAll(async () => server.stop());

  it("counts the plugin-audience candidates, of which only the first (forged) was verified", async () => {
    const requestId = `req-candidates-${randomUUID()}`;
    const forged = await sign(pluginClaims(), { secret: "another-secret-that-is-long-enough-for-hs256-0123" });
    const cookie = ["a.b.c", "d.e.f", forged, await pluginToken()].map((t) => `fundament_auth=${t}`).join("; ");
    const res = await server.check({ path: `${base}/api/v1/namespaces/team-a/pods`, headers: { authorization: `Bearer ${await userToken()}`, cookie, "x-request-id": requestId }, policy: "kube-api-proxy" });
    expect(res).toMatchObject({ allowed: false, reason: "invalid-token" });
    const denied = server.logs.filter((l) => l["msg"] === "denied" && l["request_id"] === requestId);
    expect(denied).toEqual([expect.objectContaining({ reason: "invalid-token", plugin_audience_candidates: 2 })]);
    expect(server.rawLog()).not.toContain(forged);
  });
});
