/**
 * How kube-api-proxy names the upstream of a cluster to Envoy. Static `envoy.clusters` have a route
 * of their own; a registered cluster (kube-watch/cluster-registry.ts) has only an Envoy cluster, served
 * by CDS (deploy/cluster-discovery.ts), and one shared route that sends the request to the Envoy
 * cluster this header names. portcullis sets it on every kube-api-proxy allow, overwriting what the
 * client sent (an `x-fundament-` header: hygiene removes a client's copy on every allow), so the
 * client can never choose the upstream; a denial routes nothing.
 */
import { createHash } from "node:crypto";

export const KUBE_API_CLUSTER_HEADER = "x-fundament-kube-api-cluster";

/** The Envoy cluster of a static cluster's API server: fixed for the process's life, as is its route. */
export function kubeApiEnvoyCluster(clusterId: string): string {
  return `kube-api-${clusterId}`;
}

/** What Envoy connects to for a registered cluster: the server, the CA it trusts there, the name it checks. */
export interface RegisteredEndpoint {
  readonly id: string;
  readonly server: string;
  readonly caPem?: string | undefined;
  readonly tlsServerName?: string | undefined;
}

/**
 * The Envoy cluster of a registered cluster: its id and a digest of what it connects to. A
 * re-pointed cluster (another server, CA or server name) is another Envoy cluster, so an allow
 * naming the cluster its token was minted from can only be routed where that token is valid —
 * while Envoy has not yet applied the new CDS version, the old name still goes to the old server,
 * and the new name goes nowhere (503) until it has. 128 bits: no two endpoints share a name.
 */
export function registeredEnvoyCluster(endpoint: RegisteredEndpoint): string {
  const digest = createHash("sha256")
    .update(JSON.stringify([endpoint.server, endpoint.caPem ?? null, endpoint.tlsServerName ?? null]))
    .digest("hex")
    .slice(0, 32);
  return `kube-api-${endpoint.id}-${digest}`;
}
