/**
 * kube-api-proxy over real gRPC: a real @grpc/grpc-js client built from the vendored Envoy protos
 * sends CheckRequests as Envoy would; the ports are recording fakes, so each row states what the
 * outside world answers and the whole CheckResponse is asserted.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld, installation } from "../../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../../support/server.ts";
import { envoyCheckRequest } from "../../support/envoy.ts";
import { ids, OLD_SECRET, pluginToken, sign, userClaims, userToken } from "../../support/tokens.ts";

const base = `/clusters/${ids.cluster}`;
const SA_PLUGIN = "sa-token-for-plugin-cert-manager-plugin-cert-manager";
const SA_USER = `sa-token-for-fundament-system-fundament-${ids.user}`;
const OVERWRITE = ["OVERWRITE_IF_EXISTS_OR_ADD"];
/** Routes a registered cluster's request in Envoy (src/envoy/kube-api-upstream.ts): always the URL's cluster. */
const UPSTREAM = { "x-fundament-kube-api-cluster": `kube-api-${ids.cluster}` };

let world: FakeWorld;
let server: TestServer;

beforeAll(async () => {
  world = new FakeWorld();
  server = await startTestServer(world);
});
afterAll(async () => server.stop());
beforeEach(() => {
  Object.assign(world, new FakeWorld());
});

const check = (path: string, headers: Record<string, string> = {}, method = "GET") =>
  server.check({ method, path, headers, policy: "kube-api-proxy" });
const bearer = async (token: Promise<string> | string) => ({ authorization: `Bearer ${await token}` });

