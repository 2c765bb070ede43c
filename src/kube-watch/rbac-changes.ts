/**
 * What an RBAC change can affect among a cluster's cached SubjectAccessReview answers (source
 * `kube-rbac`). kube's RBAC authorizer decides a request by visiting every ClusterRoleBinding, and
 * the RoleBindings of the request's namespace only, and only when it has one: cluster-scoped and
 * non-resource requests visit none (DefaultRuleResolver.VisitRulesFor, kubernetes
 * pkg/registry/rbac/validation/rule.go, called by plugin/pkg/auth/authorizer/rbac/rbac.go with
 * requestAttributes.GetNamespace()). A RoleBinding can name a Role of its own namespace only. So:
 *  - a Role or RoleBinding of namespace N changes the answers about namespace N only;
 *  - a ClusterRole (which RoleBindings of any namespace may name) or a ClusterRoleBinding changes
 *    any answer of the cluster;
 *  - a list (the first, or one after the watch's history was lost) may hide any change: all of them.
 * The first list drops the cluster's answers too: an answer asked after the feed started and before
 * the list's snapshot could predate a change the list holds as no event, and the proof that follows
 * the list would vouch for it. At add() a cluster has few if any.
 */
import type { KubernetesObject } from "#kubernetes-client";
import type { FeedHandlers } from "./change-feed-watch.ts";

/** The source's name in metrics, logs and FeedStates. */
export const RBAC_SOURCE = "kube-rbac";

/** Why the answers were dropped: the kind that changed, or a list. */
export type RbacCause = "role" | "rolebinding" | "clusterrole" | "clusterrolebinding" | "list" | "relist";

/** Where RBAC changes drop cached answers (SubjectAccessReviews). */
export interface ReviewInvalidation {
  /** Drops the cluster's answers about namespace `namespace` ("" never: cluster-scoped answers change only with the cluster's). */
  invalidateNamespace(clusterId: string, namespace: string, cause: RbacCause): void;
  invalidateCluster(clusterId: string, cause: RbacCause): void;
}

export interface RbacKind {
  readonly plural: "roles" | "rolebindings" | "clusterroles" | "clusterrolebindings";
  readonly cause: "role" | "rolebinding" | "clusterrole" | "clusterrolebinding";
  readonly namespaced: boolean;
}

export const RBAC_KINDS: readonly RbacKind[] = [
  { plural: "roles", cause: "role", namespaced: true },
  { plural: "rolebindings", cause: "rolebinding", namespaced: true },
  { plural: "clusterroles", cause: "clusterrole", namespaced: false },
  { plural: "clusterrolebindings", cause: "clusterrolebinding", namespaced: false },
];

/** What a feed of one RBAC kind on one cluster drops on each list and change. */
export function rbacHandlers(clusterId: string, kind: RbacKind, reviews: () => ReviewInvalidation): FeedHandlers<KubernetesObject> {
  return {
    listed: (_objects, relist) => reviews().invalidateCluster(clusterId, relist ? "relist" : "list"),
    changed: (_type, object) => {
      const namespace = object.metadata?.namespace;
      // A namespaced object without a namespace is no object the server sends; dropping everything is the safe reading.
      if (kind.namespaced && namespace !== undefined && namespace !== "") reviews().invalidateNamespace(clusterId, namespace, kind.cause);
      else reviews().invalidateCluster(clusterId, kind.cause);
    },
  };
}
