/**
 * A credential with the grants portcullis's ClusterRole had before the change feeds (issue 45:
 * deploy/k8s/rbac.yaml before commit 500e6b5, as an upgraded deployment still has them) on a real
 * kube-apiserver: missingFeedGrants names exactly the ten list/watch grants the feeds need; the
 * feeds say it once, loudly, and readiness's detail names them; `validate-config` warns of them and
 * still exits 0. The ClusterRole shipped today lacks none.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { ClusterChangeFeeds } from "../../src/kube-watch/cluster-change-feeds.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { missingFeedGrants } from "../../src/kube-watch/feed-grants.ts";
import { type KubeApiserver, rawRequest, startKubeApiserver } from "../harness/index.ts";
import { cli } from "../cli/run.ts";
import { until } from "../support/wire-fakes/wired.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const RBAC = "/apis/rbac.authorization.k8s.io/v1";
const CLUSTER_ID = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";

/** The ClusterRole's rules before the change feeds (git show 500e6b5^:deploy/k8s/rbac.yaml). */
const OLD_RULES = [
  { apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
  { apiGroups: [""], resources: ["serviceaccounts/token"], verbs: ["create"] },
  { apiGroups: ["plugins.fundament.io"], resources: ["plugininstallations"], verbs: ["get", "list", "watch"] },
  { apiGroups: ["portcullis.fundament.io"], resources: ["revocations"], verbs: ["get", "list", "watch"] },
  { apiGroups: ["konfidence.cloud"], resources: ["projects"], verbs: ["get", "list", "watch"] },
];
/** The ClusterRole shipped today. */
const SHIPPED_RULES = parseAllDocuments(readFileSync(join(ROOT, "deploy/k8s/rbac.yaml"), "utf8"))
  .map((d) => d.toJS() as { kind: string; metadata: { name: string }; rules: unknown[] })
  .find((d) => d.kind === "ClusterRole" && d.metadata.name === "portcullis")!.rules;

const MISSING = [
  "list roles.rbac.authorization.k8s.io",
  "watch roles.rbac.authorization.k8s.io",
  "list rolebindings.rbac.authorization.k8s.io",
  "watch rolebindings.rbac.authorization.k8s.io",
  "list clusterroles.rbac.authorization.k8s.io",
  "watch clusterroles.rbac.authorization.k8s.io",
  "list clusterrolebindings.rbac.authorization.k8s.io",
  "watch clusterrolebindings.rbac.authorization.k8s.io",
  "list serviceaccounts",
  "watch serviceaccounts",
];

let api: KubeApiserver;
let dir: string;
const kubeconfigs: Record<"old" | "shipped", string> = { old: "", shipped: "" };

async function apply(method: string, path: string, body?: unknown): Promise<unknown> {
  const { status, json } = await rawRequest(api, method, path, body);
  if (status >= 300) throw new Error(`${method} ${path}: ${status} ${JSON.stringify(json)}`);
  return json;
}

/** A ServiceAccount bound to a ClusterRole of `rules`, and a kubeconfig with its token. */
async function credential(name: string, rules: unknown[]): Promise<string> {
  await apply("POST", "/api/v1/namespaces/fundament-system/serviceaccounts", { metadata: { name } });
  await apply("POST", `${RBAC}/clusterroles`, { metadata: { name }, rules });
  await apply("POST", `${RBAC}/clusterrolebindings`, {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
    subjects: [{ kind: "ServiceAccount", name, namespace: "fundament-system" }],
  });
  const issued = (await apply("POST", `/api/v1/namespaces/fundament-system/serviceaccounts/${name}/token`, { spec: { expirationSeconds: 3600 } })) as { status: { token: string } };
  const path = join(dir, `${name}.kubeconfig`);
  writeFileSync(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster: { server: api.url, "certificate-authority-data": Buffer.from(api.caPem).toString("base64") } }],
      users: [{ name: "u", user: { token: issued.status.token } }],
      contexts: [{ name: "c", context: { cluster: "c", user: "u" } }],
      "current-context": "c",
    }),
    { mode: 0o600 },
  );
  return path;
}

beforeAll(async () => {
  api = await startKubeApiserver();
  dir = mkdtempSync(join(tmpdir(), "feed-grants-"));
  await apply("POST", "/api/v1/namespaces", { metadata: { name: "fundament-system" } });
  kubeconfigs.old = await credential("portcullis-before-feeds", OLD_RULES);
  kubeconfigs.shipped = await credential("portcullis-shipped", SHIPPED_RULES);
}, 120_000);