describe("kube-api-proxy: PluginToken gates (FUN-17 §11), whole responses", () => {
  it("allows a request both halves permit, swapping in the plugin ServiceAccount token", async () => {
    const res = await check(`${base}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`, {
      ...(await bearer(pluginToken())),
      cookie: "fundament_auth=x.y.z; theme=dark",
      "x-fundament-user-id": "smuggled",
    });
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: { authorization: `Bearer ${SA_PLUGIN}`, ...UPSTREAM },
      appendActions: OVERWRITE,
      removed: ["cookie", "x-fundament-user-id"],
    });
    expect(world.sarRequests).toEqual([
      { kind: "resource", verb: "get", group: "cert-manager.io", version: "v1", resource: "certificates", subresource: "", namespace: "team-a", name: "web" },
    ]);
  });

  const denials: Array<{ name: string; setup?: (w: FakeWorld) => void; path?: string; headers?: () => Promise<Record<string, string>>; http: number; grpc: number; reason: string }> = [
    { name: "no credentials", headers: async () => ({}), http: 401, grpc: 16, reason: "missing-token" },
    { name: "garbage bearer", headers: async () => ({ authorization: "Bearer not-a-jwt" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "Basic scheme", headers: async () => ({ authorization: "Basic dXNlcjpwYXNz" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "two Authorization values merged by Envoy", headers: async () => ({ authorization: `Bearer ${await pluginToken()}, Bearer ${await pluginToken()}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "wrong secret", headers: () => bearer(pluginToken({}, { secret: "some-other-secret-0123456789abcdef0123456789" })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "expired", headers: () => bearer(pluginToken({}, { exp: Math.floor(Date.now() / 1000) - 60 })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "not yet valid", headers: () => bearer(pluginToken({}, { nbf: Math.floor(Date.now() / 1000) + 120 })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "wrong issuer", headers: () => bearer(pluginToken({}, { issuer: "fundament-authn-api/" })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "aud holds both audiences", headers: () => bearer(pluginToken({ aud: ["fundament-plugin", "fundament-user"] })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a token for another service", headers: () => bearer(pluginToken({ aud: "organization-api" })), http: 401, grpc: 16, reason: "wrong-audience" },
    // Fundament's proxy accepts these two (SECURITY.md, "Stricter than Fundament's Go proxy").
    { name: "PluginToken without installation_name", headers: () => bearer(pluginToken({ installation_name: undefined })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "PluginToken with an empty installation_name", headers: () => bearer(pluginToken({ installation_name: "" })), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "PluginToken in the cookie (UserToken only there)", headers: async () => ({ cookie: `fundament_auth=${await pluginToken()}`, "sec-fetch-site": "same-origin" }), http: 401, grpc: 16, reason: "wrong-audience" },
    { name: "Bearer and WebSocket bearer together", headers: async () => ({ authorization: `Bearer ${await pluginToken()}`, "sec-websocket-protocol": `base64url.bearer.authorization.k8s.io.${Buffer.from(await pluginToken()).toString("base64url")}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "impersonation headers", headers: async () => ({ ...(await bearer(pluginToken())), "impersonate-user": "admin" }), http: 403, grpc: 7, reason: "impersonation-forbidden" },
    { name: "URL cluster differs from the claim", path: `/clusters/${ids.otherCluster}/api/v1/pods`, http: 403, grpc: 7, reason: "cluster-mismatch" },
    { name: "OpenFGA can_view false", setup: (w) => (w.canViewAnswer = false), http: 403, grpc: 7, reason: "can-view-denied" },
    { name: "cluster not configured", setup: (w) => w.clusterIds.clear(), http: 404, grpc: 5, reason: "unknown-cluster" },
    { name: "path root not a Kubernetes API", path: `${base}/healthz`, http: 404, grpc: 5, reason: "not-found" },
    { name: "path root not a Kubernetes API, without a credential (Fundament: 404 first)", path: `${base}/healthz`, headers: async () => ({}), http: 401, grpc: 16, reason: "missing-token" },
    { name: "cluster id not a UUID", path: `/clusters/prod/api/v1/pods`, http: 400, grpc: 3, reason: "bad-request" },
    { name: "dot segment left by Envoy", path: `${base}/api/v1/namespaces/a/../b/pods`, http: 400, grpc: 3, reason: "bad-request" },
    { name: "legacy watch with nothing after it", path: `${base}/api/v1/watch`, http: 400, grpc: 3, reason: "bad-request" },
    { name: "user SubjectAccessReview denied", setup: (w) => (w.sarAnswer = () => false), http: 403, grpc: 7, reason: "user-sar-denied" },
    { name: "installation unknown", setup: (w) => w.installationsByUid.clear(), http: 403, grpc: 7, reason: "installation-unavailable" },
    { name: "installation terminating", setup: (w) => w.installationsByUid.set(ids.installation, installation({ terminating: true })), http: 403, grpc: 7, reason: "installation-unavailable" },
    { name: "installation unpinned (empty)", setup: (w) => w.installationsByUid.set(ids.installation, installation({ definitionHash: "" })), http: 403, grpc: 7, reason: "installation-unavailable" },
    { name: "installation unpinned (placeholder)", setup: (w) => w.installationsByUid.set(ids.installation, installation({ definitionHash: "sha256:unknown" })), http: 403, grpc: 7, reason: "installation-unavailable" },
    { name: "installation uid names another installation", setup: (w) => w.installationsByUid.set(ids.installation, installation({ name: "other" })), http: 403, grpc: 7, reason: "installation-mismatch" },
    { name: "plugin ServiceAccount missing", setup: (w) => (w.tokenAnswer = () => undefined), http: 403, grpc: 7, reason: "installation-unavailable" },
    { name: "OpenFGA down", setup: (w) => (w.canViewAnswer = "unavailable"), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "SubjectAccessReview failing", setup: (w) => (w.sarAnswer = () => "unavailable"), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "index not synced", setup: (w) => (w.indexSynced = false), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "TokenRequest failing", setup: (w) => (w.tokenAnswer = () => "unavailable"), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "a dependency slower than the check deadline", setup: (w) => (w.canViewAnswer = { delayMs: 2_000, value: true }), http: 503, grpc: 14, reason: "dependency-unavailable" },
  ];

  it.each(denials)("$name → $http $reason", async ({ setup, path, headers, http, grpc, reason }) => {
    setup?.(world);
    const res = await check(path ?? `${base}/api/v1/namespaces/team-a/pods`, await (headers ?? (() => bearer(pluginToken())))());
    expect(res.allowed).toBe(false);
    if (res.allowed) return;
    expect({ http: res.http, grpc: res.grpc, reason: res.reason }).toEqual({ http, grpc, reason });
    expect(res.headers["content-type"]).toBe("application/json");
    expect(res.headers["www-authenticate"]).toBe(http === 401 ? "Bearer" : undefined);
    expect(res.headers["retry-after"]).toBe(http === 503 ? "1" : undefined);
    expect(res.body).toMatchObject({ kind: "Status", apiVersion: "v1", status: "Failure", code: http, details: { causes: [{ reason }] } });
  });

  it("reports the first denial in the seed's order when several gates deny", async () => {
    world.canViewAnswer = false;
    world.sarAnswer = () => false;
    world.installationsByUid.clear();
    expect((await check(`${base}/api/v1/pods`, await bearer(pluginToken()))).allowed && "allowed").toBe(false);
    expect(await check(`${base}/api/v1/pods`, await bearer(pluginToken()))).toMatchObject({ reason: "can-view-denied" });
    world.canViewAnswer = true;
    expect(await check(`${base}/api/v1/pods`, await bearer(pluginToken()))).toMatchObject({ reason: "user-sar-denied" });
    world.sarAnswer = () => true;
    expect(await check(`${base}/api/v1/pods`, await bearer(pluginToken()))).toMatchObject({ reason: "installation-unavailable" });
  });

  it("never calls OpenFGA or the API server before the local gates pass", async () => {
    await check(`/clusters/${ids.otherCluster}/api/v1/pods`, await bearer(pluginToken()));
    await check(`${base}/api/v1/pods`, { ...(await bearer(pluginToken())), "impersonate-group": "system:masters" });
    // The local PluginInstallation index is read (the audit line's pin); nothing remote is asked.
    expect(world.calls.filter((c) => !c.startsWith("installation "))).toEqual([]);
  });

  it("accepts unpinned installations only with plugins.allowUnpinned, and says so loudly", async () => {
    const permissive = await startTestServer(world, testConfig({ plugins: { allowUnpinned: true } }));
    try {
      world.installationsByUid.set(ids.installation, installation({ definitionHash: "" }));
      expect(await permissive.check({ path: `${base}/api/v1/pods`, headers: await bearer(pluginToken()), policy: "kube-api-proxy" })).toMatchObject({ allowed: true });
      expect(permissive.logs.some((l) => l["setting"] === "plugins.allowUnpinned" && l["level"] === 40)).toBe(true);
    } finally {
      await permissive.stop();
    }
  });

  it("authorizes a WebSocket exec for get and create, and moves the credential out of the subprotocol list", async () => {
    const token = await pluginToken();
    const res = await check(`${base}/api/v1/namespaces/team-a/pods/web-0/exec?command=sh&stdin=true`, {
      connection: "Upgrade",
      upgrade: "websocket",
      "sec-websocket-protocol": `v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.${Buffer.from(token).toString("base64url")}`,
    });
    expect(res).toMatchObject({ allowed: true });
    if (!res.allowed) return;
    expect(world.sarRequests.map((a) => a.verb).sort()).toEqual(["create", "get"]);
    // The injected token travels in Authorization only; the caller's bearer subprotocol is dropped;
    // Envoy ends the stream at the token's expiry (15 minutes, whole seconds rounded down).
    const { "x-envoy-upstream-stream-duration-ms": duration, ...set } = res.set;
    expect(set).toEqual({ authorization: `Bearer ${SA_PLUGIN}`, "sec-websocket-protocol": "v5.channel.k8s.io", ...UPSTREAM });
    expect(Number(duration) % 1000).toBe(0);
    expect(Number(duration)).toBeGreaterThanOrEqual(898_000);
    expect(Number(duration)).toBeLessThanOrEqual(900_000);
  });

  it("audits a request that ran past the check deadline with the 503 Envoy was given, never a late allow", async () => {
    world.canViewAnswer = { delayMs: 1_200, value: true };
    const res = await check(`${base}/api/v1/pods`, { ...(await bearer(pluginToken())), "x-request-id": "req-late" });
    expect(res).toMatchObject({ allowed: false, reason: "dependency-unavailable" });
    await new Promise((r) => setTimeout(r, 600));
    const line = server.logs.find((l) => l["audit"] === "plugin_request" && l["request_id"] === "req-late");
    expect(line).toMatchObject({ audit: "plugin_request", decision: "denied:dependency-unavailable" });
  });

  it("uses nonResourceAttributes for /version and /openapi", async () => {
    expect(await check(`${base}/openapi/v3/apis/apps/v1`, await bearer(pluginToken()))).toMatchObject({ allowed: true });
    expect(world.sarRequests).toEqual([{ kind: "non-resource", verb: "get", path: "/openapi/v3/apis/apps/v1" }]);
  });

  it("writes one audit line per PluginToken request with every DESIGN field, on allow and on denial", async () => {
    const before = server.logs.filter((l) => l["audit"] === "plugin_request").length;
    await check(`${base}/apis/cert-manager.io/v1/namespaces/team-a/certificates?watch=1`, { ...(await bearer(pluginToken())), "x-request-id": "req-allow" });
    world.sarAnswer = () => false;
    await check(`${base}/api/v1/namespaces/team-a/secrets/db`, { ...(await bearer(pluginToken())), "x-request-id": "req-deny" }, "DELETE");
    await check(`/clusters/${ids.otherCluster}/api/v1/pods`, { ...(await bearer(pluginToken())), "x-request-id": "req-mismatch" });
    await server.server.health; // the audit logger is asynchronous; give it a tick
    await new Promise((r) => setTimeout(r, 50));
    const audits = server.logs.filter((l) => l["audit"] === "plugin_request").slice(before);
    const common = {
      audit: "plugin_request",
      user: ids.user,
      cluster_id: ids.cluster,
      installation_id: ids.installation,
      plugin_name: "cert-manager",
      plugin_version: "1.4.0",
      definition_hash: `sha256:${"ab".repeat(32)}`,
      pinned_definition_hash: `sha256:${"ab".repeat(32)}`,
    };
    expect(audits.map(({ time: _t, level: _l, ...rest }) => rest)).toEqual([
      { ...common, verb: "watch", api_group: "cert-manager.io", resource: "certificates", subresource: "", namespace: "team-a", name: "", path: "", decision: "allowed", request_id: "req-allow", stream_bound_seconds: 60 },
      { ...common, verb: "delete", api_group: "", resource: "secrets", subresource: "", namespace: "team-a", name: "db", path: "", decision: "denied:user-sar-denied", request_id: "req-deny" },
      { ...common, verb: "list", api_group: "", resource: "pods", subresource: "", namespace: "", name: "", path: "", decision: "denied:cluster-mismatch", request_id: "req-mismatch" },
    ]);
  });

  it("a PluginToken request whose cluster id cannot be read is a 400 and still audited; without a token, no line", async () => {
    const res = await check("/clusters/NOT-A-UUID/api/v1/namespaces/team-a/pods", { ...(await bearer(pluginToken())), "x-request-id": "req-malformed-cluster" });
    expect(res).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
    expect(await check("/clusters/NOT-A-UUID/api", { "x-request-id": "req-malformed-no-token" })).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
    await new Promise((r) => setTimeout(r, 50));
    const lines = server.logs.filter((l) => l["audit"] === "plugin_request" && String(l["request_id"]).startsWith("req-malformed-"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      request_id: "req-malformed-cluster",
      user: ids.user,
      cluster_id: ids.cluster,
      definition_hash: `sha256:${"ab".repeat(32)}`,
      pinned_definition_hash: `sha256:${"ab".repeat(32)}`,
      decision: "denied:bad-request",
    });
  });

  // A denial before the remote gates still writes every field: what was asked, and the pin at request time.
  it.each([
    { name: "a query Go would not read", path: `${base}/api/v1/namespaces/team-a/pods/web?timeout=5x`, setup: () => {}, reason: "bad-request" },
    { name: "a revoked installation", path: `${base}/api/v1/namespaces/team-a/pods/web`, setup: () => { world.revocationEntries = [{ name: "incident", target: { scope: "installation", installationId: ids.installation } }]; }, reason: "revoked" },
    { name: "an oversized name", path: `${base}/api/v1/namespaces/team-a/pods/web${"x".repeat(260)}`, setup: () => {}, reason: "bad-request" },
  ])("an early denial's audit line is full: $name", async ({ path, setup, reason }) => {
    setup();
    const requestId = `req-early-${reason}-${path.length}`;
    await check(path, { ...(await bearer(pluginToken())), "x-request-id": requestId });
    await new Promise((r) => setTimeout(r, 50));
    const line = server.logs.find((l) => l["audit"] === "plugin_request" && l["request_id"] === requestId);
    expect(line).toMatchObject({
      decision: `denied:${reason}`,
      pinned_definition_hash: `sha256:${"ab".repeat(32)}`,
      verb: "get",
      resource: "pods",
      namespace: "team-a",
    });
    expect(String(line?.["name"])).toMatch(/^web/);
  });
});

/**
 * DESIGN.md "Audit line": one line per kube-api-proxy PluginToken request, on every outcome —
 * whichever carrier holds the PluginToken, read as the credential or not. The cookie takes a
 * UserToken only: a PluginToken there (a plugin page can plant it on the parent domain) refuses the
 * request, whatever else it carries, and is audited.
 */
describe("kube-api-proxy: a PluginToken in any carrier is audited, once", () => {
  const CONSOLE = "https://console.fundament.io";
  let consoleServer: TestServer;
  beforeAll(async () => {
    consoleServer = await startTestServer(world, testConfig({ tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }], cookieOrigins: [CONSOLE] } }));
  });
  afterAll(async () => consoleServer.stop());

  const PODS = `${base}/api/v1/namespaces/team-a/pods`;
  const ws = (token: string) => `base64url.bearer.authorization.k8s.io.${Buffer.from(token).toString("base64url")}`;
  const P = () => pluginToken();
  const U = () => userToken();
  const rows: Array<{ name: string; path?: string; headers: () => Promise<Record<string, string>>; outcome: string; audited: boolean }> = [
    { name: "the issue: the cookie from the Console's Origin", headers: async () => ({ cookie: `fundament_auth=${await P()}`, origin: CONSOLE }), outcome: "wrong-audience", audited: true },
    { name: "the cookie, same-origin", headers: async () => ({ cookie: `theme=dark; fundament_auth=${await P()}`, "sec-fetch-site": "same-origin" }), outcome: "wrong-audience", audited: true },
    { name: "the cookie from a plugin page's Origin", headers: async () => ({ cookie: `fundament_auth=${await P()}`, origin: "https://plugin-proxy.fundament.io" }), outcome: "wrong-audience", audited: true },
    { name: "the cookie with no Origin (a navigation)", headers: async () => ({ cookie: `fundament_auth=${await P()}` }), outcome: "wrong-audience", audited: true },
    { name: "the cookie behind a comma", headers: async () => ({ cookie: `theme=dark, fundament_auth=${await P()}`, origin: CONSOLE }), outcome: "wrong-audience", audited: true },
    { name: "the cookie on a proxy subresource (never a credential there)", path: `${base}/api/v1/namespaces/team-a/pods/web-1/proxy/`, headers: async () => ({ cookie: `fundament_auth=${await P()}`, origin: CONSOLE }), outcome: "wrong-audience", audited: true },
    { name: "the cookie beside a UserToken Bearer", headers: async () => ({ authorization: `Bearer ${await U()}`, cookie: `fundament_auth=${await P()}` }), outcome: "wrong-audience", audited: true },
    { name: "the cookie beside a PluginToken Bearer", headers: async () => ({ authorization: `Bearer ${await P()}`, cookie: `fundament_auth=${await P()}` }), outcome: "wrong-audience", audited: true },
    { name: "two cookies of that name, the Console's UserToken first", headers: async () => ({ cookie: `fundament_auth=${await U()}; fundament_auth=${await P()}`, origin: CONSOLE }), outcome: "wrong-audience", audited: true },
    { name: "Bearer and WebSocket bearer together", headers: async () => ({ authorization: `Bearer ${await P()}`, "sec-websocket-protocol": ws(await P()) }), outcome: "invalid-token", audited: true },
    { name: "a UserToken Bearer and a PluginToken subprotocol", headers: async () => ({ authorization: `Bearer ${await U()}`, "sec-websocket-protocol": ws(await P()) }), outcome: "invalid-token", audited: true },
    { name: "two WebSocket bearer subprotocols", headers: async () => ({ "sec-websocket-protocol": `${ws(await P())}, ${ws(await P())}` }), outcome: "invalid-token", audited: true },
    { name: "two Authorization values merged by Envoy", headers: async () => ({ authorization: `Bearer ${await P()}, Bearer ${await P()}` }), outcome: "invalid-token", audited: true },
    { name: "more tokens than any client sends", headers: async () => ({ authorization: `Bearer ${await P()}`, cookie: ["a.b.c", "d.e.f", "g.h.i", "j.k.l"].map((v) => `fundament_auth=${v}`).join("; ") }), outcome: "invalid-token", audited: true },
    { name: "a cluster id that cannot be read, the token in the cookie", path: "/clusters/NOT-A-UUID/api/v1/namespaces/team-a/pods", headers: async () => ({ cookie: `fundament_auth=${await P()}`, origin: CONSOLE }), outcome: "bad-request", audited: true },
    { name: "control: the subprotocol alone", headers: async () => ({ "sec-websocket-protocol": `v5.channel.k8s.io, ${ws(await P())}` }), outcome: "allowed", audited: true },
    { name: "control: Bearer, the Console's UserToken cookie beside it", headers: async () => ({ authorization: `Bearer ${await P()}`, cookie: `fundament_auth=${await U()}`, origin: CONSOLE }), outcome: "allowed", audited: true },
    { name: "control: a UserToken cookie beside a UserToken Bearer", headers: async () => ({ authorization: `Bearer ${await U()}`, cookie: `fundament_auth=${await U()}` }), outcome: "allowed", audited: false },
    { name: "control: an expired PluginToken in the cookie beside a UserToken Bearer", headers: async () => ({ authorization: `Bearer ${await U()}`, cookie: `fundament_auth=${await pluginToken({}, { exp: Math.floor(Date.now() / 1000) - 600, iat: Math.floor(Date.now() / 1000) - 1200 })}` }), outcome: "allowed", audited: false },
  ];

  it.each(rows.map((row, i) => ({ ...row, requestId: `req-carrier-${i}` })))("$name → $outcome, audited: $audited", async ({ path, headers, outcome, audited, requestId }) => {
    const res = await consoleServer.check({ path: path ?? PODS, headers: { ...(await headers()), "x-request-id": requestId }, policy: "kube-api-proxy" });
    expect(res.allowed ? "allowed" : res.reason).toBe(outcome);
    if (!res.allowed) expect(res.http).toBe(outcome === "bad-request" ? 400 : 401);
    const lines = consoleServer.logs.filter((l) => l["audit"] === "plugin_request" && l["request_id"] === requestId);
    if (!audited) {
      expect(lines).toEqual([]);
      return;
    }
    expect(lines).toEqual([
      expect.objectContaining({
        user: ids.user,
        cluster_id: ids.cluster,
        installation_id: ids.installation,
        pinned_definition_hash: `sha256:${"ab".repeat(32)}`,
        decision: outcome === "allowed" ? "allowed" : `denied:${outcome}`,
      }),
    ]);
    // What was asked is on the line, an early denial's too (unless the path could not be read).
    if (outcome !== "bad-request") expect(lines[0]).toMatchObject({ resource: "pods", namespace: "team-a" });
  });
});

describe("kube-api-proxy: UserToken path (aud=fundament-user)", () => {
  it("forwards with the user's own per-user ServiceAccount token, from Bearer", async () => {
    const res = await check(`${base}/api/v1/namespaces/team-a/pods`, await bearer(userToken()));
    expect(res).toEqual({ allowed: true, grpc: 0, set: { authorization: `Bearer ${SA_USER}`, ...UPSTREAM }, appendActions: OVERWRITE, removed: [] });
    expect(world.calls).toEqual([`canView ${ids.user} ${ids.cluster}`, `token ${ids.cluster} fundament-system/fundament-${ids.user}`]);
    expect(world.sarRequests).toEqual([]);
  });

  it("accepts the fundament_auth cookie on a same-origin request and removes it upstream", async () => {
    const res = await check(`${base}/version`, { cookie: `theme=dark; fundament_auth=${await userToken()}`, "sec-fetch-site": "same-origin" });
    expect(res).toMatchObject({ allowed: true, set: { authorization: `Bearer ${SA_USER}` }, removed: ["cookie"] });
  });

  it("takes the cookie only from a page the browser vouches for: a listed Origin, or same-origin (over gRPC)", async () => {
    const cookie = `theme=dark; fundament_auth=${await userToken()}`;
    const consoleServer = await startTestServer(world, testConfig({ tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }], cookieOrigins: ["https://console.fundament.io"] } }));
    const cases: Array<{ name: string; headers: Record<string, string>; expected: string }> = [
      { name: "no Origin, no Sec-Fetch-Site (a plugin page's form GET, curl)", headers: {}, expected: "missing-token" },
      { name: "a same-site GET navigation from a plugin page", headers: { "sec-fetch-site": "same-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document" }, expected: "missing-token" },
      { name: "a cross-site navigation", headers: { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate" }, expected: "missing-token" },
      { name: "a typed-in URL", headers: { "sec-fetch-site": "none", "sec-fetch-mode": "navigate" }, expected: "missing-token" },
      { name: "the plugin-proxy Origin", headers: { origin: "https://plugin-proxy.fundament.io", "sec-fetch-site": "same-site" }, expected: "missing-token" },
      { name: "an opaque Origin", headers: { origin: "null" }, expected: "missing-token" },
      { name: "same-origin", headers: { "sec-fetch-site": "same-origin" }, expected: "allowed" },
      { name: "the Console's Origin", headers: { origin: "https://console.fundament.io", "sec-fetch-site": "same-site" }, expected: "allowed" },
    ];
    try {
      const got = [];
      for (const c of cases) {
        const res = await consoleServer.check({ path: `${base}/api/v1/namespaces/team-a/pods`, headers: { cookie, ...c.headers }, policy: "kube-api-proxy" });
        got.push({ name: c.name, outcome: res.allowed ? "allowed" : res.reason });
      }
      expect(got).toEqual(cases.map((c) => ({ name: c.name, outcome: c.expected })));
    } finally {
      await consoleServer.stop();
    }
  });

  it("never takes the cookie on the proxy subresources, whose pages would be same-origin with the whole API", async () => {
    const cookie = `fundament_auth=${await userToken()}`;
    const sameOrigin = { cookie, "sec-fetch-site": "same-origin" };
    const cases = [
      { path: `${base}/api/v1/namespaces/team-a/services/web:80/proxy/`, expected: "missing-token" },
      { path: `${base}/api/v1/namespaces/team-a/services/https:web:443/proxy/index.html`, expected: "missing-token" },
      { path: `${base}/api/v1/namespaces/team-a/pods/web-1/proxy/admin`, expected: "missing-token" },
      { path: `${base}/api/v1/nodes/node-1/proxy/metrics`, expected: "missing-token" },
      { path: `${base}/api/v1/proxy/namespaces/team-a/services/web/`, expected: "missing-token" },
      { path: `${base}/api/v1/namespaces/team-a/services/web`, expected: "allowed" },
      { path: `${base}/api/v1/namespaces/team-a/pods/web-1/log`, expected: "allowed" },
    ];
    const got = [];
    for (const c of cases) {
      const res = await check(c.path, sameOrigin);
      got.push({ path: c.path, outcome: res.allowed ? "allowed" : res.reason });
    }
    expect(got).toEqual(cases.map((c) => ({ path: c.path, outcome: c.expected })));
    // A bearer credential still reaches the proxy subresource.
    expect(await check(`${base}/api/v1/namespaces/team-a/services/web:80/proxy/`, { authorization: `Bearer ${await userToken()}` })).toMatchObject({ allowed: true });
  });

  it("does not let a browser page from another origin authenticate with the cookie (WebSocket upgrades skip CORS)", async () => {
    const cookie = `fundament_auth=${await userToken()}`;
    expect(await check(`${base}/api/v1/namespaces/a/pods/p/exec`, { cookie, origin: "https://plugin-proxy.fundament.io", connection: "Upgrade", upgrade: "websocket" })).toMatchObject({
      allowed: false,
      http: 401,
      reason: "missing-token",
    });
    const consoleServer = await startTestServer(world, testConfig({ tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }], cookieOrigins: ["https://console.fundament.io"] } }));
    try {
      const ask = (origin: string) => consoleServer.check({ path: `${base}/api/v1/pods`, headers: { cookie, origin }, policy: "kube-api-proxy" });
      expect(await ask("https://console.fundament.io")).toMatchObject({ allowed: true });
      expect(await ask("https://plugin-proxy.fundament.io")).toMatchObject({ allowed: false, reason: "missing-token" });
    } finally {
      await consoleServer.stop();
    }
  });

  it("passes impersonation through to the cluster, which authorizes it against the user's own ServiceAccount", async () => {
    expect(await check(`${base}/api/v1/pods`, { ...(await bearer(userToken())), "impersonate-user": "x" })).toMatchObject({ allowed: true });
  });

  it.each([
    { name: "can_view false", setup: (w: FakeWorld) => (w.canViewAnswer = false), reason: "can-view-denied", http: 403 },
    { name: "unknown cluster", setup: (w: FakeWorld) => w.clusterIds.clear(), reason: "unknown-cluster", http: 404 },
    { name: "no per-user ServiceAccount", setup: (w: FakeWorld) => (w.tokenAnswer = () => undefined), reason: "user-unavailable", http: 403 },
    { name: "OpenFGA down", setup: (w: FakeWorld) => (w.canViewAnswer = "unavailable"), reason: "dependency-unavailable", http: 503 },
  ])("$name → $http $reason", async ({ setup, reason, http }) => {
    setup(world);
    expect(await check(`${base}/api/v1/pods`, await bearer(userToken()))).toMatchObject({ allowed: false, reason, http });
  });

  it("writes no plugin audit line for UserTokens", async () => {
    const before = server.logs.filter((l) => l["audit"] === "plugin_request").length;
    await check(`${base}/api/v1/pods`, await bearer(userToken()));
    await new Promise((r) => setTimeout(r, 50));
    expect(server.logs.filter((l) => l["audit"] === "plugin_request").length).toBe(before);
  });
});

