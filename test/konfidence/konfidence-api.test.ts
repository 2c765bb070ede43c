/**
 * konfidence-api over real gRPC (ADR-0028): a real @grpc/grpc-js client sends CheckRequests as
 * Envoy would; the Project index is the real compiled store and token verification is faked, so
 * each row states who calls, on which endpoint, and the whole CheckResponse is asserted.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { AUD, CI_NET, CI_NET_ISSUER, GITHUB, GITHUB_ISSUER, KonfidenceWorld, mintToken, PLATFORM, PLATFORM_ISSUER, project } from "./fakes.ts";

const OVERWRITE = ["OVERWRITE_IF_EXISTS_OR_ADD"];
const GITLAB = "https://gitlab.example.com/.well-known/openid-configuration";
/** Named by project beta's jwks subject, for CI_NET only. */
const BETA_AUD = "https://beta.example/api";
const PLATFORM_AUD = "https://konfidence.example/platform";
const SESSION_ISSUER = `session:${PLATFORM_ISSUER}`;
/** Konfidence's UI: the one origin whose requests the session cookie authenticates. */
const KONFIDENCE_UI = "https://konfidence.example";

const konfidenceConfig = {
  providers: { allowList: [GITHUB, CI_NET], platformAudiences: [PLATFORM_AUD] },
  session: { discoveryUrl: PLATFORM, audience: "konfidence-ui", cookie: "kden-session", cookieOrigins: [KONFIDENCE_UI] },
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
  world.konfidence.store.put(
    project("beta", {
      dev: [{ session: { memberOf: ["beta-devs"] } }, { jwks: { endpoint: CI_NET, audience: BETA_AUD, claims: { sub: "beta:*" } } }],
    }),
  );
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
const sessionCookie = async (sub: string, groups: string[], extra: Record<string, unknown> = {}) =>
  `theme=dark; kden-session=${await mintToken({ iss: PLATFORM_ISSUER, sub, groups, ...extra })}`;
/** The session cookie as Konfidence's UI sends it. */
const session = async (sub: string, groups: string[], extra: Record<string, unknown> = {}) => ({
  cookie: await sessionCookie(sub, groups, extra),
  origin: KONFIDENCE_UI,
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
      "x-konfidence-issuer": GITHUB_ISSUER,
      "x-konfidence-project": "beta",
      "x-fundament-user-id": "smuggled",
    });
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: { "x-konfidence-issuer": SESSION_ISSUER, "x-konfidence-subject": "ada", "x-konfidence-roles": "dev" },
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
      set: { "x-konfidence-issuer": GITHUB_ISSUER, "x-konfidence-subject": "repo:acme/app:ref:refs/heads/main", "x-konfidence-roles": "dev" },
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
    expect(res).toEqual({
      allowed: true,
      grpc: 0,
      set: { "x-konfidence-issuer": SESSION_ISSUER, "x-konfidence-subject": "nobody" },
      appendActions: OVERWRITE,
      removed: ["x-konfidence-roles"],
    });
    expect(world.konfidence.calls).toEqual(["session"]);
  });

  it("the login flow is public, and still cannot smuggle identity headers", async () => {
    const res = await check("/api/v1/login?return_url=https://ui.example/", { "x-konfidence-subject": "root", "x-konfidence-issuer": GITHUB_ISSUER });
    expect(res).toEqual({ allowed: true, grpc: 0, set: {}, appendActions: [], removed: ["x-konfidence-issuer", "x-konfidence-subject"] });
  });

  it("HEAD is authorized as GET", async () => {
    expect(await check(`${alpha}/logs`, await session("ada", ["alpha-devs"]), "HEAD")).toMatchObject({ allowed: true });
  });

  it("the session cookie counts from the UI's own page without an Origin (Sec-Fetch-Site: same-origin)", async () => {
    const headers = { cookie: await sessionCookie("ada", ["alpha-devs"]), "sec-fetch-site": "same-origin" };
    expect(await check(`${alpha}/stages`, headers)).toMatchObject({ allowed: true, set: { "x-konfidence-subject": "ada", "x-konfidence-roles": "dev" } });
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
    { name: "two session cookies", headers: async () => ({ cookie: `kden-session=${await mintToken({ sub: "a" })}; kden-session=${await mintToken({ sub: "b" })}`, origin: KONFIDENCE_UI }), http: 401, grpc: 16, reason: "invalid-token" },
    // The session cookie counts only from a page the browser vouches for: browsers attach it to
    // cross-site forms and navigations, and to another page of the same site, which CORS does not stop.
    { name: "a session cookie from another origin", headers: async () => ({ cookie: await sessionCookie("ada", ["alpha-devs"]), origin: "https://evil.example", "sec-fetch-site": "cross-site" }), http: 401, grpc: 16, reason: "missing-token" },
    { name: "a session cookie from another page of the same site", headers: async () => ({ cookie: await sessionCookie("ada", ["alpha-devs"]), origin: "https://plugins.konfidence.example", "sec-fetch-site": "same-site" }), http: 401, grpc: 16, reason: "missing-token" },
    { name: "a session cookie on a cross-site navigation (no Origin)", headers: async () => ({ cookie: await sessionCookie("ada", ["alpha-devs"]), "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate" }), http: 401, grpc: 16, reason: "missing-token" },
    { name: "a session cookie with neither Origin nor Sec-Fetch-Site", headers: async () => ({ cookie: await sessionCookie("ada", ["alpha-devs"]) }), http: 401, grpc: 16, reason: "missing-token" },
    { name: "a token whose issuer no Project names", headers: async () => ({ authorization: `Bearer ${await mintToken({ iss: "https://gitlab.example.com", sub: "x", aud: AUD })}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a token without an https issuer", headers: async () => ({ authorization: `Bearer ${await mintToken({ iss: "http://token.actions.githubusercontent.com", sub: "x" })}` }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a sub that is not safe header text", headers: () => workload("repo:acme/app:x\r\nx-konfidence-roles: admin"), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "a bad Bearer is never rescued by a valid session cookie", headers: async () => ({ ...(await workload("repo:acme/app:x", { fake: "reject" })), ...(await session("ada", ["alpha-devs"])) }), http: 401, grpc: 16, reason: "invalid-token" },
    { name: "401 comes before 404: no probing for projects", path: "/api/v1/projects/nope/stages", headers: async () => ({}), http: 401, grpc: 16, reason: "missing-token" },

    // 404 / 403: what may the caller do here?
    { name: "missing project", path: "/api/v1/projects/nope/stages", headers: () => session("ada", ["alpha-devs"]), http: 404, grpc: 5, reason: "project-not-found" },
    { name: "no role: a member of another project's group", headers: () => session("bob", ["beta-devs"]), http: 403, grpc: 7, reason: "no-role" },
    { name: "the right repo with an audience no Project names: no Konfidence identity", headers: () => workload("repo:acme/app:x", { aud: "https://other.example" }), http: 401, grpc: 16, reason: "wrong-audience" },
    { name: "an audience no Project names comes before 404: no probing for projects", path: "/api/v1/projects/nope/stages", headers: () => workload("repo:acme/app:x", { aud: "https://other.example" }), http: 401, grpc: 16, reason: "wrong-audience" },
    { name: "no role: a token for another Project's audience", headers: async () => ({ authorization: `Bearer ${await mintToken({ iss: CI_NET_ISSUER, aud: BETA_AUD, sub: "beta:deploy" })}` }), http: 403, grpc: 7, reason: "no-role" },
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

describe("konfidence-api: a workload token is a Konfidence identity only with an audience Konfidence names (issue 11, token replay)", () => {
  const AUTHENTICATED = [
    { method: "GET", path: "/api/v1/projects" },
    { method: "GET", path: "/api/v1/identity" },
    { method: "POST", path: "/api/v1/logout" },
  ];
  const bearer = async (claims: Record<string, unknown>) => ({ authorization: `Bearer ${await mintToken(claims)}` });
  // Tokens from allow-listed providers that some Project names, whose audience names nothing of Konfidence's.
  const replayed = [
    { name: "aud=https://evil.example", claims: { iss: GITHUB_ISSUER, aud: "https://evil.example", sub: "repo:mallory/x:ref:refs/heads/main" } },
    { name: "no aud", claims: { iss: GITHUB_ISSUER, sub: "repo:mallory/x:ref:refs/heads/main" } },
    { name: "aud=[] ", claims: { iss: GITHUB_ISSUER, aud: [], sub: "repo:mallory/x:ref:refs/heads/main" } },
    { name: "aud=[evil, another service]", claims: { iss: GITHUB_ISSUER, aud: ["https://evil.example", "sts.amazonaws.com"], sub: "repo:mallory/x" } },
    { name: "an audience a Project names, but for another provider (beta's, from GitHub)", claims: { iss: GITHUB_ISSUER, aud: BETA_AUD, sub: "beta:x" } },
    { name: "an audience a Project names, but for another provider (alpha's, from ci.example.net)", claims: { iss: CI_NET_ISSUER, aud: AUD, sub: "repo:acme/app:x" } },
  ];
  const attacks = AUTHENTICATED.flatMap((route) => replayed.map((token) => ({ ...route, ...token })));

  it.each(attacks)("$method $path with a token of $name → 401 wrong-audience", async ({ method, path, claims }) => {
    const res = await check(path, { ...(await bearer(claims)), "x-konfidence-subject": "ada", "x-konfidence-issuer": SESSION_ISSUER }, method);
    expect(res).toEqual({
      allowed: false,
      grpc: 16,
      http: 401,
      reason: "wrong-audience",
      headers: { "content-type": "application/json", "x-portcullis-reason": "wrong-audience", "www-authenticate": "Bearer" },
      body: { error: { code: "wrong-audience", message: expect.any(String) } },
    });
    // The token was verified (its provider is named) before its audience was judged.
    expect(world.konfidence.calls).toEqual([`verify ${claims.iss === GITHUB_ISSUER ? GITHUB : CI_NET}`]);
  });

  const accepted = [
    { name: "the audience alpha's subject names for GitHub", claims: { iss: GITHUB_ISSUER, aud: AUD, sub: "repo:acme/whatever:x" }, issuer: GITHUB_ISSUER },
    { name: "the audience beta's subject names for ci.example.net", claims: { iss: CI_NET_ISSUER, aud: BETA_AUD, sub: "beta:deploy" }, issuer: CI_NET_ISSUER },
    { name: "a configured platform audience", claims: { iss: GITHUB_ISSUER, aud: PLATFORM_AUD, sub: "repo:acme/tools:x" }, issuer: GITHUB_ISSUER },
    { name: "a list holding a named audience among others", claims: { iss: GITHUB_ISSUER, aud: ["https://evil.example", AUD], sub: "repo:acme/app:x" }, issuer: GITHUB_ISSUER },
  ];
  it.each(AUTHENTICATED.flatMap((route) => accepted.map((token) => ({ ...route, ...token }))))(
    "$method $path with a token of $name → allowed, its issuer named",
    async ({ method, path, claims, issuer }) => {
      const res = await check(path, { ...(await bearer(claims)), "x-konfidence-issuer": PLATFORM_ISSUER, "x-konfidence-roles": "admin" }, method);
      expect(res).toEqual({
        allowed: true,
        grpc: 0,
        set: { "x-konfidence-issuer": issuer, "x-konfidence-subject": claims.sub },
        appendActions: OVERWRITE,
        removed: ["x-konfidence-roles"],
      });
    },
  );

  it("a workload whose sub equals a session user's is told apart by x-konfidence-issuer", async () => {
    const asWorkload = await check("/api/v1/identity", await bearer({ iss: GITHUB_ISSUER, aud: AUD, sub: "ada" }));
    const asSession = await check("/api/v1/identity", await session("ada", []));
    expect(asWorkload).toMatchObject({ allowed: true, set: { "x-konfidence-issuer": GITHUB_ISSUER, "x-konfidence-subject": "ada" } });
    expect(asSession).toMatchObject({ allowed: true, set: { "x-konfidence-issuer": SESSION_ISSUER, "x-konfidence-subject": "ada" } });
  });

  it("a platform audience admits the caller as authenticated, never into a project", async () => {
    const res = await check(`${alpha}/stages`, await bearer({ iss: GITHUB_ISSUER, aud: PLATFORM_AUD, sub: "repo:acme/app:ref:refs/heads/main", ref: "refs/heads/main" }));
    expect(res).toMatchObject({ allowed: false, http: 403, reason: "no-role" });
  });

  it("an audience counts only while a Project names it", async () => {
    const token = await bearer({ iss: CI_NET_ISSUER, aud: BETA_AUD, sub: "beta:deploy" });
    const beta = (audience: string) =>
      project("beta", { dev: [{ session: { memberOf: ["beta-devs"] } }, { jwks: { endpoint: CI_NET, audience, claims: { sub: "beta:*" } } }] });
    expect(await check("/api/v1/projects", token)).toMatchObject({ allowed: true });
    world.konfidence.store.put(beta("https://beta-v2.example/api"));
    try {
      expect(await check("/api/v1/projects", token)).toMatchObject({ allowed: false, http: 401, reason: "wrong-audience" });
    } finally {
      world.konfidence.store.put(beta(BETA_AUD));
    }
  });

  it("an issuer that is not safe header text is refused, never passed on", async () => {
    // Full-width letters: URL parsing maps this iss to GitHub's discovery URL, but the text itself
    // (which the fake, like a provider whose document names it, vouches for) is not header-safe.
    const iss = "https://token.actions.githubusercontent.\uff43\uff4f\uff4d";
    const res = await check("/api/v1/identity", await bearer({ iss, aud: AUD, sub: "repo:acme/app:x" }));
    expect(res).toMatchObject({ allowed: false, http: 401, reason: "invalid-token" });
    expect(world.konfidence.calls).toEqual([`verify ${GITHUB}`]);
  });
});
