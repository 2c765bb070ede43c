import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { SelfSubjectRulesReviews } from "../../src/kube-calls/rules-review.ts";

/** A cluster reached as `user`; no call may leave the process (the server is a closed port). */
function clustersAs(user: { name: string; certData?: string; keyData?: string; token?: string }): Clusters {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: "c", server: "https://127.0.0.1:1", skipTLSVerify: true }],
    users: [user],
    contexts: [{ name: "c", cluster: "c", user: user.name }],
    currentContext: "c",
  });
  return new Clusters([{ id: "c1", envoyCluster: "kube-api-c1", kubeConfig, callOptions: () => ({}) }]);
}

describe("SelfSubjectRulesReviews", () => {
  it("refuses a cluster reached with a client certificate: the API server would review portcullis, not the token", async () => {
    const reviews = new SelfSubjectRulesReviews(clustersAs({ name: "u", certData: "Y2VydA==", keyData: "a2V5" }), { timeoutMs: 500 });
    await expect(reviews.rules("c1", "Bearer sa-token", "team-a")).rejects.toThrow(/client certificate/);
    await expect(reviews.rules("c1", "Bearer sa-token", "team-a")).rejects.toBeInstanceOf(DependencyUnavailable);
  });

  it("an unknown cluster, and an unreachable API server, are DependencyUnavailable", async () => {
    const reviews = new SelfSubjectRulesReviews(clustersAs({ name: "u", token: "admin" }), { timeoutMs: 500 });
    await expect(reviews.rules("nope", "Bearer sa-token", "")).rejects.toBeInstanceOf(DependencyUnavailable);
    await expect(reviews.rules("c1", "Bearer sa-token", "")).rejects.toBeInstanceOf(DependencyUnavailable);
  });
});