describe("kube-api-proxy: the upstream Envoy routes a registered cluster to", () => {
  const clientSent: Array<{ name: string; headers: Record<string, string> }> = [
    { name: "none", headers: {} },
    { name: "another cluster's", headers: { "x-fundament-kube-api-cluster": `kube-api-${ids.otherCluster}` } },
    { name: "another Envoy cluster", headers: { "x-fundament-kube-api-cluster": "portcullis" } },
    { name: "an empty one", headers: { "x-fundament-kube-api-cluster": "" } },
  ];
  const tokens = [
    { token: "UserToken", bearer: () => bearer(userToken()) },
    { token: "PluginToken", bearer: () => bearer(pluginToken()) },
  ];
  const rows = tokens.flatMap((t) => clientSent.map((c) => ({ ...t, ...c })));

  it.each(rows)("$token, client-sent header $name: overwritten with the URL's cluster on allow", async ({ bearer: credential, headers }) => {
    const res = await check(`${base}/api/v1/namespaces/team-a/pods`, { ...(await credential()), ...headers });
    expect(res).toMatchObject({ allowed: true, appendActions: OVERWRITE });
    if (!res.allowed) return;
    expect(res.set["x-fundament-kube-api-cluster"]).toBe(`kube-api-${ids.cluster}`);
    // Set (overwriting), so never also in the removals.
    expect(res.removed).not.toContain("x-fundament-kube-api-cluster");
  });

  it.each(rows)("$token, client-sent header $name: a denial routes nothing and carries no header", async ({ bearer: credential, headers }) => {
    world.canViewAnswer = false;
    const res = await server.checkRaw(envoyCheckRequest({ method: "GET", path: `${base}/api/v1/namespaces/team-a/pods`, headers: { ...(await credential()), ...headers }, policy: "kube-api-proxy" }));
    expect(res.denied_response?.status?.code).toBe("Forbidden");
    expect(res.ok_response).toBeUndefined();
    expect((res.denied_response?.headers ?? []).map((h) => h.header?.key)).not.toContain("x-fundament-kube-api-cluster");
  });
});

