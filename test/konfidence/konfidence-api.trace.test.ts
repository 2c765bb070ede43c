/**
 * konfidence-api records its gates for `check --explain` (POST /explain) as the Fundament policies
 * do: the endpoint, the caller's identity, the Project, the role, the permission — each in order,
 * up to the gate that denied. In process, over the scenario's Projects and a session provider fake.
 */
import { describe, expect, it } from "vitest";
import { emptyAuditTrail } from "../../src/authz/audit-trail.ts";
import { konfidenceApi } from "../../src/authz/policies/konfidence-api.ts";
import { traced } from "../../src/authz/trace.ts";
import type { HttpRequest } from "../../src/envoy/check-request.ts";
import { compilePermissions, compileRoutes, DEFAULT_PERMISSIONS, DEFAULT_ROUTES } from "../../src/konfidence-model/permissions.ts";
import { ProjectStore } from "../../src/konfidence/project-index.ts";
import { mintToken } from "./fakes.ts";
import { konfidenceScenario, type ScenarioRequest } from "./scenario.ts";

const PROJECT = 2;
const scenario = konfidenceScenario({ projects: 5 });
const store = new ProjectStore(() => true);
for (const p of scenario.projects) store.put(p);

const policy = konfidenceApi({
  routes: compileRoutes(DEFAULT_ROUTES),
  permissions: compilePermissions(DEFAULT_PERMISSIONS),
  projects: store,
  workloadTokens: { verify: async () => ({ ok: false, detail: "not used here" }) },
  session: {
    credential: { cookie: "kden-session", cookieOrigins: new Set() },
    tokens: {
      verify: async (token) => {
        const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { sub: string; groups: string[] };
        return { ok: true, issuer: "https://login.platform.example", sub: claims.sub, groups: new Set(claims.groups) };
      },
    },
  },
});

async function session(groups: readonly string[]): Promise<Record<string, string>> {
  return { cookie: `kden-session=${await mintToken({ sub: "ada", groups })}`, "sec-fetch-site": "same-origin" };
}

async function explain(asked: ScenarioRequest, headers: Record<string, string>) {
  const request: HttpRequest = { ...asked, query: new URLSearchParams(), rawQuery: "", headers, authority: "", requestId: "r", contextExtensions: {} };
  const { result, trace } = await traced(() => policy.decide(request, emptyAuditTrail()));
  return { outcome: result.kind === "allow" ? "allow" : result.reason, trace };
}

/** The gates in order, each as [gate, outcome]. */
const gates = (...steps: Array<[string, string]>) => steps.map(([gate, outcome]) => ({ gate, outcome }));
const DEVELOPER = () => session(scenario.developerGroups(PROJECT));
const NOBODY = async () => ({});

describe("konfidence-api's trace", () => {
  const cases: Array<{ name: string; request: () => ScenarioRequest; headers: () => Promise<Record<string, string>>; outcome: string; trace: unknown }> = [
    { name: "an unknown endpoint stops at the endpoint", request: () => ({ method: "GET", path: "/api/v1/nothing-here" }), headers: NOBODY, outcome: "not-found", trace: gates(["endpoint", "not-found"]) },
    { name: "no credential stops at the identity", request: () => scenario.readStages(PROJECT), headers: NOBODY, outcome: "missing-token", trace: gates(["endpoint", "project"], ["identity", "missing-token"]) },
    {
      name: "a session in none of the project's groups stops at the role",
      request: () => scenario.readStages(PROJECT),
      headers: () => session(["someone-else"]),
      outcome: "no-role",
      trace: gates(["endpoint", "project"], ["identity", "session caller"], ["project", "pass"], ["role", "fail"]),
    },
    {
      name: "a developer approving stops at the permission",
      request: () => scenario.approvePromotion(PROJECT),
      headers: DEVELOPER,
      outcome: "role-denied",
      trace: gates(["endpoint", "project"], ["identity", "session caller"], ["project", "pass"], ["role", "pass"], ["permission", "fail"]),
    },
    {
      name: "a developer reading passes every gate",
      request: () => scenario.readStages(PROJECT),
      headers: DEVELOPER,
      outcome: "allow",
      trace: gates(["endpoint", "project"], ["identity", "session caller"], ["project", "pass"], ["role", "pass"], ["permission", "pass"]),
    },
  ];

  it.each(cases)("$name", async ({ request, headers, outcome, trace }) => {
    expect(await explain(request(), await headers())).toEqual({ outcome, trace });
  });

  it("a project that does not exist stops at the project", async () => {
    const { method, path } = scenario.readStages(PROJECT);
    const missing = { method, path: path.replace(scenario.projectName(PROJECT), "no-such-project") };
    expect(await explain(missing, await DEVELOPER())).toEqual({
      outcome: "project-not-found",
      trace: gates(["endpoint", "project"], ["identity", "session caller"], ["project", "fail"]),
    });
  });
});
