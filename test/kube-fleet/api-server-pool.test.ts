/**
 * Every call portcullis makes to an API server — reviews, token requests, lists and watches — goes
 * through the cluster's one bounded pool and speaks HTTP/1.1, against a TLS server that offers
 * HTTP/2 first (as kube-apiserver does). HTTP/2 on a shared session is what froze portcullis in
 * issue 12 (test/kube-fleet/h2-abort-freeze.test.ts).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { AuthorizationV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, Watch } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { API_SERVER_POOL, Clusters } from "../../src/kube-fleet/clusters.ts";
import { StartingApiServer } from "./support/starting-api-server.ts";

let fake: StartingApiServer | undefined;
let clusters: Clusters | undefined;
afterEach(async () => {
  await clusters?.close();
  await fake?.close();
  clusters = undefined;
  fake = undefined;
});

const review = (n: number) => ({
  apiVersion: "authorization.k8s.io/v1",
  kind: "SubjectAccessReview",
  spec: { user: `system:serviceaccount:users:u-${n}`, resourceAttributes: { verb: "get", resource: "pods" } },
});

/** Opens a watch with client-node's Watch, as the indexes do, and waits for its first event. */
async function firstWatchEvent(kubeConfig: KubeConfig): Promise<{ type: string; watch: AbortController }> {
  let onEvent: (type: string) => void = () => {};
  let onFailure: (err: unknown) => void = () => {};
  const first = new Promise<string>((resolve, reject) => {
    onEvent = resolve;
    onFailure = reject;
  });
  const watch = await new Watch(kubeConfig).watch("/apis/x/v1/things", {}, (type) => onEvent(type), (err: unknown) => err && onFailure(err));
  return { type: await first, watch };
}

describe("API server connections", () => {
  it("a review, a token request, a list and a watch all negotiate HTTP/1.1; no HTTP/2 session is opened", async () => {
    fake = await StartingApiServer.start();
    clusters = await Clusters.load([{ id: "a", kubeconfig: fake.kubeconfigPath }]);
    const cluster = clusters.get("a");
    if (cluster === undefined) throw new Error("cluster a not loaded");
    const signal = () => AbortSignal.timeout(5_000);

    const sar = await cluster.kubeConfig.makeApiClient(AuthorizationV1Api).createSubjectAccessReview({ body: review(1) }, cluster.callOptions(signal()));
    const token = await cluster.kubeConfig
      .makeApiClient(CoreV1Api)
      .createNamespacedServiceAccountToken({ name: "sa", namespace: "ns", body: { spec: { audiences: ["x"] } } }, cluster.callOptions(signal()));
    const list = await cluster.kubeConfig
      .makeApiClient(CustomObjectsApi)
      .listClusterCustomObject({ group: "x", version: "v1", plural: "things" }, cluster.callOptions(signal()));
    const watch = await firstWatchEvent(cluster.kubeConfig);
    watch.watch.abort();

    expect(sar.status?.allowed).toBe(true);
    expect(token.status?.token).toBe("fake-token");
    expect((list as { kind: string }).kind).toBe("ThingList");
    expect(watch.type).toBe("ADDED");
    expect(fake.requests).toEqual([
      "POST /apis/authorization.k8s.io/v1/subjectaccessreviews",
      "POST /api/v1/namespaces/ns/serviceaccounts/sa/token",
      "GET /apis/x/v1/things",
      "GET /apis/x/v1/things",
    ]);
    expect(fake.alpn.length).toBeGreaterThan(0);
    expect(new Set(fake.alpn)).toEqual(new Set(["http/1.1"]));
    expect(fake.h2Sessions).toBe(0);
  });

  it("control: the same fake negotiates HTTP/2 with client-node's own watch dispatcher", async () => {
    fake = await StartingApiServer.start();
    const plain = new KubeConfig();
    plain.loadFromFile(fake.kubeconfigPath);

    const watch = await firstWatchEvent(plain);
    watch.watch.abort();

    expect(watch.type).toBe("ADDED");
    expect(fake.alpn).toEqual(["h2"]);
    expect(fake.h2Sessions).toBe(1);
  });

  it("bounds connections per API server while a watch holds one: 200 concurrent slow reviews all answered", async () => {
    fake = await StartingApiServer.start({ answerDelayMs: 100 });
    clusters = await Clusters.load([{ id: "a", kubeconfig: fake.kubeconfigPath }]);
    const cluster = clusters.get("a");
    if (cluster === undefined) throw new Error("cluster a not loaded");
    await firstWatchEvent(cluster.kubeConfig);
    const api = cluster.kubeConfig.makeApiClient(AuthorizationV1Api);

    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, n) => api.createSubjectAccessReview({ body: review(n) }, cluster.callOptions(AbortSignal.timeout(20_000)))),
    );

    expect(answers.every((a) => a.status?.allowed === true)).toBe(true);
    // The watch's connection counts against the same bound: it is in the same pool.
    expect(fake.maxOpenConnections).toBe(API_SERVER_POOL.connections);
    expect(fake.h2Sessions).toBe(0);
  });

  it("refuses a kubeconfig with a proxy-url rather than bypassing the proxy", async () => {
    fake = await StartingApiServer.start();
    const config = JSON.parse(readFileSync(fake.kubeconfigPath, "utf8")) as { clusters: { cluster: Record<string, string> }[] };
    const first = config.clusters[0];
    if (first === undefined) throw new Error("fake kubeconfig has no cluster");
    first.cluster["proxy-url"] = "http://127.0.0.1:3128";
    writeFileSync(fake.kubeconfigPath, JSON.stringify(config));

    await expect(Clusters.load([{ id: "a", kubeconfig: fake.kubeconfigPath }])).rejects.toThrow("cluster a: kubeconfig proxy-url is not supported");
  });
});
