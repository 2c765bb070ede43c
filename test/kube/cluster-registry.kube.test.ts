/**
 * The cluster registry against real kube-apiservers, through the real wiring (connectPorts): a
 * management cluster holding the cluster Secrets, and a target cluster registered under several
 * ids. Registered → its PluginInstallation watch syncs through the Secret's credential; rotated →
 * rebuilt (tokens asked afresh) while the other cluster's index never stops answering; a bad
 * credential → that cluster alone 503s; label taken off → unknown; an invalid Secret or a static
 * id → refused, logged without the credential; the management cluster down → every registered
 * cluster kept, and a Secret deleted meanwhile removed once the registry lists again.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/authz/errors.ts";
import type { Clusters } from "../../src/kube/clusters.ts";
import type { InstallationIndex } from "../../src/kube/installation-index.ts";
import { createMetrics } from "../../src/metrics/prometheus.ts";
import { connectPorts, type Ports } from "../../src/server/app.ts";
import { processReadiness } from "../../src/server/readiness.ts";
import { applyManifests, type KubeApiserver, rawRequest, startKubeApiserver } from "../harness/index.ts";
import { CRD_FILES } from "../e2e/fundament-world.ts";
import { TestPki } from "../support/certificates.ts";
import { testConfig } from "../support/server.ts";
import { until } from "../support/wire-fakes/wired.ts";

const NAMESPACE = "portcullis";
const STATIC_ID = randomUUID();
const A = randomUUID();
const B = randomUUID();
const INSTALLATION = { name: "cert-manager", hash: `sha256:${"a".repeat(64)}` };

let management: KubeApiserver;
let target: KubeApiserver;
let ports: Ports;
/** Made before any Secret is applied, so that its counters see every registry event. */
let metrics: ReturnType<typeof createMetrics>;
let installationUid: string;
/** A second credential for the target cluster: a cluster-admin ServiceAccount's token. */
let rotatedToken: string;
const logLines: string[] = [];
/** Client certificates the target cluster accepts (--client-ca-file). */
const pki = new TestPki();
pki.ca("target-clients");
const clientCertificate = pki.leaf("portcullis-by-certificate", "target-clients", "client");

beforeAll(async () => {
  [management, target] = await Promise.all([startKubeApiserver(), startKubeApiserver({ extraArgs: [`--client-ca-file=${pki.path("target-clients.crt")}`] })]);
  await applyManifests(target, CRD_FILES);
  expect((await rawRequest(management, "POST", "/api/v1/namespaces", { metadata: { name: NAMESPACE } })).status).toBe(201);
  const created = await rawRequest(target, "POST", "/apis/plugins.fundament.io/v1/plugininstallations", {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name: INSTALLATION.name },
    spec: { definitionRef: { pluginName: "cert-manager", pluginVersion: "1.0.0", definitionHash: INSTALLATION.hash } },
  });
  installationUid = (created.json as { metadata: { uid: string } }).metadata.uid;
  rotatedToken = await clusterAdminToken(target);

  const logger = pino({ level: "info" }, new Writable({ write: (chunk, _enc, cb) => (logLines.push(String(chunk)), cb()) }));
  ports = await connectPorts(
    testConfig({
      clusters: [{ id: STATIC_ID, kubeconfig: target.kubeconfigPath }],
      clusterRegistry: { namespace: NAMESPACE, kubeconfig: management.kubeconfigPath },
    }),
    logger,
  );
  metrics = createMetrics(ports.indexSizes, ports.fleet);
  await until(() => ports.ready(), 30_000, "the registry and the static cluster to sync");
}, 180_000);

afterAll(async () => {
  await ports?.stop();
  await Promise.all([management?.stop(), target?.stop()]);
  pki.remove();
});

/** A cluster Secret for the target cluster, under `clusterId`, with a token (or, with `token` undefined, only `extra`'s credential). */
function clusterSecret(name: string, clusterId: string, token: string | undefined, extra: Record<string, string> = {}, labelled = true) {
  const data = { clusterId, server: target.url, "ca.crt": target.caPem, ...(token === undefined ? {} : { token }), ...extra };
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: NAMESPACE, ...(labelled ? { labels: { "portcullis.fundament.io/secret-type": "cluster" } } : {}) },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  };
}

async function apply(secret: ReturnType<typeof clusterSecret>): Promise<void> {
  const path = `/api/v1/namespaces/${NAMESPACE}/secrets`;
  const replaced = await rawRequest(management, "PUT", `${path}/${secret.metadata.name}`, secret);
  if (replaced.status === 404) expect((await rawRequest(management, "POST", path, secret)).status).toBe(201);
  else expect(replaced.status).toBe(200);
}

