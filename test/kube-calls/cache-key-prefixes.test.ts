/**
 * The SubjectAccessReview and TokenRequest caches key their answers by a tag per cluster
 * registration (issue 47, src/cache/key-tags.ts) in place of the cluster id. Through the real ports,
 * over stubbed API clients that record every question: two users, clusters or namespaces never
 * share an answer; each invalidation (an RBAC change in a namespace or a cluster, a ServiceAccount
 * deleted or re-created) and each forgetCluster (a cluster re-registered or removed) drops exactly
 * its own answers, asked again afterwards, and nothing else; a re-registered cluster's answers
 * come from its new registration.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import type { Dispatcher } from "undici";
import { describe, expect, it } from "vitest";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { type Cluster, Clusters } from "../../src/kube-fleet/clusters.ts";
import { TokenRequests } from "../../src/kube-calls/service-account-tokens.ts";
import { SubjectAccessReviews } from "../../src/kube-calls/user-access-review.ts";

const C1 = "0e0e0e0e-0000-4000-8000-0000000000c1";
const C2 = "0e0e0e0e-0000-4000-8000-0000000000c2";
const USERS = ["9a9a9a9a-0000-4000-8000-000000000001", "9a9a9a9a-0000-4000-8000-000000000002"];
/** "" stands for a cluster-scoped request; "ab" starts with "a", which must not widen "a"'s prefix. */
const NAMESPACES = ["a", "ab", ""];
const noPool = { close: async () => {}, destroy: async () => {} } as unknown as Dispatcher;

/** A cluster whose API client records each question as `registration|namespace|subject`. */
function stubCluster(id: string, registration: string, asked: string[]): Cluster {
  const api = {
    createSubjectAccessReview: async ({ body }: { body: { spec: { user: string; resourceAttributes?: { namespace?: string } } } }) => {
      asked.push(`${registration}|${body.spec.resourceAttributes?.namespace ?? ""}|${body.spec.user}`);
      return { status: { allowed: true } };
    },
    createNamespacedServiceAccountToken: async ({ namespace, name }: { namespace: string; name: string }) => {
      asked.push(`${registration}|${namespace}|${name}`);
      return { status: { token: `token-${asked.length}`, expirationTimestamp: new Date(Date.now() + 3_600_000) } };
    },
  };
  const kubeConfig = { makeApiClient: () => api } as unknown as KubeConfig;
  return { id, envoyCluster: `kube-api-${id}`, kubeConfig, callOptions: () => ({}) };
}

function registry(asked: string[]): Clusters {
  const clusters = new Clusters([]);
  for (const id of [C1, C2]) clusters.put({ cluster: stubCluster(id, id, asked), pool: noPool });
  return clusters;
}

const reviewOf = (namespace: string): AccessAttributes =>
  namespace === ""
    ? { kind: "resource", verb: "list", group: "", version: "v1", resource: "nodes", subresource: "", namespace: "", name: "" }
    : { kind: "resource", verb: "get", group: "", version: "v1", resource: "pods", subresource: "", namespace, name: "" };
const saUser = (userId: string) => `system:serviceaccount:fundament-system:fundament-${userId}`;

describe("SubjectAccessReview cache keys", () => {
  /** Asks every (cluster, namespace, user) review; returns the questions that reached an API server. */
  async function askAll(reviews: SubjectAccessReviews, asked: string[]): Promise<string[]> {
    asked.length = 0;
    for (const cluster of [C1, C2]) for (const ns of NAMESPACES) for (const user of USERS) expect(await reviews.allowed(cluster, user, reviewOf(ns))).toBe(true);
    return [...asked].sort();
  }
  const every = (cluster: string, namespaces = NAMESPACES) => namespaces.flatMap((ns) => USERS.map((u) => `${cluster}|${ns}|${saUser(u)}`)).sort();

  it("no two users, clusters or namespaces share an answer; each invalidation and forgetCluster drops exactly its own", async () => {
    const asked: string[] = [];
    const clusters = registry(asked);
    const reviews = new SubjectAccessReviews(clusters, { timeoutMs: 1_000, allowTtlMs: 600_000, denyTtlMs: 600_000, maxEntries: 100 });
    expect(await askAll(reviews, asked)).toEqual([...every(C1), ...every(C2)].sort());
    expect(await askAll(reviews, asked)).toEqual([]);

    reviews.invalidateNamespace(C1, "a", "rolebinding");
    expect(await askAll(reviews, asked)).toEqual(every(C1, ["a"]));
    reviews.invalidateNamespace(C2, "", "role");
    expect(await askAll(reviews, asked)).toEqual(every(C2, [""]));
    reviews.invalidateCluster(C2, "clusterrole");
    expect(await askAll(reviews, asked)).toEqual(every(C2));
    reviews.forgetCluster(C1);
    expect(await askAll(reviews, asked)).toEqual(every(C1));
  });

  it("a cluster re-registered: its answers come from the new registration, the other cluster's stay", async () => {
    const asked: string[] = [];
    const clusters = registry(asked);
    const reviews = new SubjectAccessReviews(clusters, { timeoutMs: 1_000, allowTtlMs: 600_000, denyTtlMs: 600_000, maxEntries: 100 });
    await askAll(reviews, asked);
    // As cluster-fleet.ts's register() does.
    clusters.put({ cluster: stubCluster(C1, "C1 again", asked), pool: noPool });
    reviews.forgetCluster(C1);
    expect(await askAll(reviews, asked)).toEqual(every("C1 again"));
    expect(await askAll(reviews, asked)).toEqual([]);
  });
});

describe("TokenRequest cache keys", () => {
  const ACCOUNTS = [
    { namespace: "plugin-x", name: "plugin-x" },
    { namespace: "plugin-x", name: "plugin-xy" },
    { namespace: "plugin-xy", name: "plugin-x" },
  ];
  const OWNERS = ["", "uid-1", "uid-2"];
  async function askAll(tokens: TokenRequests, asked: string[]): Promise<string[]> {
    asked.length = 0;
    for (const cluster of [C1, C2]) for (const sa of ACCOUNTS) for (const owner of OWNERS) expect(await tokens.token(cluster, sa.namespace, sa.name, owner)).toBeDefined();
    return [...asked].sort();
  }
  const every = (cluster: string, accounts = ACCOUNTS) => accounts.flatMap((sa) => OWNERS.map(() => `${cluster}|${sa.namespace}|${sa.name}`)).sort();

  it("no two clusters, ServiceAccounts or owners share a token; each invalidation and forgetCluster drops exactly its own", async () => {
    const asked: string[] = [];
    const clusters = registry(asked);
    const tokens = new TokenRequests(clusters, { expirationSeconds: 3600, audiences: [], timeoutMs: 1_000, maxEntries: 100 });
    expect(await askAll(tokens, asked)).toEqual([...every(C1), ...every(C2)].sort());
    expect(await askAll(tokens, asked)).toEqual([]);

    tokens.invalidateServiceAccount(C1, "plugin-x", "plugin-x", "serviceaccount-deleted");
    expect(await askAll(tokens, asked)).toEqual(every(C1, [ACCOUNTS[0]!]));
    tokens.forgetCluster(C2);
    expect(await askAll(tokens, asked)).toEqual(every(C2));
    clusters.put({ cluster: stubCluster(C1, "C1 again", asked), pool: noPool });
    tokens.forgetCluster(C1);
    expect(await askAll(tokens, asked)).toEqual(every("C1 again"));
  });
});