describe("tokens: rotation and clock tolerance", () => {
  it("verifies with any configured secret (rotation)", async () => {
    expect(await check(`${base}/api/v1/pods`, await bearer(userToken({}, { secret: OLD_SECRET })))).toMatchObject({ allowed: true });
  });

  it.each([
    { name: "expired 3 s ago, inside the 5 s tolerance", exp: -3, allowed: true },
    { name: "expired 10 s ago, outside the tolerance", exp: -10, allowed: false },
  ])("$name", async ({ exp, allowed }) => {
    const token = await sign(userClaims(), { exp: Math.floor(Date.now() / 1000) + exp });
    expect(await check(`${base}/api/v1/pods`, await bearer(token))).toMatchObject({ allowed });
  });
});

describe("policy selection", () => {
  it.each([
    { name: "no policy context extension", policy: undefined },
    { name: "unknown policy", policy: "allow-all" },
  ])("$name → 403 no-policy", async ({ policy }) => {
    const res = await server.check({ path: `${base}/api/v1/pods`, headers: await bearer(userToken()), policy });
    expect(res).toMatchObject({ allowed: false, http: 403, grpc: 7, reason: "no-policy", body: { error: { code: "no-policy" } } });
  });

  it("denies a CheckRequest with no HTTP attributes, with an explicit status", async () => {
    const raw = await server.checkRaw({ attributes: { context_extensions: { policy: "kube-api-proxy" } } });
    expect(raw.status.code).toBe(3);
    expect(raw.denied_response?.status.code).toBe("BadRequest");
  });
});

