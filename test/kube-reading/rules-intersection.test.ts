import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { intersectRuleSets, type NonResourceRule, type ResourceRule, type RuleRequest, type RuleSet, rulesAllow } from "../../src/kube-reading/rules-intersection.ts";

const rule = (verbs: string[], apiGroups: string[], resources: string[], resourceNames: string[] = []): ResourceRule => ({ verbs, apiGroups, resources, resourceNames });
const url = (verbs: string[], nonResourceURLs: string[]): NonResourceRule => ({ verbs, nonResourceURLs });
const set = (resourceRules: ResourceRule[], nonResourceRules: NonResourceRule[] = [], incomplete = false): RuleSet => ({ resourceRules, nonResourceRules, incomplete });
const req = (verb: string, group: string, resource: string, subresource = "", name = ""): RuleRequest => ({ kind: "resource", verb, group, resource, subresource, name });
const path = (verb: string, p: string): RuleRequest => ({ kind: "non-resource", verb, path: p });

describe("rulesAllow: RBAC's matching", () => {
  // prettier-ignore
  const cases: Array<[string, RuleSet, RuleRequest, boolean]> = [
    ["exact", set([rule(["get"], [""], ["secrets"])]), req("get", "", "secrets"), true],
    ["other verb", set([rule(["get"], [""], ["secrets"])]), req("list", "", "secrets"), false],
    ["other group", set([rule(["get"], [""], ["secrets"])]), req("get", "apps", "secrets"), false],
    ["* verb", set([rule(["*"], [""], ["secrets"])]), req("delete", "", "secrets"), true],
    ["* group", set([rule(["get"], ["*"], ["secrets"])]), req("get", "x.io", "secrets"), true],
    ["* resource covers subresources", set([rule(["get"], [""], ["*"])]), req("get", "", "pods", "log"), true],
    ["resource does not cover its subresource", set([rule(["get"], [""], ["pods"])]), req("get", "", "pods", "log"), false],
    ["res/sub exact", set([rule(["get"], [""], ["pods/log"])]), req("get", "", "pods", "log"), true],
    ["res/sub is not the resource", set([rule(["get"], [""], ["pods/log"])]), req("get", "", "pods"), false],
    ["*/sub any owner", set([rule(["get"], [""], ["*/status"])]), req("get", "", "deployments", "status"), true],
    ["*/sub not the resource", set([rule(["get"], [""], ["*/status"])]), req("get", "", "deployments"), false],
    ["res/* is no pattern to RBAC", set([rule(["get"], [""], ["pods/*"])]), req("get", "", "pods", "log"), false],
    ["names: listed", set([rule(["get"], [""], ["secrets"], ["a"])]), req("get", "", "secrets", "", "a"), true],
    ["names: not listed", set([rule(["get"], [""], ["secrets"], ["a"])]), req("get", "", "secrets", "", "b"), false],
    ["names: a list (no name) is not a listed name", set([rule(["list"], [""], ["secrets"], ["a"])]), req("list", "", "secrets"), false],
    ["names empty: every name", set([rule(["get"], [""], ["secrets"])]), req("get", "", "secrets", "", "zz"), true],
    ["url exact", set([], [url(["get"], ["/version"])]), path("get", "/version"), true],
    ["url exact is not a prefix", set([], [url(["get"], ["/version"])]), path("get", "/version/x"), false],
    ["url prefix", set([], [url(["get"], ["/apis/*"])]), path("get", "/apis/x.io/v1"), true],
    ["url prefix misses", set([], [url(["get"], ["/apis/*"])]), path("get", "/api"), false],
    ["url *", set([], [url(["*"], ["*"])]), path("post", "/anything"), true],
    ["url verb", set([], [url(["get"], ["*"])]), path("post", "/x"), false],
    ["resource rules do not allow paths", set([rule(["*"], ["*"], ["*"])]), path("get", "/version"), false],
  ];
  it.each(cases)("%s", (_name, rules, request, allowed) => expect(rulesAllow(rules, request)).toBe(allowed));
});

