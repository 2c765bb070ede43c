/**
 * How kube-api-proxy names the upstream of a cluster to Envoy. Static `envoy.clusters` have a route
 * of their own; a registered cluster (kube/cluster-registry.ts) has only an Envoy cluster, served
 * by CDS (envoy/cluster-discovery.ts), and one shared route that sends the request to the Envoy
 * cluster this header names. portcullis sets it on every kube-api-proxy allow from the URL's cluster
 * id, overwriting what the client sent (an `x-fundament-` header: hygiene removes a client's copy
 * on every allow), so the client can never choose the upstream; a denial routes nothing.
 */
export const KUBE_API_CLUSTER_HEADER = "x-fundament-kube-api-cluster";

/** The Envoy cluster of one Kubernetes cluster's API server, static or served by CDS. */
export function kubeApiEnvoyCluster(clusterId: string): string {
  return `kube-api-${clusterId}`;
}
