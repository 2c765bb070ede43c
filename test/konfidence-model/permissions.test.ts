/**
 * The route table (endpoint → resource kind and verb) and the permission matrix (role → kind →
 * verbs), with the defaults that express ADR-0028's role intent.
 */
import { describe, expect, it } from "vitest";
import {
  compilePermissions,
  compileRoutes,
  DEFAULT_PERMISSIONS,
  DEFAULT_ROUTES,
  RESOURCE_KINDS,
  type RouteSpec,
  RouteTableError,
  VERBS,
} from "../../src/konfidence-model/permissions.ts";

const routes = compileRoutes(DEFAULT_ROUTES);
const P = "/api/v1/projects/alpha";

describe("default route table", () => {
  const rows: Array<{ method: string; path: string; expected: ReturnType<typeof routes.match> }> = [
    // Outside any project.
    { method: "GET", path: "/api/v1/projects", expected: { kind: "authenticated" } },
    { method: "GET", path: "/api/v1/identity", expected: { kind: "authenticated" } },
    { method: "POST", path: "/api/v1/logout", expected: { kind: "authenticated" } },
    { method: "GET", path: "/api/v1/login", expected: { kind: "public" } },
    { method: "GET", path: "/api/v1/auth/callback", expected: { kind: "public" } },
    { method: "POST", path: "/api/v1/exchange", expected: { kind: "public" } },

    // The project itself and its roleBindings.
    { method: "GET", path: P, expected: { kind: "project", projectId: "alpha", resource: "project", verb: "read" } },
    { method: "HEAD", path: P, expected: { kind: "project", projectId: "alpha", resource: "project", verb: "read" } },
    { method: "PATCH", path: P, expected: { kind: "project", projectId: "alpha", resource: "project", verb: "update" } },
    { method: "DELETE", path: P, expected: { kind: "project", projectId: "alpha", resource: "project", verb: "delete" } },
    { method: "GET", path: `${P}/roleBindings`, expected: { kind: "project", projectId: "alpha", resource: "roleBindings", verb: "read" } },
    { method: "PUT", path: `${P}/roleBindings/pm`, expected: { kind: "project", projectId: "alpha", resource: "roleBindings", verb: "update" } },

    // Collections: GET/POST the collection, GET/PUT/PATCH/DELETE an item.
    { method: "GET", path: `${P}/stages`, expected: { kind: "project", projectId: "alpha", resource: "stages", verb: "read" } },
    { method: "POST", path: `${P}/stages`, expected: { kind: "project", projectId: "alpha", resource: "stages", verb: "create" } },
    { method: "PATCH", path: `${P}/stages/dev-1`, expected: { kind: "project", projectId: "alpha", resource: "stages", verb: "update" } },
    { method: "GET", path: `${P}/landscapes/eu`, expected: { kind: "project", projectId: "alpha", resource: "landscapes", verb: "read" } },
    { method: "DELETE", path: `${P}/vectorTemplates/t1`, expected: { kind: "project", projectId: "alpha", resource: "vectorTemplates", verb: "delete" } },
    { method: "PUT", path: `${P}/vectorPromotionConfigs/c1`, expected: { kind: "project", projectId: "alpha", resource: "vectorPromotionConfigs", verb: "update" } },
    { method: "POST", path: `${P}/vectorPromotions`, expected: { kind: "project", projectId: "alpha", resource: "vectorPromotions", verb: "create" } },
    { method: "GET", path: `${P}/vectorPromotions/p1`, expected: { kind: "project", projectId: "alpha", resource: "vectorPromotions", verb: "read" } },

    // Approval, status, logs, artifacts.
    { method: "POST", path: `${P}/vectorPromotions/p1/approve`, expected: { kind: "project", projectId: "alpha", resource: "promotionApprovals", verb: "create" } },
    { method: "GET", path: `${P}/status`, expected: { kind: "project", projectId: "alpha", resource: "deployments", verb: "read" } },
    { method: "GET", path: `${P}/stages/dev-1/status`, expected: { kind: "project", projectId: "alpha", resource: "deployments", verb: "read" } },
    { method: "GET", path: `${P}/vectorDeployments/d1`, expected: { kind: "project", projectId: "alpha", resource: "deployments", verb: "read" } },
    { method: "GET", path: `${P}/vectorDeployments/d1/logs`, expected: { kind: "project", projectId: "alpha", resource: "logs", verb: "read" } },
    { method: "GET", path: `${P}/logs`, expected: { kind: "project", projectId: "alpha", resource: "logs", verb: "read" } },
    { method: "GET", path: `${P}/artifactDeployments`, expected: { kind: "project", projectId: "alpha", resource: "artifacts", verb: "read" } },

    // Known paths, other methods: 405 with the methods that exist.
    { method: "DELETE", path: "/api/v1/projects", expected: { kind: "method-not-allowed", allow: ["GET", "HEAD"] } },
    { method: "GET", path: `${P}/vectorPromotions/p1/approve`, expected: { kind: "method-not-allowed", allow: ["POST"] } },
    { method: "POST", path: `${P}/logs`, expected: { kind: "method-not-allowed", allow: ["GET", "HEAD"] } },
    { method: "POST", path: `${P}/stages/dev-1`, expected: { kind: "method-not-allowed", allow: ["DELETE", "GET", "HEAD", "PATCH", "PUT"] } },

    // Not in the table.
    { method: "GET", path: `${P}/secrets`, expected: { kind: "not-found" } },
    { method: "GET", path: `${P}/stages/dev-1/versions`, expected: { kind: "not-found" } },
    { method: "GET", path: "/api/v2/projects", expected: { kind: "not-found" } },
    { method: "GET", path: "/api/v1/projects/", expected: { kind: "not-found" } },
    { method: "GET", path: `${P}/stages/`, expected: { kind: "not-found" } },
    { method: "GET", path: "/api/v1/projects//stages", expected: { kind: "not-found" } },
    { method: "GET", path: "/API/v1/projects", expected: { kind: "not-found" } },
    { method: "GET", path: "", expected: { kind: "not-found" } },

    // Not normalized: refused, never resolved.
    { method: "GET", path: `${P}/stages/../roleBindings`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: `${P}/./stages`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: `${P}/stages/a%2Fb`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: "/api/v1/projects/alpha%5cx/stages", expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: `${P}/stages/%2e%2e`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "POST", path: `${P}/vectorPromotions/%2E./approve`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: `${P}/stages/%E0%A4%A`, expected: { kind: "malformed", detail: "path is not normalized" } },
    { method: "GET", path: `${P}/stages/dev%2D1`, expected: { kind: "project", projectId: "alpha", resource: "stages", verb: "read" } },
  ];
  it.each(rows)("$method $path", ({ method, path, expected }) => {
    expect(routes.match(method, path)).toEqual(expected);
  });

  it("gives every resource kind at least one endpoint", () => {
    const kinds = new Set(DEFAULT_ROUTES.flatMap((r) => ("kind" in r ? [r.kind] : [])));
    expect([...kinds].sort()).toEqual([...RESOURCE_KINDS].sort());
  });
});