afterAll(async () => {
  await api?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("missingFeedGrants", () => {
  it.each([
    { name: "the ClusterRole from before the feeds lacks all ten", credential: "old" as const, missing: MISSING },
    { name: "the shipped ClusterRole lacks none", credential: "shipped" as const, missing: [] },
  ])("$name", async ({ credential, missing }) => {
    const clusters = await Clusters.load([{ id: CLUSTER_ID, kubeconfig: kubeconfigs[credential] }]);
    try {
      expect(await missingFeedGrants(clusters.get(CLUSTER_ID)!, 5_000)).toEqual(missing);
    } finally {
      await clusters.close();
    }
  });
});

describe("the feeds of a cluster whose credential predates them", () => {
  it("warn once, naming every missing grant, and readiness's detail names them", { timeout: 30_000 }, async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const clusters = await Clusters.load([{ id: CLUSTER_ID, kubeconfig: kubeconfigs.old }]);
    const feeds = new ClusterChangeFeeds({ logger, targets: () => ({ reviews: { invalidateNamespace() {}, invalidateCluster() {} }, tokens: { invalidateServiceAccount() {} } }) });
    try {
      feeds.add(clusters.get(CLUSTER_ID)!);
      const warned = () => lines.filter((l) => l["msg"] === "the cluster's credential lacks the change feeds' grants: its answers stay on the short TTLs");
      await until(() => warned().length > 0, 10_000, "the warning");
      expect(warned()).toEqual([expect.objectContaining({ level: 40, cluster_id: CLUSTER_ID, missing: MISSING })]);
      const states = feeds.describe();
      expect(states.map((s) => [s.source, s.synced])).toEqual([["kube-rbac", false], ["kube-serviceaccounts", false]]);
      expect(states[0]!.detail).toMatch(/^the credential lacks list roles\.rbac\.authorization\.k8s\.io, .*watch clusterrolebindings\.rbac\.authorization\.k8s\.io \(all namespaces\)/);
      expect(states[1]!.detail).toMatch(/^the credential lacks list serviceaccounts, watch serviceaccounts \(all namespaces\)/);
    } finally {
      await feeds.stop();
      await clusters.close();
    }
  });
});

describe("portcullis validate-config (without --file-only)", () => {
  const config = (kubeconfig: string) => {
    const path = join(dir, `config-${kubeconfig.split("/").pop()}.yaml`);
    writeFileSync(
      path,
      stringify({
        tokens: { secrets: [{ env: "PORTCULLIS_JWT_SECRET" }] },
        openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
        clusters: [{ id: CLUSTER_ID, kubeconfig }],
      }),
    );
    return path;
  };
  const env = { PORTCULLIS_JWT_SECRET: "s".repeat(32), KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" };

  it("warns of every missing grant, and exits 0: the server starts without them", { timeout: 30_000 }, async () => {
    const path = config(kubeconfigs.old);
    const res = await cli(["validate-config", path], env);
    expect(res).toMatchObject({ code: 0, stdout: `${path}: ok\n` });
    expect(res.stderr).toBe(`${path}: warning: cluster ${CLUSTER_ID}: the credential lacks ${MISSING.join(", ")} (all namespaces): the change feeds cannot follow this cluster and its answers stay on the short TTLs; grant them (docs/deployment.md, upgrade notes)\n`);
  });

  it("says nothing more with the shipped ClusterRole", { timeout: 30_000 }, async () => {
    const path = config(kubeconfigs.shipped);
    expect(await cli(["validate-config", path], env)).toEqual({ code: 0, stdout: `${path}: ok\n`, stderr: "" });
  });
});

describe("the grants named, as they change", () => {
  const NO_TARGETS = () => ({ reviews: { invalidateNamespace() {}, invalidateCluster() {} }, tokens: { invalidateServiceAccount() {} } });
  const WARNING = "the cluster's credential lacks the change feeds' grants: its answers stay on the short TTLs";

  it("asks again at the first 403 when the API server did not answer the check at add()", { timeout: 30_000 }, async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const clusters = await Clusters.load([{ id: CLUSTER_ID, kubeconfig: kubeconfigs.old }]);
    let asked = 0;
    const missingGrants = async (cluster: Parameters<typeof missingFeedGrants>[0]) => {
      asked += 1;
      if (asked === 1) throw new Error("the API server did not answer");
      return missingFeedGrants(cluster, 5_000);
    };
    const feeds = new ClusterChangeFeeds({ logger, targets: NO_TARGETS, missingGrants, initialBackoffMs: 50, maxBackoffMs: 200 });
    try {
      feeds.add(clusters.get(CLUSTER_ID)!);
      // describe() is what readiness and the metrics read: it sees the feeds' 403s.
      await until(() => (feeds.describe(), lines.some((l) => l["msg"] === WARNING)), 10_000, "the warning after a 403");
      expect(asked).toBe(2);
      expect(lines.filter((l) => l["msg"] === WARNING)).toEqual([expect.objectContaining({ cluster_id: CLUSTER_ID, missing: MISSING })]);
      expect(feeds.describe()[0]!.detail).toMatch(/^the credential lacks list roles/);
    } finally {
      await feeds.stop();
      await clusters.close();
    }
  });

  // Last in the file: it stops the API server for a while.
  it("no longer names grants given since, once the feeds synced", { timeout: 60_000 }, async () => {
    const name = "portcullis-granted-later";
    const clusters = await Clusters.load([{ id: CLUSTER_ID, kubeconfig: await credential(name, OLD_RULES) }]);
    const feeds = new ClusterChangeFeeds({ logger: pino({ level: "silent" }), targets: NO_TARGETS, initialBackoffMs: 50, maxBackoffMs: 200 });
    try {
      feeds.add(clusters.get(CLUSTER_ID)!);
      await until(() => /the credential lacks/.test(feeds.describe()[0]!.detail ?? ""), 10_000, "the grants named");
      await apply("POST", `${RBAC}/clusterrolebindings`, {
        metadata: { name: `${name}-feeds` },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "portcullis-shipped" },
        subjects: [{ kind: "ServiceAccount", name, namespace: "fundament-system" }],
      });
      await until(() => feeds.describe().every((s) => s.synced), 20_000, "the feeds synced");
      // An unsynced spell that has nothing to do with grants: the API server is down.
      await api.kill();
      await until(() => feeds.describe().every((s) => !s.synced), 20_000, "the feeds unsynced");
      for (const state of feeds.describe()) expect(state.detail ?? "").not.toMatch(/lacks/);
    } finally {
      await feeds.stop();
      await clusters.close();
      if (api.process().exitStatus() !== undefined) await api.start();
    }
  });
});
