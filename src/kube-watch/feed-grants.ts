/**
 * Whether a cluster's credential may do what its change feeds do (cluster-change-feeds.ts): list and
 * watch Roles, RoleBindings, ClusterRoles, ClusterRoleBindings and ServiceAccounts in every
 * namespace. A credential granted before the feeds existed lacks them (deploy/k8s/rbac.yaml gained
 * them with issue 45): the feeds then never sync, and that cluster's answers stay on the short TTLs
 * — safe, only slower to see a change and heavier on the API server — with nothing but the feeds'
 * own errors to show for it. This names what is missing, asked of the API server itself with one
 * SelfSubjectAccessReview per verb and resource (every authorizer of its chain answers, as for the
 * watch itself), so that the start and `validate-config` can say it.
 */
import { AuthorizationV1Api } from "#kubernetes-client";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import { FEED_RESOURCES } from "./feed-resources.ts";

const FEED_GRANTS_DEPENDENCY = "kube-selfsubjectaccessreview";

export interface FeedGrant {
  readonly group: string;
  readonly resource: string;
  readonly verb: "list" | "watch";
}

/**
 * The API group and resource a watch path names (`/api/v1/serviceaccounts`,
 * `/apis/rbac.authorization.k8s.io/v1/roles`); throws on any other shape, so that a feed added on a
 * path this cannot read fails its test rather than go unchecked.
 */
export function groupResourceOf(path: string): { readonly group: string; readonly resource: string } {
  const match = /^\/(?:api\/v1|apis\/([a-z0-9.-]+)\/v[a-z0-9]+)\/([a-z0-9]+)$/.exec(path);
  if (match === null) throw new Error(`not a cluster-wide resource path: ${path}`);
  return { group: match[1] ?? "", resource: match[2]! };
}

/**
 * What the feeds ask, cluster-wide: list (the first list, and each quorum read, a list of one named
 * object) and watch, of every resource they follow.
 */
export const FEED_GRANTS: readonly FeedGrant[] = FEED_RESOURCES.flatMap((r) => (["list", "watch"] as const).map((verb) => ({ ...groupResourceOf(r.path), verb })));

/** `verb resource.group` (`list roles.rbac.authorization.k8s.io`, `watch serviceaccounts`), as kubectl auth can-i reads it. */
export function grantName(grant: FeedGrant): string {
  return `${grant.verb} ${grant.resource}${grant.group === "" ? "" : `.${grant.group}`}`;
}

/** The feeds' grants the cluster's credential lacks (empty: none); throws when the API server cannot say. */
export async function missingFeedGrants(cluster: Cluster, timeoutMs: number): Promise<string[]> {
  const api = cluster.kubeConfig.makeApiClient(AuthorizationV1Api);
  const answers = await Promise.all(
    FEED_GRANTS.map(async (grant) => {
      const review = await withDeadline(FEED_GRANTS_DEPENDENCY, timeoutMs, (signal) =>
        api.createSelfSubjectAccessReview(
          { body: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectAccessReview", spec: { resourceAttributes: { group: grant.group, resource: grant.resource, verb: grant.verb } } } },
          cluster.callOptions(signal),
        ),
      );
      return { grant, allowed: review.status?.allowed === true };
    }),
  );
  return answers.filter((a) => !a.allowed).map((a) => grantName(a.grant));
}

/** The one sentence a log line, readiness and validate-config say of missing grants. */
export function missingGrantsMessage(missing: readonly string[]): string {
  return `the credential lacks ${missing.join(", ")} (all namespaces): the change feeds cannot follow this cluster and its answers stay on the short TTLs; grant them (docs/deployment.md, upgrade notes)`;
}
