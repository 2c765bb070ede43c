/**
 * user ∩ plugin as rules (issue 17 §3). Two rule sets, each as a SelfSubjectRulesReview lists them,
 * intersected so that a request matches the result iff it matches a rule of each set — the API
 * server's RBAC matching (k8s.io/kubernetes pkg/apis/rbac/v1/evaluation_helpers.go) on both sides:
 *   - verbs and apiGroups: `*` is every value;
 *   - resources: `*` is every resource and subresource, `*∕sub` that subresource of any resource,
 *     anything else only itself (`pods/*` is not a pattern to RBAC: it matches no request);
 *   - resourceNames: empty is every name (and none); otherwise the request must name one of them;
 *   - nonResourceURLs: `*` is every path, a trailing `*` a prefix, anything else only itself.
 * Every rule is a product of independent matches, so the intersection of two rules is the product of
 * the per-field intersections, and the intersection of two sets is the union over pairs. Pure.
 */

export interface ResourceRule {
  readonly verbs: readonly string[];
  readonly apiGroups: readonly string[];
  readonly resources: readonly string[];
  readonly resourceNames: readonly string[];
}

export interface NonResourceRule {
  readonly verbs: readonly string[];
  readonly nonResourceURLs: readonly string[];
}

export interface RuleSet {
  readonly resourceRules: readonly ResourceRule[];
  readonly nonResourceRules: readonly NonResourceRule[];
  /** The API server said the list may be missing rules (an authorizer that cannot enumerate). */
  readonly incomplete: boolean;
}

const ALL = "*";

/** Values matched by both lists, where `*` is every value. Empty: none. */
function intersectValues(a: readonly string[], b: readonly string[]): string[] {
  if (a.includes(ALL)) return b.includes(ALL) ? [ALL] : unique(b);
  if (b.includes(ALL)) return unique(a);
  return unique(a.filter((v) => b.includes(v)));
}

/** The resource pattern matched by both, or undefined when no request matches both. */
function intersectResource(a: string, b: string): string | undefined {
  if (a === ALL) return b;
  if (b === ALL) return a;
  if (a === b) return a;
  const anyOwner = (p: string) => p.startsWith("*/");
  // `*/sub` ∩ `res/sub` = `res/sub`; a plain `res` has no subresource, so `*/sub` never meets it.
  if (anyOwner(a) && !anyOwner(b) && b.includes("/") && b.slice(b.indexOf("/")) === a.slice(1)) return b;
  if (anyOwner(b) && !anyOwner(a) && a.includes("/") && a.slice(a.indexOf("/")) === b.slice(1)) return a;
  return undefined;
}

function intersectResources(a: readonly string[], b: readonly string[]): string[] {
  return unique(a.flatMap((x) => b.map((y) => intersectResource(x, y)).filter((r) => r !== undefined)));
}

/** Names matched by both; undefined when none is (both lists name, and share no name). */
function intersectNames(a: readonly string[], b: readonly string[]): string[] | undefined {
  if (a.length === 0) return unique(b);
  if (b.length === 0) return unique(a);
  const both = unique(a.filter((n) => b.includes(n)));
  return both.length === 0 ? undefined : both;
}

/** The URL pattern matched by both, or undefined. A trailing `*` is a prefix, as RBAC trims it. */
function intersectUrl(a: string, b: string): string | undefined {
  const prefixOf = (p: string) => (p.endsWith(ALL) ? p.replace(/\*+$/, "") : undefined);
  const pa = prefixOf(a);
  const pb = prefixOf(b);
  if (pa === undefined && pb === undefined) return a === b ? a : undefined;
  if (pa !== undefined && pb === undefined) return b.startsWith(pa) ? b : undefined;
  if (pa === undefined && pb !== undefined) return a.startsWith(pb) ? a : undefined;
  // Two prefixes: the longer one, if it extends the shorter.
  const [short, long] = pa!.length <= pb!.length ? [pa!, b] : [pb!, a];
  return long.startsWith(short) ? long : undefined;
}

function intersectResourceRules(a: ResourceRule, b: ResourceRule): ResourceRule | undefined {
  const verbs = intersectValues(a.verbs, b.verbs);
  const apiGroups = intersectValues(a.apiGroups, b.apiGroups);
  const resources = intersectResources(a.resources, b.resources);
  const resourceNames = intersectNames(a.resourceNames, b.resourceNames);
  if (verbs.length === 0 || apiGroups.length === 0 || resources.length === 0 || resourceNames === undefined) return undefined;
  return { verbs, apiGroups, resources, resourceNames };
}

function intersectNonResourceRules(a: NonResourceRule, b: NonResourceRule): NonResourceRule | undefined {
  const verbs = intersectValues(a.verbs, b.verbs);
  const nonResourceURLs = unique(a.nonResourceURLs.flatMap((x) => b.nonResourceURLs.map((y) => intersectUrl(x, y)).filter((u) => u !== undefined)));
  if (verbs.length === 0 || nonResourceURLs.length === 0) return undefined;
  return { verbs, nonResourceURLs };
}

/** The rules a request must match in both sets to be allowed by both; incomplete if either is. */
export function intersectRuleSets(a: RuleSet, b: RuleSet): RuleSet {
  const resourceRules = a.resourceRules.flatMap((x) => b.resourceRules.map((y) => intersectResourceRules(x, y)).filter((r) => r !== undefined));
  const nonResourceRules = a.nonResourceRules.flatMap((x) => b.nonResourceRules.map((y) => intersectNonResourceRules(x, y)).filter((r) => r !== undefined));
  return { resourceRules: dedupe(resourceRules), nonResourceRules: dedupe(nonResourceRules), incomplete: a.incomplete || b.incomplete };
}

/** One request, as RBAC sees it. */
export type RuleRequest =
  | { readonly kind: "resource"; readonly verb: string; readonly group: string; readonly resource: string; readonly subresource: string; readonly name: string }
  | { readonly kind: "non-resource"; readonly verb: string; readonly path: string };

/** Whether a rule set allows a request (RBAC's RuleAllows over the set). */
export function rulesAllow(rules: RuleSet, request: RuleRequest): boolean {
  const has = (values: readonly string[], v: string) => values.includes(ALL) || values.includes(v);
  if (request.kind === "non-resource") {
    return rules.nonResourceRules.some(
      (r) => has(r.verbs, request.verb) && r.nonResourceURLs.some((u) => u === ALL || u === request.path || (u.endsWith(ALL) && request.path.startsWith(u.replace(/\*+$/, "")))),
    );
  }
  const combined = request.subresource === "" ? request.resource : `${request.resource}/${request.subresource}`;
  return rules.resourceRules.some(
    (r) =>
      has(r.verbs, request.verb) &&
      has(r.apiGroups, request.group) &&
      r.resources.some((p) => p === ALL || p === combined || (request.subresource !== "" && p === `*/${request.subresource}`)) &&
      (r.resourceNames.length === 0 || (request.name !== "" && r.resourceNames.includes(request.name))),
  );
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values)];
}

function dedupe<T>(rules: T[]): T[] {
  const seen = new Set<string>();
  return rules.filter((r) => {
    const key = JSON.stringify(r);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
