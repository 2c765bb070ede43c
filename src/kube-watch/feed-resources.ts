/**
 * The resources the change feeds follow (cluster-change-feeds.ts), each with its list, watch path and
 * quorum read: one list, so that the grants they need (feed-grants.ts) are read off it rather than
 * written out again.
 */
import { CoreV1Api, CustomObjectsApi, type KubernetesObject } from "#kubernetes-client";
import { type FeedResource, quorumReadSelector } from "./change-feed-watch.ts";
import { RBAC_KINDS, type RbacKind } from "./rbac-changes.ts";

export function rbacResource(kind: RbacKind): FeedResource<KubernetesObject> {
  const group = "rbac.authorization.k8s.io";
  const version = "v1";
  return {
    plural: kind.plural,
    path: `/apis/${group}/${version}/${kind.plural}`,
    lister: (cluster) => {
      // The generic client lists any group's resource across namespaces, as JSON.
      const api = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
      return (page, signal) => api.listClusterCustomObject({ group, version, plural: kind.plural, ...page }, cluster.callOptions(signal));
    },
    quorumRead: (cluster) => {
      const api = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
      const fieldSelector = quorumReadSelector(kind.namespaced);
      return async (signal) => ((await api.listClusterCustomObject({ group, version, plural: kind.plural, fieldSelector }, cluster.callOptions(signal))) as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
    },
  };
}

export const SERVICE_ACCOUNTS: FeedResource<KubernetesObject> = {
  plural: "serviceaccounts",
  path: "/api/v1/serviceaccounts",
  lister: (cluster) => {
    const api = cluster.kubeConfig.makeApiClient(CoreV1Api);
    return (page, signal) => api.listServiceAccountForAllNamespaces(page, cluster.callOptions(signal));
  },
  quorumRead: (cluster) => {
    const api = cluster.kubeConfig.makeApiClient(CoreV1Api);
    const fieldSelector = quorumReadSelector(true);
    return async (signal) => (await api.listServiceAccountForAllNamespaces({ fieldSelector }, cluster.callOptions(signal))).metadata?.resourceVersion;
  },
};

/** Every resource a cluster's feeds follow: the four RBAC kinds, then ServiceAccounts. */
export const FEED_RESOURCES: ReadonlyArray<FeedResource<KubernetesObject>> = [...RBAC_KINDS.map(rbacResource), SERVICE_ACCOUNTS];
