/**
 * Subjects and roleBindings (ADR-0028): validation as the CRD validates, matching rules (memberOf
 * OR, claims AND, audience required), provider trust, and the union of matched roles.
 */
import { describe, expect, it } from "vitest";
import { type Caller, compileRoleBindings, rolesOf } from "../../src/konfidence-model/role-bindings.ts";
import { compileSubject, jwksMatches, type JwksSubject, type ProviderTrust, sessionMatches, type SessionSubject } from "../../src/konfidence-model/subjects.ts";

const GITHUB = "https://token.actions.githubusercontent.com/.well-known/openid-configuration";
const GITLAB = "https://gitlab.example.com/.well-known/openid-configuration";
const AUD = "https://konfidence.example/api";
const trustAll: ProviderTrust = () => true;
const jwks = (overrides: Record<string, unknown> = {}) => ({ jwks: { endpoint: GITHUB, audience: AUD, claims: { sub: "repo:acme/app:*" }, ...overrides } });

describe("compileSubject: validation", () => {
  const rows: Array<{ name: string; input: unknown; trusts?: ProviderTrust; expected: string }> = [
    { name: "session with groups", input: { session: { memberOf: ["devs"] } }, expected: "session" },
    { name: "jwks with endpoint, audience and a claim", input: jwks(), expected: "jwks" },
    { name: "jwks endpoint with a path prefix", input: jwks({ endpoint: "https://idp.example/realms/ci/.well-known/openid-configuration" }), expected: "jwks" },

    { name: "neither kind", input: {}, expected: "not-exactly-one-kind" },
    { name: "both kinds", input: { session: { memberOf: ["a"] }, ...jwks() }, expected: "not-exactly-one-kind" },
    { name: "not an object", input: "session", expected: "not-exactly-one-kind" },
    { name: "a list", input: [{ session: { memberOf: ["a"] } }], expected: "not-exactly-one-kind" },
    { name: "a kind this version does not know", input: { spiffe: { id: "spiffe://x" } }, expected: "unknown-kind" },
    { name: "null kinds are not set", input: { session: { memberOf: ["a"] }, jwks: null }, expected: "session" },

    { name: "session without memberOf", input: { session: {} }, expected: "session-invalid" },
    { name: "session with empty memberOf", input: { session: { memberOf: [] } }, expected: "session-invalid" },
    { name: "session with a non-string group", input: { session: { memberOf: ["a", 7] } }, expected: "session-invalid" },
    { name: "session with an empty group name", input: { session: { memberOf: [""] } }, expected: "session-invalid" },
    { name: "session not an object", input: { session: ["a"] }, expected: "session-invalid" },

    { name: "jwks over http", input: jwks({ endpoint: "http://token.actions.githubusercontent.com/.well-known/openid-configuration" }), expected: "jwks-endpoint-invalid" },
    { name: "jwks endpoint not a discovery URL", input: jwks({ endpoint: "https://token.actions.githubusercontent.com/.well-known/jwks" }), expected: "jwks-endpoint-invalid" },
    { name: "jwks endpoint with a query", input: jwks({ endpoint: `${GITHUB}?x=1` }), expected: "jwks-endpoint-invalid" },
    { name: "jwks endpoint with credentials", input: jwks({ endpoint: "https://u:p@idp.example/.well-known/openid-configuration" }), expected: "jwks-endpoint-invalid" },
    { name: "jwks endpoint not a URL", input: jwks({ endpoint: "token.actions" }), expected: "jwks-endpoint-invalid" },
    { name: "jwks without endpoint", input: jwks({ endpoint: undefined }), expected: "jwks-endpoint-invalid" },
    { name: "jwks without audience", input: jwks({ audience: undefined }), expected: "jwks-audience-missing" },
    { name: "jwks with empty audience", input: jwks({ audience: "" }), expected: "jwks-audience-missing" },
    { name: "jwks without claims", input: jwks({ claims: undefined }), expected: "jwks-claims-missing" },
    { name: "jwks with no claims", input: jwks({ claims: {} }), expected: "jwks-claims-missing" },
    { name: "jwks whose only claim is *", input: jwks({ claims: { sub: "*" } }), expected: "jwks-claims-unconstrained" },
    { name: "jwks whose claims are all stars", input: jwks({ claims: { sub: "**", repository: "*" } }), expected: "jwks-claims-unconstrained" },
    // Every verified token carries its provider's iss, and any of the provider's callers may ask for the audience.
    { name: "jwks that pins only iss", input: jwks({ claims: { iss: "https://token.actions.githubusercontent.com" } }), expected: "jwks-claims-unconstrained" },
    { name: "jwks that pins only aud", input: jwks({ claims: { aud: AUD } }), expected: "jwks-claims-unconstrained" },
    { name: "jwks that pins iss and aud", input: jwks({ claims: { iss: "https://token.actions.githubusercontent.com", aud: AUD } }), expected: "jwks-claims-unconstrained" },
    { name: "jwks that pins iss beside a star", input: jwks({ claims: { iss: "https://token.actions.githubusercontent.com", sub: "*" } }), expected: "jwks-claims-unconstrained" },
    { name: "jwks that pins iss beside a real constraint", input: jwks({ claims: { iss: "https://token.actions.githubusercontent.com", sub: "repo:acme/app:*" } }), expected: "jwks" },
    { name: "jwks with a non-string pattern", input: jwks({ claims: { sub: "x", run_number: 7 } }), expected: "jwks-claim-invalid" },
    { name: "jwks with an empty claim name", input: jwks({ claims: { "": "x" } }), expected: "jwks-claim-invalid" },

    { name: "untrusted provider", input: jwks(), trusts: (e) => e === GITLAB, expected: "untrusted-provider" },
    { name: "malformation reported before trust", input: jwks({ audience: "" }), trusts: () => false, expected: "jwks-audience-missing" },
  ];
  it.each(rows)("$name → $expected", ({ input, trusts, expected }) => {
    const compiled = compileSubject(input, trusts ?? trustAll);
    expect(compiled.ok ? compiled.subject.kind : compiled.problem).toBe(expected);
  });

  it("normalizes the endpoint so it compares with the one derived from a token's iss", () => {
    const compiled = compileSubject(jwks({ endpoint: "https://Token.Actions.GithubUserContent.com:443/x/../.well-known/openid-configuration" }), trustAll);
    expect(compiled).toMatchObject({ ok: true, subject: { endpoint: GITHUB } });
  });
});

