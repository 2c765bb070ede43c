/**
 * plugin-proxy and plugin-assets over real gRPC (FUN-17 §4, §7, §11): whole CheckResponses for
 * every gate, the upstream headers Envoy routes on, and the caller's credential removed.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld, installation } from "../../support/fakes.ts";
import { requestModeEnabled } from "../../support/request-mode.ts";
import { startTestServer, type TestServer } from "../../support/server.ts";
import { nowSeconds } from "../../support/jwt-craft.ts";
import { ids, pluginToken, userToken } from "../../support/tokens.ts";

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

const runtime = `/installations/${ids.installation}/runtime/api/certificates`;
const proxy = (path: string, headers: Record<string, string>, method = "GET") =>
  server.check({ method, path, headers, policy: "plugin-proxy" });
const bearer = async (token: Promise<string>) => ({ authorization: `Bearer ${await token}` });

describe("plugin-proxy", () => {
  it("allows the runtime route: upstream headers set, caller credential and smuggled identity removed", async () => {
    const res = await proxy(runtime, {
      ...(await bearer(pluginToken())),
      cookie: "other=1",
      "x-fundament-cluster-id": ids.otherCluster,
      "x-fundament-upstream-service": "kube-apiserver",
      "x-konfidence-roles": "admin",
    });
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: {
        "x-fundament-cluster-id": ids.cluster,
        "x-fundament-upstream-namespace": "plugin-cert-manager",
        "x-fundament-upstream-service": "plugin-cert-manager",
        "x-fundament-user-id": ids.user,
        "x-fundament-installation-id": ids.installation,
        // Ended by Envoy at the token's expiry (900 s minted; whole seconds left, rounded down, on a machine that may be busy).
        "x-envoy-upstream-stream-duration-ms": expect.stringMatching(/^(89[5-9]|900)000$/),
      },
      appendActions: ["OVERWRITE_IF_EXISTS_OR_ADD"],
      removed: ["authorization", "cookie", "x-konfidence-roles"],
    });
    expect(world.calls).toEqual([`canView ${ids.user} ${ids.cluster}`, `installation ${ids.cluster} ${ids.installation}`]);
  });

  it("a registered cluster with a service domain: the domain for Envoy's shared route; a static cluster: a client's copy removed", async () => {
    const smuggled = { ...(await bearer(pluginToken())), "x-fundament-upstream-domain": "evil.example" };
    const onStatic = await proxy(runtime, smuggled);
    expect(onStatic).toMatchObject({ allowed: true, removed: expect.arrayContaining(["x-fundament-upstream-domain"]) });
    expect(onStatic.allowed && onStatic.set).not.toHaveProperty("x-fundament-upstream-domain");
    world.serviceDomains.set(ids.cluster, "svc.registered.example");
    for (const path of [runtime, `/installations/${ids.installation}/controller/status`]) {
      const res = await proxy(path, smuggled);
      expect(res).toMatchObject({ allowed: true, set: { "x-fundament-cluster-id": ids.cluster, "x-fundament-upstream-domain": "svc.registered.example" } });
    }
  });

  it("ends every allowed request by the token's expiry (a WebSocket, events, a long answer), whatever the client asked; a token a second from expiry opens nothing", async () => {
    const metric = async () => {
      const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
      return Number(/^portcullis_bounded_streams_total\{policy="plugin-proxy",kind="stream-duration"\} (\d+)$/m.exec(text)?.[1] ?? 0);
    };
    const before = await metric();
    const upgrade = { connection: "Upgrade", upgrade: "websocket", "x-envoy-upstream-stream-duration-ms": "86400000" };
    // Whole seconds left when checked, rounded down: up to `slack` seconds may pass on a busy machine.
    const endsWithin = (res: Awaited<ReturnType<typeof proxy>>, lifetime: number, slack = 5) => {
      expect(res).toMatchObject({ allowed: true, set: { "x-envoy-upstream-stream-duration-ms": expect.stringMatching(/^\d+000$/) } });
      const seconds = res.allowed ? Number(res.set["x-envoy-upstream-stream-duration-ms"]) / 1000 : Number.NaN;
      expect(seconds).toBeLessThanOrEqual(lifetime);
      expect(seconds).toBeGreaterThanOrEqual(lifetime - slack);
    };
    endsWithin(await proxy(runtime, { ...(await bearer(pluginToken({}, { exp: nowSeconds() + 120 }))), ...upgrade }), 120);
    endsWithin(await proxy(`/installations/${ids.installation}/controller/events`, { ...(await bearer(pluginToken({}, { exp: nowSeconds() + 30 }))), accept: "text/event-stream" }), 30);
    expect(await metric()).toBe(before + 2);
    // Within the clock tolerance of its expiry: accepted by verification, but no stream can start.
    const expiring = await proxy(runtime, await bearer(pluginToken({}, { exp: nowSeconds() })));
    expect(expiring).toMatchObject({ allowed: false, http: 401, reason: "invalid-token" });
  });

  it("routes the controller route to the configured plugin-controller", async () => {
    const res = await proxy(`/installations/${ids.installation}/controller/status`, await bearer(pluginToken()));
    expect(res).toMatchObject({
      allowed: true,
      set: { "x-fundament-upstream-namespace": "fundament-system", "x-fundament-upstream-service": "plugin-controller" },
    });
  });

  it.each([
    { name: "no credentials", headers: async () => ({}), http: 401, reason: "missing-token" },
    { name: "UserToken cookie only (cookies are not read here)", headers: async () => ({ cookie: `fundament_auth=${await userToken()}` }), http: 401, reason: "missing-token" },
    { name: "UserToken as Bearer (escalation wall)", headers: () => bearer(userToken()), http: 401, reason: "wrong-audience" },
    { name: "token for another service", headers: () => bearer(pluginToken({ aud: "dcim-api" })), http: 401, reason: "wrong-audience" },
    { name: "malformed bearer", headers: async () => ({ authorization: "Bearer a.b" }), http: 401, reason: "invalid-token" },
    // DESIGN.md "Denials": impersonation headers on a plugin request, whatever route takes its PluginToken.
    { name: "Impersonate-User on the runtime route", headers: async () => ({ ...(await bearer(pluginToken())), "impersonate-user": "system:admin" }), http: 403, reason: "impersonation-forbidden" },
    { name: "Impersonate-Group on the controller route", path: `/installations/${ids.installation}/controller/status`, headers: async () => ({ ...(await bearer(pluginToken())), "impersonate-group": "system:masters" }), http: 403, reason: "impersonation-forbidden" },
    { name: "Impersonate-Extra-* alone", headers: async () => ({ ...(await bearer(pluginToken())), "impersonate-extra-scopes": "view" }), http: 403, reason: "impersonation-forbidden" },
    { name: "installation id differs from the claim", path: `/installations/${ids.otherInstallation}/runtime/`, http: 403, reason: "installation-mismatch" },
    { name: "installation id in upper case", path: `/installations/${ids.installation.toUpperCase()}/runtime/`, http: 403, reason: "installation-mismatch" },
    { name: "installation id not a UUID", path: `/installations/cert-manager/runtime/`, http: 400, reason: "bad-request" },
    { name: "unknown route under the installation", path: `/installations/${ids.installation}/admin/`, http: 404, reason: "not-found" },
    { name: "can_view revoked", setup: (w: FakeWorld) => (w.canViewAnswer = false), http: 403, reason: "can-view-denied" },
    { name: "OpenFGA down", setup: (w: FakeWorld) => (w.canViewAnswer = "unavailable"), http: 503, reason: "dependency-unavailable" },
    { name: "token's cluster not configured", setup: (w: FakeWorld) => w.clusterIds.clear(), http: 404, reason: "unknown-cluster" },
    { name: "installation gone (uninstalled, or reinstalled under a new uid)", setup: (w: FakeWorld) => w.installationsByUid.clear(), http: 403, reason: "installation-unavailable" },
    { name: "installation being deleted", setup: (w: FakeWorld) => w.installationsByUid.set(ids.installation, installation({ terminating: true })), http: 403, reason: "installation-unavailable" },
    { name: "uid now names another installation", setup: (w: FakeWorld) => w.installationsByUid.set(ids.installation, installation({ name: "other" })), http: 403, reason: "installation-mismatch" },
    { name: "index not synced", setup: (w: FakeWorld) => (w.indexSynced = false), http: 503, reason: "dependency-unavailable" },
  ])("$name → $http $reason", async ({ headers, path, setup, http, reason }) => {
    setup?.(world);
    const res = await proxy(path ?? runtime, await (headers ?? (() => bearer(pluginToken())))());
    expect(res).toMatchObject({ allowed: false, http, reason, body: { error: { code: reason } } });
    if (!res.allowed) expect(res.headers["www-authenticate"]).toBe(http === 401 ? "Bearer" : undefined);
  });

  it("rejects an installation_name claim that cannot become a header or a Kubernetes name", async () => {
    for (const bad of ["Cert-Manager", "a\r\nx-injected: 1", "x".repeat(57), "../etc"]) {
      expect(await proxy(runtime, await bearer(pluginToken({ installation_name: bad })))).toMatchObject({ allowed: false, reason: "invalid-token" });
    }
  });
});

describe("plugin-assets", () => {
  const assets = (path: string, method = "GET", headers: Record<string, string> = {}) =>
    server.check({ method, path, headers, policy: "plugin-assets" });

  it.each([
    "/plugins/cert-manager/1.4.0/console/index.html",
    "/plugins/cert-manager/1.4.0/console/assets/app.js",
    "/plugins/sdk/1.0.0/sdk.js",
  ])("allows GET and HEAD without credentials: %s", async (path) => {
    expect(await assets(path)).toEqual({ allowed: true, grpc: 0, set: {}, appendActions: [], removed: [] });
    expect(await assets(path, "HEAD")).toMatchObject({ allowed: true });
  });

  it("strips credentials and smuggled identity headers on the way to the asset origin", async () => {
    const res = await assets("/plugins/sdk/1.0.0/sdk.js", "GET", { authorization: "Bearer x.y.z", cookie: "a=b", "x-fundament-user-id": "u" });
    expect(res).toMatchObject({ allowed: true, removed: ["authorization", "cookie", "x-fundament-user-id"] });
  });

  it.each(["POST", "PUT", "DELETE", "PATCH"])("denies %s with 405 and an Allow header", async (method) => {
    expect(await assets("/plugins/cert-manager/1.4.0/console/index.html", method)).toMatchObject({
      allowed: false,
      http: 405,
      reason: "method-not-allowed",
      headers: { allow: "GET, HEAD" },
    });
  });

  it.each([
    "/plugins/cert-manager/1.4.0/index.html",
    "/plugins/Cert-Manager/1.4.0/console/index.html",
    "/plugins/sdk/",
    "/other/path",
  ])("denies paths outside the asset routes: %s", async (path) => {
    expect(await assets(path)).toMatchObject({ allowed: false, http: 404, reason: "not-found" });
  });

  it("denies a path that climbs out of its plugin's assets (request mode refuses it before the policy, as Envoy would not pass it on)", async () => {
    const expected = requestModeEnabled() ? { http: 400, reason: "bad-request" } : { http: 404, reason: "not-found" };
    expect(await assets("/plugins/cert-manager/1.4.0/console/../../other/1.0.0/console/x.js")).toMatchObject({ allowed: false, ...expected });
  });
});
