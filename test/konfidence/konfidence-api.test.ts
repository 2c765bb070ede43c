/**
 * konfidence-api over real gRPC (ADR-0028): a real @grpc/grpc-js client sends CheckRequests as
 * Envoy would; the Project index is the real compiled store and token verification is faked, so
 * each row states who calls, on which endpoint, and the whole CheckResponse is asserted.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { AUD, GITHUB, GITHUB_ISSUER, KonfidenceWorld, mintToken, PLATFORM, PLATFORM_ISSUER, project } from "./fakes.ts";

const OVERWRITE = ["OVERWRITE_IF_EXISTS_OR_ADD"];
const GITLAB = "https://gitlab.example.com/.well-known/openid-configuration";

const konfidenceConfig = {
  providers: { allowList: [GITHUB] },
  session: { discoveryUrl: PLATFORM, audience: "konfidence-ui", cookie: "kden-session" },
};

let world: KonfidenceWorld;
let server: TestServer;
beforeAll(async () => {
  world = new KonfidenceWorld();
  world.konfidence.store.put(
    project("alpha", {
      admin: [{ session: { memberOf: ["platform-admins"] } }, { jwks: { endpoint: GITHUB, audience: AUD, claims: { sub: "repo:acme/infra:*" } } }],
      pm: [{ session: { memberOf: ["alpha-pms"] } }],
      dev: [
        { session: { memberOf: ["alpha-devs"] } },
        { jwks: { endpoint: GITHUB, audience: AUD, claims: { sub: "repo:acme/app:*", ref: "refs/heads/*" } } },
        // Not on the platform's allow-list: never matches.
        { jwks: { endpoint: GITLAB, audience: AUD, claims: { sub: "project:*" } } },
      ],
    }),
  );
  world.konfidence.store.put(project("beta", { dev: [{ session: { memberOf: ["beta-devs"] } }] }));
  server = await startTestServer(world, testConfig({ konfidence: konfidenceConfig }));
});
afterAll(async () => server.stop());
beforeEach(() => {
  const konfidence = world.konfidence;
  Object.assign(world, new FakeWorld());
  konfidence.reset();
});

const check = (path: string, headers: Record<string, string> = {}, method = "GET") =>
  server.check({ method, path, headers, policy: "konfidence-api" });
const session = async (sub: string, groups: string[], extra: Record<string, unknown> = {}) => ({
  cookie: `theme=dark; kden-session=${await mintToken({ iss: PLATFORM_ISSUER, sub, groups, ...extra })}`,
});
const workload = async (sub: string, extra: Record<string, unknown> = {}) => ({
  authorization: `Bearer ${await mintToken({ iss: GITHUB_ISSUER, aud: AUD, sub, ref: "refs/heads/main", ...extra })}`,
});
const alpha = "/api/v1/projects/alpha";

describe("konfidence-api: allowed requests, whole responses", () => {
  it("a session member of the dev group reads stages: subject and roles set, smuggled identity removed", async () => {
    const res = await check(`${alpha}/stages`, {
      ...(await session("ada", ["alpha-devs", "staff"])),
      "x-konfidence-roles": "admin",
      "x-konfidence-subject": "root",
      "x-konfidence-project": "beta",
      "x-fundament-user-id": "smuggled",
    });
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: { "x-konfidence-subject": "ada", "x-konfidence-roles": "dev" },
      appendActions: OVERWRITE,
      removed: ["x-fundament-user-id", "x-konfidence-project"],
    });
    expect(world.konfidence.calls).toEqual(["session", "project alpha"]);
  });

  it("a CI workload of the app repo reads vector deployments with its Bearer token", async () => {
    const res = await check(`${alpha}/vectorDeployments`, await workload("repo:acme/app:ref:refs/heads/main"));
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: { "x-konfidence-subject": "repo:acme/app:ref:refs/heads/main", "x-konfidence-roles": "dev" },
      appendActions: OVERWRITE,
      removed: [],
    });
    expect(world.konfidence.calls).toEqual([`verify ${GITHUB}`, "project alpha"]);
  });

  it("the union of matched roles decides: dev + pm may approve a promotion", async () => {
    const res = await check(`${alpha}/vectorPromotions/p-17/approve`, await session("grace", ["alpha-devs", "alpha-pms"]), "POST");
    expect(res).toMatchObject({ allowed: true, set: { "x-konfidence-subject": "grace", "x-konfidence-roles": "dev,pm" } });
  });

  it("an admin workload may change the roleBindings", async () => {
    const res = await check(`${alpha}/roleBindings/dev`, await workload("repo:acme/infra:ref:refs/tags/v1"), "PUT");
    expect(res).toMatchObject({ allowed: true, set: { "x-konfidence-roles": "admin" } });
  });

  it("the project list is open to any authenticated caller, even one without any role", async () => {
    const res = await check("/api/v1/projects", { ...(await session("nobody", [])), "x-konfidence-roles": "admin" });
    expect(res).toEqual({ allowed: true, grpc: 0, set: { "x-konfidence-subject": "nobody" }, appendActions: OVERWRITE, removed: ["x-konfidence-roles"] });
    expect(world.konfidence.calls).toEqual(["session"]);
  });

  it("the login flow is public, and still cannot smuggle identity headers", async () => {
    const res = await check("/api/v1/login?return_url=https://ui.example/", { "x-konfidence-subject": "root" });
    expect(res).toEqual({ allowed: true, grpc: 0, set: {}, appendActions: [], removed: ["x-konfidence-subject"] });
  });

  it("HEAD is authorized as GET", async () => {
    expect(await check(`${alpha}/logs`, await session("ada", ["alpha-devs"]), "HEAD")).toMatchObject({ allowed: true });
  });
});

describe("konfidence-api: denials (DESIGN denials table)", () => {
  const rows: Array<{
    name: string;
    path?: string;
    method?: string;
    headers: () => Promise<Record<string, string>>;
    setup?: (w: KonfidenceWorld) => void;
    http: number;
    grpc: number;
    reason: string;
    extraHeaders?: Record<string, string>;
  }> = [
    // 401: who is calling?
    { name: "no credentials", headers: async () => ({}), http: 401, grpc: 16, reason: "missing-token" },
    { name: "an unrelated cookie only", headers: async () => ({ cookie: "theme=dark" }), http: 401, grpc: 16, reason: "missing-token" },
    { name: "garbage bearer", headers: async () => ({ authorization: "Bearer not-a-jwt" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "Basic scheme", headers: async () => ({ authorization: "Basic dXNlcjpwYXNz" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a workload token its provider rejects", headers: () => workload("repo:acme/app:x", { fake: "reject" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a session its provider rejects", headers: () => session("ada", ["alpha-devs"], { fake: "reject" }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "two session cookies", headers: async () => ({ cookie: `kden-session=${await mintToken({ sub: "a" })}; kden-session=${await mintToken({ sub: "b" })}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a token whose issuer no Project names", headers: async () => ({ authorization: `Bearer ${await mintToken({ iss: "https://gitlab.example.com", sub: "x", aud: AUD })}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a token without an https issuer", headers: async () => ({ authorization: `Bearer ${await mintToken({ iss: "http://token.actions.githubusercontent.com", sub: "x" })}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a sub that is not safe header text", headers: () => workload("repo:acme/app:x\r\nx-konfidence-roles: admin"), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a bad Bearer is never rescued by a valid session cookie", headers: async () => ({ ...(await workload("repo:acme/app:x", { fake: "reject" })), ...(await session("ada", ["alpha-devs"])) }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "401 comes before 404: no probing for projects", path: "/api/v1/projects/nope/stages", headers: async () => ({}), http: 401, grpc: 16, reason: "missing-token" },

    // 404 / 403: what may the caller do here?
    { name: "missing project", path: "/api/v1/projects/nope/stages", headers: () => session("ada", ["alpha-devs"]), http: 404, grpc: 5, reason: "project-not-found" },
    { name: "no role: a member of another project's group", headers: () => session("bob", ["beta-devs"]), http: 403, grpc: 7, reason: "no-role" },
    { name: "no role: the right repo with the wrong audience", headers: () => workload("repo:acme/app:x", { aud: "https://other.example" }), http: 403, grpc: 7, reason: "no-role" },
    { name: "no role: the right repo on another branch pattern", headers: () => workload("repo:acme/app:x", { ref: "refs/tags/v1" }), http: 403, grpc: 7, reason: "no-role" },
    { name: "role lacks the permission: dev approving", path: `${alpha}/vectorPromotions/p-1/approve`, method: "POST", headers: () => session("ada", ["alpha-devs"]), http: 403, grpc: 7, reason: "role-denied" },
    { name: "role lacks the permission: pm changing roleBindings", path: `${alpha}/roleBindings`, method: "PATCH", headers: () => session("pat", ["alpha-pms"]), http: 403, grpc: 7, reason: "role-denied" },
    { name: "role lacks the permission: dev deleting the project", path: alpha, method: "DELETE", headers: () => workload("repo:acme/app:x"), http: 403, grpc: 7, reason: "role-denied" },

    // Endpoints not in the route table: decided before any credential is read.
    { name: "unknown endpoint", path: `${alpha}/secrets`, headers: async () => ({}), http: 404, grpc: 5, reason: "not-found" },
    { name: "unknown endpoint, even for an admin", path: `${alpha}/stages/s1/exec`, headers: () => session("root", ["platform-admins"]), http: 404, grpc: 5, reason: "not-found" },
    { name: "known endpoint, unknown method", path: `${alpha}/logs`, method: "DELETE", headers: async () => ({}), http: 405, grpc: 7, reason: "method-not-allowed", extraHeaders: { allow: "GET, HEAD" } },
    { name: "a dot segment", path: `${alpha}/stages/../roleBindings`, headers: () => session("ada", ["alpha-devs"]), http: 400, grpc: 3, reason: "bad-request" },

    // 503: cannot decide now.
    { name: "the workload's provider unreachable", headers: () => workload("repo:acme/app:x"), setup: (w) => w.konfidence.unavailable.add(GITHUB), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "the session provider unreachable", headers: () => session("ada", ["alpha-devs"]), setup: (w) => w.konfidence.unavailable.add(PLATFORM), http: 503, grpc: 14, reason: "dependency-unavailable" },
    { name: "the project index not synced", headers: () => session("ada", ["alpha-devs"]), setup: (w) => (w.konfidence.synced = false), http: 503, grpc: 14, reason: "dependency-unavailable" },
  ];

  it.each(rows)("$name → $http $reason", async ({ path, method, headers, setup, http, grpc, reason, extraHeaders }) => {
    setup?.(world);
    const res = await check(path ?? `${alpha}/stages`, await headers(), method);
    expect(res).toEqual({
      allowed: false,
      grpc,
      http,
      reason,
      headers: {
        "content-type": "application/json",
        "x-portcullis-reason": reason,
        ...(http === 401 ? { "www-authenticate": "Bearer" } : {}),
        ...(http === 503 ? { "retry-after": "1" } : {}),
        ...extraHeaders,
      },
      body: { error: { code: reason, message: expect.any(String) } },
    });
  });

  it("answers no-policy when konfidence is not configured", async () => {
    const plain = await startTestServer(new FakeWorld());
    try {
      const res = await plain.check({ path: `${alpha}/stages`, headers: await session("ada", ["alpha-devs"]), policy: "konfidence-api" });
      expect(res).toMatchObject({ allowed: false, http: 403, reason: "no-policy" });
    } finally {
      await plain.stop();
    }
  });
});

describe("konfidence-api: a session carried in a header", () => {
  it("accepts it alone, and refuses it next to a Bearer token (two explicit credentials)", async () => {
    const headerServer = await startTestServer(
      world,
      testConfig({ konfidence: { ...konfidenceConfig, session: { discoveryUrl: PLATFORM, audience: "konfidence-ui", header: "x-konfidence-session" } } }),
    );
    try {
      const token = await mintToken({ iss: PLATFORM_ISSUER, sub: "ada", groups: ["alpha-devs"] });
      const alone = await headerServer.check({ path: `${alpha}/stages`, headers: { "x-konfidence-session": token }, policy: "konfidence-api" });
      // The credential header is itself an x-konfidence-* header: it never reaches the upstream.
      expect(alone).toMatchObject({ allowed: true, set: { "x-konfidence-subject": "ada" }, removed: ["x-konfidence-session"] });
      const both = await headerServer.check({
        path: `${alpha}/stages`,
        headers: { "x-konfidence-session": token, ...(await workload("repo:acme/app:x")) },
        policy: "konfidence-api",
      });
      expect(both).toMatchObject({ allowed: false, http: 401, reason: "invalid-token" });
    } finally {
      await headerServer.stop();
    }
  });
});
