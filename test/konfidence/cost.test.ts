/**
 * The cost of a check does not grow with the number of Projects the caller does not belong to:
 * for a request on /api/v1/projects/{id}/… only that Project's subjects are evaluated, and the
 * token is verified once, by its own provider. Counted with fakes: token verifications, claim reads
 * by the glob matchers, group lookups by the session matchers, and Project lookups, for the same
 * request with 10 and with 1,000 Projects loaded.
 */
import { describe, expect, it } from "vitest";
import type { Decision } from "../../src/authz/decision.ts";
import { emptyAuditTrail } from "../../src/authz/audit-trail.ts";
import { konfidenceApi } from "../../src/authz/policies/konfidence-api.ts";
import type { HttpRequest } from "../../src/envoy/check-request.ts";
import { compilePermissions, compileRoutes, DEFAULT_PERMISSIONS, DEFAULT_ROUTES } from "../../src/konfidence-model/permissions.ts";
import { ProjectStore } from "../../src/konfidence/project-index.ts";
import { mintToken } from "./fakes.ts";
import { konfidenceScenario, type ScenarioRequest } from "./scenario.ts";

interface Counts {
  verifications: number;
  sessionVerifications: number;
  claimReads: number;
  groupLookups: number;
  projectLookups: number;
}

class CountingSet extends Set<string> {
  readonly #counts: Counts;
  constructor(values: Iterable<string>, counts: Counts) {
    super(values);
    this.#counts = counts;
  }
  override has(value: string): boolean {
    this.#counts.groupLookups++;
    return super.has(value);
  }
}

/** The konfidence-api policy over `projects` Projects of the scenario, with counting fakes. */
function world(projects: number) {
  const scenario = konfidenceScenario({ projects });
  const store = new ProjectStore(() => true);
  for (const p of scenario.projects) store.put(p);
  const counts: Counts = { verifications: 0, sessionVerifications: 0, claimReads: 0, groupLookups: 0, projectLookups: 0 };
  const policy = konfidenceApi({
    routes: compileRoutes(DEFAULT_ROUTES),
    permissions: compilePermissions(DEFAULT_PERMISSIONS),
    projects: {
      byName: (name) => (counts.projectLookups++, store.byName(name)),
      namesProvider: (endpoint) => store.namesProvider(endpoint),
      namesAudience: (endpoint, audiences) => store.namesAudience(endpoint, audiences),
    },
    workloadTokens: {
      verify: async (_endpoint, token) => {
        counts.verifications++;
        const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
        const counted = new Proxy(claims, {
          get(target, key, receiver) {
            if (typeof key === "string") counts.claimReads++;
            return Reflect.get(target, key, receiver);
          },
        });
        return { ok: true, token: { issuer: String(claims["iss"]), sub: String(claims["sub"]), audiences: [String(claims["aud"])], claims: counted } };
      },
    },
    session: {
      credential: { cookie: "kden-session", cookieOrigins: new Set() },
      tokens: {
        verify: async (token) => {
          counts.sessionVerifications++;
          const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { sub: string; groups: string[] };
          return { ok: true, issuer: "https://login.platform.example", sub: claims.sub, groups: new CountingSet(claims.groups, counts) };
        },
      },
    },
  });
  const decide = (request: ScenarioRequest, headers: Record<string, string>): Promise<Decision> =>
    policy.decide({ ...request, query: new URLSearchParams(), rawQuery: "", headers, authority: "", requestId: "r", contextExtensions: {} } satisfies HttpRequest, emptyAuditTrail());
  return { scenario, counts, decide };
}

async function measure(projects: number, run: (w: ReturnType<typeof world>) => Promise<Decision>) {
  const w = world(projects);
  const decision = await run(w);
  return { decision: decision.kind === "allow" ? decision.mutations.set : decision.reason, counts: { ...w.counts } };
}

describe("a check's cost does not depend on the number of other Projects", () => {
  const PROJECT = 7;
  const scenarios: Array<{ name: string; run: (w: ReturnType<typeof world>) => Promise<Decision> }> = [
    {
      name: "a CI workload reading its own project",
      run: async (w) => {
        const id = w.scenario.appWorkload(PROJECT);
        return w.decide(w.scenario.readStages(PROJECT), { authorization: `Bearer ${await mintToken({ ...id.claims })}` });
      },
    },
    {
      name: "a CI workload of another project (no role)",
      run: async (w) => {
        const id = w.scenario.appWorkload(PROJECT + 3);
        return w.decide(w.scenario.readStages(PROJECT), { authorization: `Bearer ${await mintToken({ ...id.claims })}` });
      },
    },
    {
      name: "a developer's session approving (role lacks the permission)",
      run: async (w) =>
        w.decide(w.scenario.approvePromotion(PROJECT), {
          cookie: `kden-session=${await mintToken({ sub: "ada", groups: w.scenario.developerGroups(PROJECT) })}`,
          "sec-fetch-site": "same-origin",
        }),
    },
    {
      name: "a session in no group of the project",
      run: async (w) => w.decide(w.scenario.readStages(PROJECT), { cookie: `kden-session=${await mintToken({ sub: "eve", groups: ["x", "y", "z"] })}`, "sec-fetch-site": "same-origin" }),
    },
  ];

  it.each(scenarios)("$name: 10 vs 1,000 Projects", async ({ run }) => {
    const small = await measure(10, run);
    const large = await measure(1_000, run);
    expect(large).toEqual(small);
    expect(small.counts.verifications + small.counts.sessionVerifications).toBe(1);
    expect(small.counts.projectLookups).toBe(1);
    // The matchers did run: the counts above measure work, not its absence.
    expect(small.counts.claimReads + small.counts.groupLookups).toBeGreaterThan(0);
  });

  it("decides as the roleBindings say, in both sizes", async () => {
    const results = await Promise.all(scenarios.map(async (s) => (await measure(1_000, s.run)).decision));
    expect(results).toEqual([
      {
        "x-konfidence-issuer": "https://gitlab.example.com",
        "x-konfidence-subject": "repo:acme/project-0007-app:ref:refs/heads/main",
        "x-konfidence-roles": "dev",
      },
      "no-role",
      "role-denied",
      "no-role",
    ]);
  });

  it("the scenario compiles cleanly: 1,000 Projects, every subject valid, every provider named", () => {
    const scenario = konfidenceScenario();
    const problems: unknown[] = [];
    const store = new ProjectStore(() => true, (_p, found) => problems.push(...found));
    for (const p of scenario.projects) store.put(p);
    expect(store.size).toBe(1_000);
    expect(problems).toEqual([]);
    expect(scenario.providers.every((e) => store.namesProvider(e))).toBe(true);
  });
});