describe("compileRoutes rejects tables it cannot decide with", () => {
  const rows: Array<{ name: string; specs: RouteSpec[]; message: RegExp }> = [
    {
      name: "two routes for one method and shape",
      specs: [
        { methods: ["GET"], path: "/api/v1/projects/{projectId}/stages/{a}", kind: "stages", verb: "read" },
        { methods: ["GET", "POST"], path: "/api/v1/projects/{projectId}/stages/{b}", kind: "logs", verb: "read" },
      ],
      message: /two routes for GET/,
    },
    { name: "a kind outside a project", specs: [{ methods: ["GET"], path: "/api/v1/stages", kind: "stages", verb: "read" }], message: /must start with/ },
    { name: "the project parameter renamed", specs: [{ methods: ["GET"], path: "/api/v1/projects/{id}/stages", kind: "stages", verb: "read" }], message: /must start with/ },
    { name: "public access inside a project", specs: [{ methods: ["GET"], path: "/api/v1/projects/{projectId}/logs", access: "public" }], message: /needs a kind/ },
    { name: "public access inside a project under another name", specs: [{ methods: ["GET"], path: "/api/v1/projects/{x}/logs", access: "public" }], message: /needs a kind/ },
    { name: "a segment that is neither", specs: [{ methods: ["GET"], path: "/api/v1/pro{jects", access: "public" }], message: /neither a literal/ },
    { name: "a relative template", specs: [{ methods: ["GET"], path: "api/v1/login", access: "public" }], message: /must start with/ },
  ];
  it.each(rows)("$name", ({ specs, message }) => {
    expect(() => compileRoutes(specs)).toThrow(RouteTableError);
    expect(() => compileRoutes(specs)).toThrow(message);
  });

  it("prefers literal segments over parameters, whatever the order", () => {
    const table = compileRoutes([
      { methods: ["GET"], path: "/api/v1/projects/{projectId}/stages/{stageId}", kind: "stages", verb: "read" },
      { methods: ["GET"], path: "/api/v1/projects/{projectId}/stages/overview", kind: "deployments", verb: "read" },
    ]);
    expect(table.match("GET", `${P}/stages/overview`)).toMatchObject({ resource: "deployments" });
    expect(table.match("GET", `${P}/stages/dev`)).toMatchObject({ resource: "stages" });
  });

  // A shorter template between them made the sort's order inconsistent, and list order decided.
  it("prefers the literal with routes of other lengths listed between them", () => {
    const table = compileRoutes([
      { methods: ["PUT"], path: "/api/v1/projects/{projectId}/stages/{stageId}", kind: "stages", verb: "update" },
      { methods: ["GET"], path: "/api/v1/projects/{projectId}", kind: "project", verb: "read" },
      { methods: ["PUT"], path: "/api/v1/projects/{projectId}/stages/order", kind: "landscapes", verb: "update" },
    ]);
    expect(table.match("PUT", `${P}/stages/order`)).toMatchObject({ resource: "landscapes", verb: "update" });
  });

  it("an operator's literal endpoint inserted anywhere in the default table is matched as itself, never as a parameter template", () => {
    const literal: RouteSpec = { methods: ["PUT"], path: "/api/v1/projects/{projectId}/stages/order", kind: "landscapes", verb: "update" };
    const misread = [];
    for (let at = 0; at <= DEFAULT_ROUTES.length; at++) {
      const table = compileRoutes([...DEFAULT_ROUTES.slice(0, at), literal, ...DEFAULT_ROUTES.slice(at)]);
      const matched = table.match("PUT", `${P}/stages/order`);
      if (!(matched.kind === "project" && matched.resource === "landscapes")) misread.push(at);
    }
    expect(misread).toEqual([]);
  });
});