describe("matching", () => {
  const session = (memberOf: string[]) => compiledAs<SessionSubject>({ session: { memberOf } });
  const subject = compiledAs<JwksSubject>(jwks({ claims: { sub: "repo:acme/app:*", environment: "prod", ref: "refs/heads/*" } }));
  const claims = { sub: "repo:acme/app:environment:prod", environment: "prod", ref: "refs/heads/main", run: 12 };

  it.each([
    { name: "one group overlaps", memberOf: ["devs", "ops"], groups: ["ops"], expected: true },
    { name: "no overlap", memberOf: ["devs"], groups: ["ops", "admins"], expected: false },
    { name: "group names are exact", memberOf: ["devs"], groups: ["devs-eu"], expected: false },
    { name: "group names are case-sensitive", memberOf: ["Devs"], groups: ["devs"], expected: false },
    { name: "no groups", memberOf: ["devs"], groups: [], expected: false },
  ])("session: $name → $expected", ({ memberOf, groups, expected }) => {
    expect(sessionMatches(session(memberOf), new Set(groups))).toBe(expected);
  });

  it.each([
    { name: "audience and every claim match", audiences: [AUD], claims, expected: true },
    { name: "audience among several", audiences: ["other", AUD], claims, expected: true },
    { name: "wrong audience", audiences: ["https://other.example"], claims, expected: false },
    { name: "no audience", audiences: [], claims, expected: false },
    { name: "one claim differs (AND)", audiences: [AUD], claims: { ...claims, environment: "staging" }, expected: false },
    { name: "one claim missing", audiences: [AUD], claims: { sub: claims.sub, environment: "prod" }, expected: false },
    { name: "a claim that is not a string never matches", audiences: [AUD], claims: { ...claims, environment: ["prod"] }, expected: false },
    { name: "a number never matches its digits", audiences: [AUD], claims: { ...claims, environment: 7 }, expected: false },
    { name: "an inherited property is not a claim", audiences: [AUD], claims: Object.create({ sub: claims.sub, environment: "prod", ref: "refs/heads/x" }) as Record<string, unknown>, expected: false },
  ])("jwks: $name → $expected", ({ audiences, claims: c, expected }) => {
    expect(jwksMatches(subject, audiences, c)).toBe(expected);
  });
});