async function clusterAdminToken(api: KubeApiserver): Promise<string> {
  await rawRequest(api, "POST", "/api/v1/namespaces", { metadata: { name: "registry-test" } });
  await rawRequest(api, "POST", "/api/v1/namespaces/registry-test/serviceaccounts", { metadata: { name: "portcullis" } });
  await rawRequest(api, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
    metadata: { name: "registry-test-portcullis" },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
    subjects: [{ kind: "ServiceAccount", name: "portcullis", namespace: "registry-test" }],
  });
  const issued = await rawRequest(api, "POST", "/api/v1/namespaces/registry-test/serviceaccounts/portcullis/token", { spec: { expirationSeconds: 3600 } });
  return (issued.json as { status: { token: string } }).status.token;
}

/** What a check would read of the cluster's installation index now: the installation, "unknown cluster", or "503". */
function lookup(clusterId: string): "found" | "unknown" | "503" {
  if (!ports.clusters.has(clusterId)) return "unknown";
  try {
    return ports.installations.byUid(clusterId, installationUid) !== undefined ? "found" : "unknown";
  } catch (err) {
    if (err instanceof DependencyUnavailable) return "503";
    throw err;
  }
}

const clusters = () => ports.clusters as Clusters;

function metricsText(): Promise<string> {
  return metrics.metrics();
}

describe("the cluster registry against real kube-apiservers", () => {
  it("registers a cluster from its Secret: its installation watch syncs through the Secret's credential", async () => {
    await apply(clusterSecret("cluster-a", A, target.adminToken));
    await apply(clusterSecret("cluster-b", B, target.adminToken));
    const ms = await until(() => lookup(A) === "found" && lookup(B) === "found", 15_000, "clusters a and b to serve their installation");
    console.log(`two clusters registered and their installation indexes synced ${ms.toFixed(0)} ms after their Secrets were applied`);
    expect(clusters().sourceOf(A)).toBe("registry");
    expect(ports.fleet?.()).toEqual({ registered: { static: 1, registry: 2 }, registrySynced: true });
    expect(await metricsText()).toContain('portcullis_registered_clusters{source="registry"} 2');
  }, 30_000);

  it("a client certificate is a credential too: the watch syncs through it", async () => {
    const byCertificate = randomUUID();
    await rawRequest(target, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
      metadata: { name: "registry-test-certificate" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
      subjects: [{ kind: "User", name: "portcullis-by-certificate", apiGroup: "rbac.authorization.k8s.io" }],
    });
    await apply(clusterSecret("cluster-by-certificate", byCertificate, undefined, { "tls.crt": clientCertificate.cert.toString(), "tls.key": clientCertificate.key.toString() }));
    await until(() => lookup(byCertificate) === "found", 15_000, "the cluster reached with a client certificate to serve its installation");
    await rawRequest(management, "DELETE", `/api/v1/namespaces/${NAMESPACE}/secrets/cluster-by-certificate`, undefined);
    await until(() => !ports.clusters.has(byCertificate), 10_000, "the cluster to be removed with its Secret");
  }, 30_000);

  it("a rotated credential rebuilds that cluster alone: tokens asked afresh, the other cluster answering throughout", async () => {
    const before = await ports.serviceAccountTokens.token(A, "registry-test", "portcullis");
    expect(await ports.serviceAccountTokens.token(A, "registry-test", "portcullis")).toBe(before);
    const oldA = clusters().get(A);
    const oldB = clusters().get(B);
    let bAnswers = 0;
    let bFailures = 0;
    const sampler = setInterval(() => (lookup(B) === "found" ? bAnswers++ : bFailures++), 5);
    try {
      await apply(clusterSecret("cluster-a", A, rotatedToken));
      await until(() => clusters().get(A) !== oldA, 10_000, "cluster a to be rebuilt");
      await until(() => lookup(A) === "found", 15_000, "cluster a to sync with the rotated token");
    } finally {
      clearInterval(sampler);
    }
    expect(clusters().get(B)).toBe(oldB);
    expect(bFailures).toBe(0);
    expect(bAnswers).toBeGreaterThan(0);
    // The token cached under the old credential was dropped: a new TokenRequest was made.
    expect(await ports.serviceAccountTokens.token(A, "registry-test", "portcullis")).not.toBe(before);
    const text = await metricsText();
    // a, b and the certificate's cluster (removed since) were added; a changed once.
    expect(text).toContain('portcullis_cluster_registry_events_total{event="added"} 3');
    expect(text).toContain('portcullis_cluster_registry_events_total{event="removed"} 1');
    expect(text).toContain('portcullis_cluster_registry_events_total{event="changed"} 1');
    expect(text).toContain("portcullis_cluster_registry_synced 1");
  }, 30_000);

  it("a credential the API server refuses: that cluster's checks answer 503, the other cluster's are served", async () => {
    await apply(clusterSecret("cluster-a", A, "not-a-valid-token"));
    await until(() => lookup(A) === "503", 15_000, "cluster a to answer 503");
    expect(lookup(B)).toBe("found");
    expect(ports.clusters.has(A)).toBe(true);
    // Registered while serving: it does not take the replica out of service.
    expect(ports.ready()).toBe(true);
    await apply(clusterSecret("cluster-a", A, target.adminToken));
    await until(() => lookup(A) === "found", 15_000, "cluster a to recover");
  }, 40_000);

  it("taking the label off unregisters the cluster: unknown (404 unknown-cluster), its watch stopped", async () => {
    await apply(clusterSecret("cluster-a", A, target.adminToken, {}, false));
    await until(() => !ports.clusters.has(A), 10_000, "cluster a to be unregistered");
    expect(lookup(A)).toBe("unknown");
    expect((ports.installations as InstallationIndex).sizes().map((s) => s.clusterId)).not.toContain(A);
    expect(lookup(B)).toBe("found");
  }, 20_000);

  it("an invalid Secret and a static cluster's id register nothing, logged by problem and never with the credential", async () => {
    const secretToken = `never-logged-${randomUUID()}`;
    await apply(clusterSecret("cluster-bad", randomUUID(), secretToken, { server: "http://127.0.0.1:1" }));
    await apply(clusterSecret("cluster-static", STATIC_ID, secretToken));
    await until(() => logLines.filter((l) => l.includes("cluster Secret ignored")).length >= 2, 10_000, "both Secrets to be refused");
    const refused = logLines.filter((l) => l.includes("cluster Secret ignored")).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(refused.map((l) => [l["secret"], l["problem"]])).toEqual(
      expect.arrayContaining([
        [`${NAMESPACE}/cluster-bad`, "bad-server"],
        [`${NAMESPACE}/cluster-static`, "static-cluster-id"],
      ]),
    );
    expect(clusters().sourceOf(STATIC_ID)).toBe("static");
    expect(lookup(STATIC_ID)).toBe("found");
    expect(logLines.join("")).not.toContain(secretToken);
    expect(logLines.join("")).not.toContain(rotatedToken);
    expect(logLines.join("")).not.toContain(target.adminToken);
  }, 20_000);

  it("the management cluster down: every registered cluster is kept and served; a Secret deleted meanwhile goes when the registry lists again", async () => {
    await management.kill();
    await until(() => ports.fleet?.().registrySynced === false, 15_000, "the registry to notice the outage");
    expect(lookup(B)).toBe("found");
    expect(ports.ready()).toBe(true);
    const line = processReadiness({ shuttingDown: false, serving: true, indexes: ports.indexSizes(), dependencies: [] }).checks.find((c) => c.name.startsWith("index clusterregistry"));
    expect(line).toMatchObject({ ok: false, gates: false });
    expect(line?.state).toContain("kept and served");
    // Deleted behind the API server's back, as if by another replica of the control plane.
    await deleteFromEtcd(management, `/registry/secrets/${NAMESPACE}/cluster-b`);
    await management.start();
    await until(() => !ports.clusters.has(B), 60_000, "cluster b to be removed by the registry's fresh list");
    expect(ports.fleet?.().registrySynced).toBe(true);
    expect(lookup(STATIC_ID)).toBe("found");
  }, 120_000);
});