describe("intersectRuleSets", () => {
  // prettier-ignore
  const cases: Array<[string, ResourceRule, ResourceRule, ResourceRule[]]> = [
    ["verbs", rule(["get", "list", "delete"], [""], ["secrets"]), rule(["get", "watch"], [""], ["secrets"]), [rule(["get"], [""], ["secrets"])]],
    ["* verbs take the other side", rule(["*"], [""], ["secrets"]), rule(["get", "list"], [""], ["secrets"]), [rule(["get", "list"], [""], ["secrets"])]],
    ["* and * stay *", rule(["*"], ["*"], ["*"]), rule(["*"], ["*"], ["*"]), [rule(["*"], ["*"], ["*"])]],
    ["no common verb", rule(["get"], [""], ["secrets"]), rule(["list"], [""], ["secrets"]), []],
    ["* groups", rule(["get"], ["*"], ["certificates"]), rule(["get"], ["cert-manager.io"], ["certificates"]), [rule(["get"], ["cert-manager.io"], ["certificates"])]],
    ["no common group", rule(["get"], ["a.io"], ["x"]), rule(["get"], ["b.io"], ["x"]), []],
    ["* resources keep subresources", rule(["get"], [""], ["*"]), rule(["get"], [""], ["pods", "pods/log"]), [rule(["get"], [""], ["pods", "pods/log"])]],
    ["*/sub meets res/sub", rule(["get"], [""], ["*/log"]), rule(["get"], [""], ["pods/log", "pods"]), [rule(["get"], [""], ["pods/log"])]],
    ["*/sub meets *", rule(["get"], [""], ["*/status"]), rule(["get"], [""], ["*"]), [rule(["get"], [""], ["*/status"])]],
    ["*/sub misses another sub", rule(["get"], [""], ["*/status"]), rule(["get"], [""], ["*/log", "pods/exec"]), []],
    ["res/* meets only itself", rule(["get"], [""], ["pods/*"]), rule(["get"], [""], ["pods/log", "*/log"]), []],
    ["resource is not its subresource", rule(["get"], [""], ["pods"]), rule(["get"], [""], ["pods/log"]), []],
    ["names: empty takes the other side", rule(["get"], [""], ["secrets"]), rule(["get"], [""], ["secrets"], ["a"]), [rule(["get"], [""], ["secrets"], ["a"])]],
    ["names: common", rule(["get"], [""], ["secrets"], ["a", "b"]), rule(["get"], [""], ["secrets"], ["b", "c"]), [rule(["get"], [""], ["secrets"], ["b"])]],
    ["names: none in common is nothing, not everything", rule(["get"], [""], ["secrets"], ["a"]), rule(["get"], [""], ["secrets"], ["b"]), []],
  ];
  it.each(cases)("%s", (_name, a, b, expected) => {
    expect(intersectRuleSets(set([a]), set([b])).resourceRules).toEqual(expected);
    expect(intersectRuleSets(set([b]), set([a])).resourceRules.length).toBe(expected.length);
  });

  // prettier-ignore
  const urls: Array<[string, string[], string[], string[]]> = [
    ["* takes the other side", ["*"], ["/version", "/apis/*"], ["/version", "/apis/*"]],
    ["prefix ∩ exact under it", ["/apis/*"], ["/apis/x.io"], ["/apis/x.io"]],
    ["prefix ∩ exact outside", ["/apis/*"], ["/api"], []],
    ["prefix ∩ longer prefix", ["/api*"], ["/apis/*"], ["/apis/*"]],
    ["disjoint prefixes", ["/api/*"], ["/apis/*"], []],
    ["exact ∩ exact", ["/version"], ["/version", "/healthz"], ["/version"]],
  ];
  it.each(urls)("non-resource URLs: %s", (_name, a, b, expected) => {
    expect(intersectRuleSets(set([], [url(["get"], a)]), set([], [url(["get"], b)])).nonResourceRules.flatMap((r) => r.nonResourceURLs).sort()).toEqual([...expected].sort());
    expect(intersectRuleSets(set([], [url(["get"], b)]), set([], [url(["get"], a)])).nonResourceRules.flatMap((r) => r.nonResourceURLs).sort()).toEqual([...expected].sort());
  });

  it("is incomplete when either side is", () => {
    expect(intersectRuleSets(set([], [], true), set([])).incomplete).toBe(true);
    expect(intersectRuleSets(set([]), set([], [], true)).incomplete).toBe(true);
    expect(intersectRuleSets(set([]), set([])).incomplete).toBe(false);
  });

  it("allows a request iff both sets do (random rule sets and requests)", () => {
    const verb = fc.constantFrom("get", "list", "delete", "*");
    const group = fc.constantFrom("", "apps", "*");
    const resource = fc.constantFrom("pods", "secrets", "pods/log", "secrets/status", "*/log", "*/status", "pods/*", "*");
    const name = fc.constantFrom("a", "b");
    const resourceRule = fc.record({
      verbs: fc.uniqueArray(verb, { minLength: 1, maxLength: 2 }),
      apiGroups: fc.uniqueArray(group, { minLength: 1, maxLength: 2 }),
      resources: fc.uniqueArray(resource, { minLength: 1, maxLength: 3 }),
      resourceNames: fc.uniqueArray(name, { maxLength: 2 }),
    });
    const urlRule = fc.record({
      verbs: fc.uniqueArray(verb, { minLength: 1, maxLength: 2 }),
      nonResourceURLs: fc.uniqueArray(fc.constantFrom("*", "/api", "/api*", "/apis/*", "/apis/x", "/version"), { minLength: 1, maxLength: 3 }),
    });
    const ruleSet = fc.record({ resourceRules: fc.array(resourceRule, { maxLength: 3 }), nonResourceRules: fc.array(urlRule, { maxLength: 2 }), incomplete: fc.constant(false) });
    const concrete = fc.constantFrom("get", "list", "delete");
    const request: fc.Arbitrary<RuleRequest> = fc.oneof(
      fc.record({
        kind: fc.constant("resource" as const),
        verb: concrete,
        group: fc.constantFrom("", "apps"),
        resource: fc.constantFrom("pods", "secrets"),
        subresource: fc.constantFrom("", "log", "status", "*"),
        name: fc.constantFrom("", "a", "b", "c"),
      }),
      fc.record({ kind: fc.constant("non-resource" as const), verb: concrete, path: fc.constantFrom("/api", "/apis", "/apis/x", "/apis/y", "/version", "/healthz") }),
    );
    fc.assert(
      fc.property(ruleSet, ruleSet, request, (a, b, r) => {
        expect(rulesAllow(intersectRuleSets(a, b), r)).toBe(rulesAllow(a, r) && rulesAllow(b, r));
      }),
      { numRuns: 3000 },
    );
  });
});
