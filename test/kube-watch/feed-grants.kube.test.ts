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
