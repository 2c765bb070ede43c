/**
 * "What can this plugin do for this user?" (issue 17 §3). A PluginToken request reaches the API
 * server only through five gates: the deny-list (revocations.ts, asked of the installation as pinned
 * now), the paths the gateway forwards, OpenFGA's can_view(user, cluster), the gateway's
 * SubjectAccessReview for the user's ServiceAccount, and the API server's own RBAC for the plugin's
 * ServiceAccount, whose token is what Envoy forwards. The two RBAC halves are read from the cluster
 * itself — a SelfSubjectRulesReview made with each ServiceAccount's token from TokenRequest — and
 * intersected (rules-intersection.ts). Served on the admin port beside /explain, under the same gate.
 */
import { intersectRuleSets, type RuleRequest, type RuleSet, rulesAllow } from "../kube-reading/rules-intersection.ts";
import type { RulesReviews } from "../kube-calls/rules-review.ts";
import { FORWARDED_ROOTS } from "../kube-reading/gateway-path.ts";
import { pluginServiceAccount, type ServiceAccountRef, userServiceAccount } from "../kube-reading/service-accounts.ts";
import type { ClusterViewCheck, Installation, KnownClusters, ServiceAccountTokens } from "../ports/policy-ports.ts";
import { pinnedSubject } from "../authz/revocation-gate.ts";
import type { RevocationList, RevocationScope } from "../kube-watch/revocations.ts";

export interface CanIPorts {
  readonly clusters: KnownClusters;
  readonly canView?: ClusterViewCheck;
  readonly serviceAccountTokens: ServiceAccountTokens;
  readonly installations: { byUid(clusterId: string, uid: string): Installation | undefined; byName?(clusterId: string, name: string): Installation | undefined };
  readonly rulesReviews?: RulesReviews;
  /** Absent when `revocations` is not configured: nothing is revoked. */
  readonly revocations?: RevocationList;
}

export interface CanIQuery {
  readonly user: string;
  /** The installation's metadata.uid or metadata.name. */
  readonly installation: string;
  readonly cluster: string;
  /** "" for the cluster-wide rules only (those of ClusterRoleBindings). */
  readonly namespace: string;
}

/** One row of the table: these verbs on this resource (in this group, namespace), on these names (none listed: all). */
export interface RuleRow {
  readonly apiGroup: string;
  readonly resource: string;
  readonly verbs: readonly string[];
  readonly resourceNames: readonly string[];
  readonly namespace: string;
}

export interface UrlRow {
  readonly url: string;
  readonly verbs: readonly string[];
}

export interface Side {
  readonly serviceAccount: string;
  /** False when the ServiceAccount does not exist: it can do nothing. */
  readonly exists: boolean;
  readonly rules: RuleSet;
  readonly evaluationError: string;
}

export interface CanIList {
  readonly cluster: string;
  readonly namespace: string;
  readonly installation: { readonly uid: string; readonly name: string; readonly pluginName: string };
  /** The deny-list entry that stops every PluginToken request of this user through this installation, or null. */
  readonly revoked: { readonly name: string; readonly scope: RevocationScope } | null;
  /** OpenFGA can_view(user, cluster): false means no PluginToken request of this user gets through at all. */
  readonly canView: boolean;
  readonly user: Side;
  readonly plugin: Side;
  /** user ∩ plugin, on the paths the gateway forwards. */
  readonly rows: readonly RuleRow[];
  readonly nonResource: readonly UrlRow[];
  /** Either rules review said it may be missing rules: a request not listed may still be allowed. */
  readonly incomplete: boolean;
}

export type CanIGate = "revocation" | "path" | "can_view" | "user" | "plugin";

export interface CanIAnswer {
  /** "unknown": refused by rules a review marked incomplete, which may not list everything. */
  readonly allowed: boolean | "unknown";
  /** The first gate that refuses, in the order a request meets them; absent when all allow. */
  readonly decidedBy?: CanIGate;
  readonly gates: ReadonlyArray<{ readonly gate: CanIGate; readonly allowed: boolean; readonly incomplete: boolean }>;
}

export class CanIError extends Error {
  readonly status: 400 | 404;

  constructor(status: 400 | 404, message: string) {
    super(message);
    this.status = status;
  }
}

const EMPTY: RuleSet = { resourceRules: [], nonResourceRules: [], incomplete: false };

/** What the gateway forwards at all (gateway-path.ts): every resource, and only these roots' paths. */
export const GATEWAY_RULES: RuleSet = {
  resourceRules: [{ verbs: ["*"], apiGroups: ["*"], resources: ["*"], resourceNames: [] }],
  nonResourceRules: [{ verbs: ["*"], nonResourceURLs: [...FORWARDED_ROOTS].flatMap((root) => [`/${root}`, `/${root}/*`]) }],
  incomplete: false,
};

/** A user id as it names a ServiceAccount: a DNS label's characters. */
const USER_ID = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export interface CanI {
  list(query: CanIQuery): Promise<CanIList>;
  ask(query: CanIQuery, request: RuleRequest): Promise<CanIAnswer & { readonly list: CanIList }>;
}

