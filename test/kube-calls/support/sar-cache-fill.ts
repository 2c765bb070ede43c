/**
 * Run as a child process (`node --expose-gc sar-cache-fill.ts COUNT NAME_BYTES`) by
 * cache-memory.test.ts: fills the REAL SubjectAccessReview cache with COUNT reviews of distinct
 * names NAME_BYTES long, the API server stubbed to allow, and prints the heap used after a full GC
 * before and after, as one JSON line. A child keeps the measurement free of the test runner's heap.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import { Clusters } from "../../../src/kube-fleet/clusters.ts";
import { SubjectAccessReviews } from "../../../src/kube-calls/user-access-review.ts";

const [count, nameBytes] = process.argv.slice(2).map(Number) as [number, number];
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const clusterId = "0b7e8f2c-3d4a-4b5c-8d6e-7f8091a2b3c4";
const api = { createSubjectAccessReview: async () => ({ status: { allowed: true } }) };
const kubeConfig = { makeApiClient: () => api } as unknown as KubeConfig;
const clusters = new Clusters([{ id: clusterId, envoyCluster: `kube-api-${clusterId}`, kubeConfig, callOptions: () => ({}) }]);
// The shipped default entry bound (kube.sar.cacheMaxEntries).
const reviews = new SubjectAccessReviews(clusters, { timeoutMs: 1_000, allowTtlMs: 600_000, denyTtlMs: 600_000, maxEntries: 50_000 });

const heapUsed = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
const before = heapUsed();
const filler = "n".repeat(nameBytes);
for (let i = 0; i < count; i++) {
  // Distinct and flat, as a name parsed out of a request URL would be.
  const name = `${i.toString(36).padStart(8, "0")}${filler.slice(8)}`;
  const allowed = await reviews.allowed(clusterId, "5f0c2a7e-1b3d-4e5f-9a6b-7c8d9e0f1a2b", {
    kind: "resource",
    verb: "get",
    group: "",
    version: "v1",
    resource: "pods",
    subresource: "",
    namespace: "team-a",
    name,
  });
  if (!allowed) throw new Error("stub answered no");
}
const after = heapUsed();
process.stdout.write(`${JSON.stringify({ count, nameBytes, before, after, growth: after - before })}\n`);
