/**
 * What registering, changing and removing a cluster does to the ports (wiring for
 * kube-watch/cluster-registry.ts). Each step touches that one cluster only: its pool, its
 * PluginInstallation watch, its RBAC and ServiceAccount change feeds, its cached reviews, tokens and readiness answers, its Envoy
 * upstream (served by CDS, deploy/cluster-discovery.ts), and, for Konfidence's cluster, its Project watch.
 */
import { type Clusters, connectCluster, type ClusterCredentials } from "../kube-fleet/clusters.ts";
import type { ClusterFleet } from "../kube-watch/cluster-registry.ts";
import type { ClusterChangeFeeds } from "../kube-watch/cluster-change-feeds.ts";
import type { InstallationIndex } from "../kube-watch/installation-index.ts";
import type { RegisteredProjects } from "../konfidence/registered-projects.ts";

export interface FleetPorts {
  readonly clusters: Clusters;
  /** Undefined where PluginInstallations are not watched (a Konfidence-only deployment). */
  readonly installations: InstallationIndex | undefined;
  /** Where the clusters' RBAC and ServiceAccount events are followed (absent with the PluginInstallations). */
  readonly changeFeeds?: ClusterChangeFeeds | undefined;
  /** Caches holding answers per cluster. */
  readonly caches: ReadonlyArray<{ forgetCluster(clusterId: string): void }>;
  /** Envoy's upstreams of the registered clusters (CDS). */
  readonly upstreams: { put(cluster: ClusterCredentials): void; remove(clusterId: string): void };
  /** Konfidence's Project index where its cluster is one the registry registers. */
  readonly projects?: RegisteredProjects | undefined;
}

export function clusterFleet(ports: FleetPorts): ClusterFleet {
  const { clusters, installations, changeFeeds, caches, upstreams, projects } = ports;
  const isKonfidence = (clusterId: string): boolean => projects?.clusterId === clusterId;
  return {
    isStatic: (clusterId) => clusters.sourceOf(clusterId) === "static",
    register(credentials: ClusterCredentials, initial: boolean) {
      // Built before anything is swapped: a credential client-node refuses leaves the old cluster as it was.
      const pooled = connectCluster(credentials);
      // The old watch stops before the pool it runs on is retired.
      installations?.remove(credentials.id);
      if (isKonfidence(credentials.id)) projects?.detach();
      clusters.put(pooled);
      // From here on every call goes to the new pool: what the old credential or server answered is dropped.
      for (const cache of caches) cache.forgetCluster(credentials.id);
      installations?.add(pooled.cluster, { gatesReadiness: initial });
      // Followed on the new pool: until its feeds list, the cluster's answers are on the short TTLs.
      changeFeeds?.add(pooled.cluster);
      // Listed again from the new server: a re-pointed cluster never serves the old one's Projects.
      if (isKonfidence(credentials.id)) projects?.attach(pooled.cluster, { gatesReadiness: initial });
      upstreams.put(credentials);
    },
    unregister(clusterId: string) {
      installations?.remove(clusterId);
      changeFeeds?.remove(clusterId);
      if (isKonfidence(clusterId)) projects?.detach();
      clusters.remove(clusterId);
      for (const cache of caches) cache.forgetCluster(clusterId);
      upstreams.remove(clusterId);
    },
  };
}