describe("default permission matrix (ADR-0028 role intent)", () => {
  const permissions = compilePermissions(DEFAULT_PERMISSIONS);
  const granted = (role: string) =>
    RESOURCE_KINDS.flatMap((kind) => VERBS.filter((verb) => permissions.allows([role], kind, verb)).map((verb) => `${kind}:${verb}`));

  it("admin: everything", () => {
    expect(granted("admin")).toHaveLength(RESOURCE_KINDS.length * VERBS.length);
  });

  it("pm: promotion flows, stage configuration and approvals; no roleBindings; no project lifecycle", () => {
    expect(granted("pm")).toEqual([
      "project:read",
      "landscapes:read",
      "stages:read",
      "stages:update",
      "vectorTemplates:read",
      "vectorPromotionConfigs:read",
      "vectorPromotionConfigs:create",
      "vectorPromotionConfigs:update",
      "vectorPromotionConfigs:delete",
      "vectorPromotions:read",
      "vectorPromotions:create",
      "vectorPromotions:update",
      "vectorPromotions:delete",
      "promotionApprovals:read",
      "promotionApprovals:create",
      "deployments:read",
      "logs:read",
      "artifacts:read",
    ]);
  });

  it("dev: read-only, and not the roleBindings", () => {
    expect(granted("dev")).toEqual(RESOURCE_KINDS.filter((k) => k !== "roleBindings").map((k) => `${k}:read`));
  });

  it.each([
    { name: "union: dev alone cannot approve", roles: ["dev"], kind: "promotionApprovals" as const, verb: "create" as const, expected: false },
    { name: "union: dev and pm can approve", roles: ["dev", "pm"], kind: "promotionApprovals" as const, verb: "create" as const, expected: true },
    { name: "pm cannot change roleBindings", roles: ["pm"], kind: "roleBindings" as const, verb: "update" as const, expected: false },
    { name: "pm cannot read roleBindings", roles: ["pm"], kind: "roleBindings" as const, verb: "read" as const, expected: false },
    { name: "a role unknown to the matrix grants nothing", roles: ["auditor"], kind: "logs" as const, verb: "read" as const, expected: false },
    { name: "no roles grant nothing", roles: [], kind: "project" as const, verb: "read" as const, expected: false },
  ])("$name", ({ roles, kind, verb, expected }) => {
    expect(permissions.allows(roles, kind, verb)).toBe(expected);
  });
});