/** Deletes one key through etcd's JSON gateway (loopback). */
async function deleteFromEtcd(api: KubeApiserver, key: string): Promise<void> {
  const response = await fetch(`${api.etcd.clientUrl}/v3/kv/deleterange`, { method: "POST", body: JSON.stringify({ key: Buffer.from(key).toString("base64") }) });
  const body = (await response.json()) as { deleted?: string };
  expect(body.deleted).toBe("1");
}

describe("readiness waits for the registry's first list", () => {
  let dir: string;
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("a registry whose management cluster is unreachable keeps the replica not ready, the static cluster synced or not", async () => {
    dir = mkdtempSync(join(tmpdir(), "portcullis-registry-"));
    const unreachable = join(dir, "kubeconfig");
    writeFileSync(
      unreachable,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "m", cluster: { server: "https://127.0.0.1:1" } }],
        users: [{ name: "m", user: { token: "t" } }],
        contexts: [{ name: "m", context: { cluster: "m", user: "m" } }],
        "current-context": "m",
      }),
    );
    const down = await connectPorts(
      testConfig({ clusters: [{ id: STATIC_ID, kubeconfig: target.kubeconfigPath }], clusterRegistry: { namespace: NAMESPACE, kubeconfig: unreachable } }),
      pino({ level: "silent" }),
    );
    try {
      await until(() => (down.installations as InstallationIndex).hasSynced, 15_000, "the static cluster to sync");
      expect(down.ready()).toBe(false);
      const line = processReadiness({ shuttingDown: false, serving: false, indexes: down.indexSizes(), dependencies: [] }).checks.find((c) => c.name.startsWith("index clusterregistry"));
      expect(line).toMatchObject({ ok: false, gates: true });
    } finally {
      await down.stop();
    }
  }, 30_000);
});