export function createCanI(ports: CanIPorts): CanI {
  const list = async (query: CanIQuery): Promise<CanIList> => {
    const { rulesReviews, canView } = ports;
    if (rulesReviews === undefined || canView === undefined) throw new CanIError(404, "can-i needs the Fundament policies (an openfga section)");
    if (!USER_ID.test(query.user)) throw new CanIError(400, "--user must be a user id");
    if (!ports.clusters.has(query.cluster)) throw new CanIError(404, `unknown cluster ${query.cluster}`);
    const installation =
      ports.installations.byUid(query.cluster, query.installation) ?? ports.installations.byName?.(query.cluster, query.installation);
    if (installation === undefined) throw new CanIError(404, `no installation ${query.installation} on cluster ${query.cluster}`);
    // Unsynced, the deny-list throws: a 503, as for a request.
    const entry = ports.revocations?.revoked(pinnedSubject(installation, query.user));
    const revoked = entry === undefined ? null : { name: entry.name, scope: entry.target.scope };

    const side = async (sa: ServiceAccountRef, ownerUid?: string): Promise<Side> => {
      const name = `${sa.namespace}/${sa.name}`;
      const token = await ports.serviceAccountTokens.token(query.cluster, sa.namespace, sa.name, ownerUid);
      if (token === undefined) return { serviceAccount: name, exists: false, rules: EMPTY, evaluationError: "" };
      const { evaluationError, ...rules } = await rulesReviews.rules(query.cluster, token.authorization, query.namespace);
      return { serviceAccount: name, exists: true, rules, evaluationError };
    };
    const [viewable, user, plugin] = await Promise.all([
      canView.canView(query.user, query.cluster),
      side(userServiceAccount(query.user)),
      side(pluginServiceAccount(installation.name), installation.uid),
    ]);
    const both = intersectRuleSets(intersectRuleSets(user.rules, plugin.rules), GATEWAY_RULES);
    return {
      cluster: query.cluster,
      namespace: query.namespace,
      installation: { uid: installation.uid, name: installation.name, pluginName: installation.pluginName },
      revoked,
      canView: viewable,
      user,
      plugin,
      rows: viewable && revoked === null ? ruleRows(both, query.namespace) : [],
      nonResource: viewable && revoked === null ? urlRows(both) : [],
      incomplete: both.incomplete,
    };
  };
  return {
    list,
    async ask(query, request) {
      const listed = await list(query);
      return { ...decide(listed, request), list: listed };
    },
  };
}

/** The answer to one request from a listing: the gates in the order a request meets them. Pure. */
export function decide(listed: Pick<CanIList, "revoked" | "canView" | "user" | "plugin">, request: RuleRequest): CanIAnswer {
  const gates = [
    { gate: "revocation" as const, allowed: listed.revoked === null, incomplete: false },
    { gate: "path" as const, allowed: rulesAllow(GATEWAY_RULES, request), incomplete: false },
    { gate: "can_view" as const, allowed: listed.canView, incomplete: false },
    { gate: "user" as const, allowed: rulesAllow(listed.user.rules, request), incomplete: listed.user.rules.incomplete },
    { gate: "plugin" as const, allowed: rulesAllow(listed.plugin.rules, request), incomplete: listed.plugin.rules.incomplete },
  ];
  const refusing = gates.find((g) => !g.allowed);
  if (refusing === undefined) return { allowed: true, gates };
  return { allowed: refusing.incomplete ? "unknown" : false, decidedBy: refusing.gate, gates };
}

/** The table: one row per group and resource of each rule, verbs merged where the rest is equal. Pure. */
export function ruleRows(rules: RuleSet, namespace: string): RuleRow[] {
  const rows = new Map<string, { apiGroup: string; resource: string; resourceNames: string[]; verbs: Set<string> }>();
  for (const rule of rules.resourceRules) {
    for (const apiGroup of rule.apiGroups) {
      for (const resource of rule.resources) {
        const resourceNames = [...rule.resourceNames].sort();
        const key = JSON.stringify([apiGroup, resource, resourceNames]);
        const row = rows.get(key) ?? { apiGroup, resource, resourceNames, verbs: new Set<string>() };
        for (const verb of rule.verbs) row.verbs.add(verb);
        rows.set(key, row);
      }
    }
  }
  return [...rows.values()]
    .map((r) => ({ apiGroup: r.apiGroup, resource: r.resource, verbs: r.verbs.has("*") ? ["*"] : [...r.verbs].sort(), resourceNames: r.resourceNames, namespace }))
    .sort((a, b) => a.apiGroup.localeCompare(b.apiGroup) || a.resource.localeCompare(b.resource) || a.resourceNames.join().localeCompare(b.resourceNames.join()));
}

export function urlRows(rules: RuleSet): UrlRow[] {
  const rows = new Map<string, Set<string>>();
  for (const rule of rules.nonResourceRules) {
    for (const url of rule.nonResourceURLs) {
      const verbs = rows.get(url) ?? new Set<string>();
      for (const verb of rule.verbs) verbs.add(verb);
      rows.set(url, verbs);
    }
  }
  return [...rows].map(([url, verbs]) => ({ url, verbs: verbs.has("*") ? ["*"] : [...verbs].sort() })).sort((a, b) => a.url.localeCompare(b.url));
}
