/**
 * The Project index's store: Projects by metadata.name, compiled when they arrive; the count of
 * Projects naming each provider (the only providers a workload token may be sent to); problems
 * reported per arrival (a log line and a metric), the rest of the Project still working.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ProjectStore, reportProblems } from "../../src/konfidence/project-index.ts";
import { createMetrics } from "../../src/server/prometheus.ts";
import type { BindingProblem } from "../../src/konfidence-model/role-bindings.ts";
import { AUD, GITHUB, project } from "./fakes.ts";

const GITLAB = "https://gitlab.example.com/.well-known/openid-configuration";
const jwks = (endpoint: string) => ({ jwks: { endpoint, audience: AUD, claims: { sub: "repo:acme/*" } } });

function store() {
  const reports: Array<{ project: string; problems: readonly BindingProblem[] }> = [];
  const s = new ProjectStore((e) => e !== "https://untrusted.example/.well-known/openid-configuration", (p, problems) => reports.push({ project: p, problems }));
  return { s, reports };
}

describe("ProjectStore", () => {
  it("indexes by metadata.name and replaces a Project on update", () => {
    const { s } = store();
    s.put(project("alpha", { dev: [{ session: { memberOf: ["a"] } }] }));
    s.put(project("alpha", { dev: [{ session: { memberOf: ["b"] } }], pm: [{ session: { memberOf: ["c"] } }] }));
    expect(s.size).toBe(1);
    expect(s.byName("alpha")?.bindings.session.map((b) => `${b.role}:${b.subject.memberOf.join("|")}`)).toEqual(["dev:b", "pm:c"]);
    expect(s.byName("Alpha")).toBeUndefined();
  });

  it("ignores objects without a name", () => {
    const { s } = store();
    s.put({ apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: {}, spec: {} });
    expect(s.size).toBe(0);
  });

  it("counts the Projects naming each provider through updates, deletes and a fresh list", () => {
    const { s } = store();
    s.put(project("alpha", { dev: [jwks(GITHUB), jwks(GITHUB)] }));
    s.put(project("beta", { dev: [jwks(GITHUB), jwks(GITLAB)] }));
    expect([s.namesProvider(GITHUB), s.namesProvider(GITLAB)]).toEqual([true, true]);

    s.put(project("beta", { dev: [jwks(GITHUB)] }));
    expect([s.namesProvider(GITHUB), s.namesProvider(GITLAB)]).toEqual([true, false]);

    s.remove(project("alpha", {}));
    expect(s.namesProvider(GITHUB)).toBe(true);
    s.remove(project("beta", {}));
    expect(s.namesProvider(GITHUB)).toBe(false);

    s.put(project("gamma", { dev: [jwks(GITLAB)] }));
    s.clear();
    expect([s.size, s.namesProvider(GITLAB)]).toEqual([0, false]);
  });

  it("counts the audiences jwks subjects name per provider, through updates and deletes", () => {
    const { s } = store();
    const subject = (endpoint: string, audience: string) => ({ jwks: { endpoint, audience, claims: { sub: "repo:acme/*" } } });
    s.put(project("alpha", { dev: [subject(GITHUB, AUD), subject(GITHUB, "https://a.example")], pm: [subject(GITHUB, AUD)] }));
    s.put(project("beta", { dev: [subject(GITLAB, "https://b.example")] }));
    const named = () =>
      [
        [GITHUB, [AUD]],
        [GITHUB, ["https://a.example"]],
        [GITHUB, ["https://b.example"]],
        [GITLAB, ["https://b.example"]],
        [GITLAB, [AUD]],
        [GITHUB, ["https://evil.example", AUD]],
        [GITHUB, []],
      ].map(([e, a]) => s.namesAudience(e as string, a as string[]));
    expect(named()).toEqual([true, true, false, true, false, true, false]);

    // Two subjects of alpha name (GitHub, AUD): dropping one keeps it named.
    s.put(project("alpha", { dev: [subject(GITHUB, AUD)] }));
    expect(named()).toEqual([true, false, false, true, false, true, false]);
    s.remove(project("alpha", {}));
    expect(named()).toEqual([false, false, false, true, false, false, false]);
    expect(s.namesProvider(GITHUB)).toBe(false);
    s.clear();
    expect(named().some(Boolean)).toBe(false);
  });

  it("never counts a provider that only invalid or untrusted subjects name", () => {
    const { s } = store();
    s.put(project("alpha", { dev: [jwks("https://untrusted.example/.well-known/openid-configuration"), { jwks: { endpoint: GITLAB, audience: AUD, claims: {} } }] }));
    expect(s.namesProvider("https://untrusted.example/.well-known/openid-configuration")).toBe(false);
    expect(s.namesProvider(GITLAB)).toBe(false);
    expect(s.namesAudience("https://untrusted.example/.well-known/openid-configuration", [AUD])).toBe(false);
  });

  it("reports entries that never match each time their Project arrives; the valid ones still work", () => {
    const { s, reports } = store();
    const broken = project("alpha", {
      admin: [{ session: { memberOf: ["admins"] } }, { session: { memberOf: ["x"] }, ...jwks(GITHUB) }],
      dev: [jwks("https://untrusted.example/.well-known/openid-configuration")],
    });
    s.put(broken);
    s.put(project("beta", { dev: [{ session: { memberOf: ["d"] } }] }));
    s.put(broken);
    const expected = {
      project: "alpha",
      problems: [
        { role: "admin", index: 1, problem: "not-exactly-one-kind" },
        { role: "dev", index: 0, problem: "untrusted-provider" },
      ],
    };
    expect(reports).toEqual([expected, expected]);
    expect(s.byName("alpha")?.bindings.session.map((b) => b.role)).toEqual(["admin"]);
  });
});

describe("reportProblems", () => {
  it("writes one warning per entry and counts it by problem in the Prometheus registry", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const registry = createMetrics({ indexSizes: () => [] });
    reportProblems(logger, "alpha", [
      { role: "dev", index: 0, problem: "untrusted-provider" },
      { role: "Bad Role", problem: "role-invalid" },
    ]);
    expect(lines.map(({ project, role, subject_index, problem, level, msg }) => ({ project, role, subject_index, problem, level, msg }))).toEqual([
      { project: "alpha", role: "dev", subject_index: 0, problem: "untrusted-provider", level: 40, msg: "konfidence roleBindings entry never matches" },
      { project: "alpha", role: "Bad Role", subject_index: undefined, problem: "role-invalid", level: 40, msg: "konfidence roleBindings entry never matches" },
    ]);
    const metrics = await registry.metrics();
    expect(metrics).toContain('portcullis_konfidence_invalid_subjects_total{problem="untrusted-provider"} 1');
    expect(metrics).toContain('portcullis_konfidence_invalid_subjects_total{problem="role-invalid"} 1');
  });
});