describe("streams end in time (issue 54): the CheckResponse as Envoy's protos decode it", () => {
  const watchPath = `${base}/apis/cert-manager.io/v1/namespaces/team-a/certificates`;
  const nowSeconds = () => Math.floor(Date.now() / 1000);

  it("a PluginToken watch asked without a timeout gets timeoutSeconds = the bound, reviewed as asked", async () => {
    const res = await check(`${watchPath}?watch=1&resourceVersion=5`, await bearer(pluginToken()));
    expect(res).toMatchObject({ allowed: true, query: [["timeoutSeconds", "60"]] });
    expect(world.sarRequests).toEqual([
      { kind: "resource", verb: "watch", group: "cert-manager.io", version: "v1", resource: "certificates", subresource: "", namespace: "team-a", name: "" },
    ]);
  });

  it("the token's remaining lifetime when it is shorter; nothing rewritten when the client asked less", async () => {
    expect(await check(`${watchPath}?watch=1&timeoutSeconds=3600`, await bearer(pluginToken({}, { exp: nowSeconds() + 20 })))).toMatchObject({
      allowed: true,
      query: [["timeoutSeconds", expect.stringMatching(/^(19|20)$/)]],
    });
    const asked = await check(`${watchPath}?watch=1&timeoutSeconds=5`, await bearer(pluginToken()));
    expect(asked).toMatchObject({ allowed: true });
    expect(asked).not.toHaveProperty("query");
  });

  it("a watch query Envoy's rewrite would make Go read otherwise is refused 400, unreviewed, and audited", async () => {
    const res = await check(`${watchPath}?watch=true&w%61tch=false`, { ...(await bearer(pluginToken())), "x-request-id": "req-unboundable" });
    expect(res).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
    expect(world.sarRequests).toEqual([]);
    await new Promise((r) => setTimeout(r, 50));
    expect(server.logs.find((l) => l["audit"] === "plugin_request" && l["request_id"] === "req-unboundable")).toMatchObject({ decision: "denied:bad-request", verb: "watch" });
  });

  it("a PluginToken within a second of its expiry opens no stream: 401, the client mints a fresh token", async () => {
    const res = await check(`${watchPath}?watch=1`, await bearer(pluginToken({}, { exp: nowSeconds() })));
    // Accepted within the verifier's clock tolerance, refused by the bound.
    expect(res).toMatchObject({ allowed: false, http: 401, reason: "invalid-token" });
  });

  it("a UserToken watch keeps the server's default while its token outlives it, and is bounded by the token when it does not", async () => {
    const long = await check(`${watchPath}?watch=1`, await bearer(userToken({}, { exp: nowSeconds() + 86_000 })));
    expect(long).toMatchObject({ allowed: true });
    expect(long).not.toHaveProperty("query");
    const short = await check(`${watchPath}?watch=1`, await bearer(userToken({}, { exp: nowSeconds() + 600 })));
    expect(short).toMatchObject({ allowed: true, query: [["timeoutSeconds", expect.stringMatching(/^(599|600)$/)]] });
  });

  it.each([
    { name: "a PluginToken watch, its review answered in 600 ms", token: pluginToken, slow: (w: FakeWorld) => (w.sarAnswer = () => ({ delayMs: 600, value: true })), path: `${watchPath}?watch=1` },
    { name: "a PluginToken exec, its review answered in 600 ms", token: pluginToken, slow: (w: FakeWorld) => (w.sarAnswer = () => ({ delayMs: 600, value: true })), path: `${base}/api/v1/namespaces/team-a/pods/web-0/exec?command=sh` },
    {
      name: "a UserToken watch, its ServiceAccount token minted in 600 ms",
      token: userToken,
      slow: (w: FakeWorld) => {
        const minted = w.tokenAnswer;
        w.tokenAnswer = (c, ns, name) => ({ delayMs: 600, value: minted(c, ns, name) as string | undefined });
      },
      path: `${watchPath}?watch=1`,
    },
  ])("the bound counts from the answer, not from the check's start: $name ends by the token's exp", async ({ token, slow, path }) => {
    slow(world);
    // 600 ms past a whole second: the gates' 600 ms then cross into the next second, where a bound read at the start would end 200 ms past exp.
    await new Promise((r) => setTimeout(r, (1600 - (Date.now() % 1000)) % 1000));
    const exp = nowSeconds() + 10;
    const headers = await bearer(token({}, { exp }));
    const sentAt = Date.now();
    const res = await check(path, headers);
    expect(res.allowed).toBe(true);
    if (!res.allowed) return;
    const seconds = res.query !== undefined ? Number(res.query[0]![1]) : Number(res.set["x-envoy-upstream-stream-duration-ms"]) / 1000;
    // The answer, and the stream after it, come 600 ms after the request at the earliest.
    expect(sentAt + 600 + seconds * 1000).toBeLessThanOrEqual(exp * 1000);
  });

  it("log follow and port-forward: Envoy ends them at the token's expiry; a list is left alone; the metric counts each bounded stream", async () => {
    const metric = async () => {
      const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
      const line = (kind: string) => Number(new RegExp(`^portcullis_bounded_streams_total\\{policy="kube-api-proxy",kind="${kind}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0);
      return { watch: line("watch-timeout"), stream: line("stream-duration") };
    };
    const before = await metric();
    const logs = await check(`${base}/api/v1/namespaces/team-a/pods/web-0/log?follow=true`, await bearer(pluginToken({}, { exp: nowSeconds() + 120 })));
    expect(logs).toMatchObject({ allowed: true, set: { "x-envoy-upstream-stream-duration-ms": expect.stringMatching(/^(119|120)000$/) } });
    const forward = await check(`${base}/api/v1/namespaces/team-a/pods/web-0/portforward?ports=80`, await bearer(userToken({}, { exp: nowSeconds() + 300 })));
    expect(forward).toMatchObject({ allowed: true, set: { "x-envoy-upstream-stream-duration-ms": expect.stringMatching(/^(299|300)000$/) } });
    const list = await check(`${base}/api/v1/namespaces/team-a/pods`, await bearer(pluginToken()));
    expect(list).toMatchObject({ allowed: true });
    if (list.allowed) expect(list.set).not.toHaveProperty("x-envoy-upstream-stream-duration-ms");
    expect(list).not.toHaveProperty("query");
    await check(`${watchPath}?watch=1`, await bearer(pluginToken()));
    const after = await metric();
    expect({ watch: after.watch - before.watch, stream: after.stream - before.stream }).toEqual({ watch: 1, stream: 2 });
  });
});