describe("compileRoleBindings and rolesOf: the union of matched roles", () => {
  const raw = {
    admin: [{ session: { memberOf: ["platform-admins"] } }, jwks({ claims: { sub: "repo:acme/infra:*" } })],
    pm: [{ session: { memberOf: ["project-pms"] } }],
    dev: [{ session: { memberOf: ["project-devs", "project-pms"] } }, jwks(), jwks({ endpoint: GITLAB, claims: { project_path: "acme/*" } })],
    broken: [{ session: { memberOf: [] } }, jwks({ claims: {} })],
    "Bad Role": [{ session: { memberOf: ["project-devs"] } }],
    notalist: { session: { memberOf: ["x"] } },
  };
  const { bindings, problems } = compileRoleBindings(raw, (e) => e === GITHUB);

  it("reports every entry that never matches, and keeps the rest", () => {
    expect(problems).toEqual([
      { role: "dev", index: 2, problem: "untrusted-provider" },
      { role: "broken", index: 0, problem: "session-invalid" },
      { role: "broken", index: 1, problem: "jwks-claims-missing" },
      { role: "Bad Role", problem: "role-invalid" },
      { role: "notalist", problem: "subjects-not-a-list" },
    ]);
    expect([...bindings.jwks.keys()]).toEqual([GITHUB]);
  });

  const callers: Array<{ name: string; caller: Caller; expected: string[] }> = [
    { name: "session in one group", caller: { kind: "session", groups: new Set(["project-devs"]) }, expected: ["dev"] },
    { name: "session whose groups grant two roles", caller: { kind: "session", groups: new Set(["project-pms"]) }, expected: ["dev", "pm"] },
    { name: "session in every group", caller: { kind: "session", groups: new Set(["platform-admins", "project-pms"]) }, expected: ["admin", "dev", "pm"] },
    { name: "session in no listed group", caller: { kind: "session", groups: new Set(["others"]) }, expected: [] },
    { name: "workload of the app repo", caller: workload({ sub: "repo:acme/app:ref:refs/heads/main" }), expected: ["dev"] },
    { name: "workload of the infra repo", caller: workload({ sub: "repo:acme/infra:ref:refs/heads/main" }), expected: ["admin"] },
    { name: "workload with the wrong audience", caller: workload({ sub: "repo:acme/app:x" }, ["https://elsewhere"]), expected: [] },
    { name: "workload of another provider", caller: workload({ sub: "repo:acme/app:x" }, [AUD], GITLAB), expected: [] },
    { name: "a workload never matches session subjects", caller: workload({ groups: ["platform-admins"], sub: "nobody" }), expected: [] },
  ];
  it.each(callers)("$name → $expected", ({ caller, expected }) => {
    expect([...rolesOf(bindings, caller)].sort()).toEqual(expected);
  });

  it("tolerates roleBindings that are absent or not a map", () => {
    for (const rawBindings of [undefined, null, [], "admin"]) {
      const compiled = compileRoleBindings(rawBindings, trustAll);
      expect(compiled.problems).toEqual([]);
      expect(rolesOf(compiled.bindings, { kind: "session", groups: new Set(["x"]) }).size).toBe(0);
    }
  });
});

function workload(claims: Record<string, unknown>, audiences: string[] = [AUD], endpoint = GITHUB): Caller {
  return { kind: "workload", endpoint, audiences, claims };
}

function compiledAs<T>(raw: unknown): T {
  const compiled = compileSubject(raw, trustAll);
  if (!compiled.ok) throw new Error(`fixture does not compile: ${compiled.problem}`);
  return compiled.subject as T;
}
