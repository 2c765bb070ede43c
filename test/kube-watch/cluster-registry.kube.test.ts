/**
 * The cluster registry against real kube-apiservers, through the real wiring (connectPorts): a
 * management cluster holding the cluster Secrets, and a target cluster registered under several
 * ids. Registered → its PluginInstallation watch syncs through the Secret's credential; rotated →
 * rebuilt (tokens asked afresh) while the other cluster's index never stops answering; a bad
 * credential → that cluster alone 503s; label taken off → unknown; an invalid Secret or a static
 * id → refused, logged without the credential; the management cluster down → every registered
 * cluster kept, and a Secret deleted meanwhile removed once the registry lists again.
 *
 * Issue 42: a cluster id claimed by two Secrets (the real one and an attacker's `aaa-…`, which a
 * list by name meets first) is served by neither — by a registry that saw the real one first and
 * by one started after the duplicate existed — and deleting either restores the other on both.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { ClusterRegistry, type ClusterFleet } from "../../src/kube-watch/cluster-registry.ts";
import { type ClusterCredentials, Clusters } from "../../src/kube-fleet/clusters.ts";
import type { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { createMetrics } from "../../src/server/prometheus.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
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
let ports: ConnectedPorts;
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
  metrics = createMetrics({ indexSizes: ports.indexSizes, fleet: ports.fleet });
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
    expect(ports.fleet?.()).toEqual({ registered: { static: 1, registry: 2 }, registrySynced: true, registryConflicts: 0 });
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
    const before = (await ports.serviceAccountTokens.token(A, "registry-test", "portcullis"))?.authorization;
    expect(before).toBeDefined();
    expect((await ports.serviceAccountTokens.token(A, "registry-test", "portcullis"))?.authorization).toBe(before);
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
    expect((await ports.serviceAccountTokens.token(A, "registry-test", "portcullis"))?.authorization).not.toBe(before);
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

  it("a cluster id two Secrets claim is served by neither: unregistered, counted, on /readyz?verbose and logged naming both, never a credential; deleting one restores the other", async () => {
    const contested = randomUUID();
    const attackerToken = `attacker-${randomUUID()}`;
    await apply(clusterSecret("cluster-contested", contested, target.adminToken));
    await until(() => lookup(contested) === "found", 15_000, "the contested cluster to be served by its one Secret");
    await apply(clusterSecret("aaa-cluster-contested", contested, attackerToken, { server: "https://127.0.0.1:1" }));
    await until(() => !ports.clusters.has(contested), 10_000, "the second claim to take the cluster out");
    expect(lookup(contested)).toBe("unknown");
    expect(ports.fleet?.().registryConflicts).toBe(1);
    expect(await metricsText()).toContain("portcullis_cluster_registry_conflicts 1");
    const lines = processReadiness({ shuttingDown: false, serving: true, indexes: ports.indexSizes(), dependencies: [] }).checks;
    expect(lines.find((c) => c.name === `cluster id conflict cluster=${contested}`)).toMatchObject({
      ok: false,
      gates: false,
      state: expect.stringContaining(`(${NAMESPACE}/aaa-cluster-contested, ${NAMESPACE}/cluster-contested): served by none of them`),
    });
    expect(ports.ready()).toBe(true);
    const conflictLine = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l["cluster_id"] === contested && l["problem"] === "cluster-id-conflict");
    expect(conflictLine).toMatchObject({ level: 50, secrets: [`${NAMESPACE}/aaa-cluster-contested`, `${NAMESPACE}/cluster-contested`] });

    await rawRequest(management, "DELETE", `/api/v1/namespaces/${NAMESPACE}/secrets/aaa-cluster-contested`, undefined);
    await until(() => lookup(contested) === "found", 15_000, "the cluster to be served again by the Secret left");
    expect(clusters().get(contested)?.kubeConfig.getCurrentCluster()?.server).toBe(target.url);
    expect(ports.fleet?.().registryConflicts).toBe(0);
    expect(logLines.join("")).not.toContain(attackerToken);
    await rawRequest(management, "DELETE", `/api/v1/namespaces/${NAMESPACE}/secrets/cluster-contested`, undefined);
    await until(() => !ports.clusters.has(contested), 10_000, "the contested cluster to be removed with its Secret");
  }, 40_000);

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

describe("issue 42: two registries started at different times agree on a cluster id two Secrets claim", () => {
  /** A namespace of its own: the registry of connectPorts above does not see these Secrets. */
  const CLAIMS_NAMESPACE = "portcullis-clusters";
  const X = randomUUID();
  const Y = randomUUID();
  /** The attacker's API server: nothing listens there, and no registry may ever point X at it. */
  const ATTACKER_SERVER = "https://127.0.0.1:1";
  const attackerToken = `attacker-${randomUUID()}`;
  let registryCluster: Clusters;
  const registries: ClusterRegistry[] = [];
  const lines: string[] = [];

  /** A fleet that records what it is told: what is served now, and every registration ever made. */
  function recordingFleet() {
    const served = new Map<string, ClusterCredentials>();
    const registered: ClusterCredentials[] = [];
    const fleet: ClusterFleet = {
      isStatic: () => false,
      register(cluster) {
        served.set(cluster.id, cluster);
        registered.push(cluster);
      },
      unregister(clusterId) {
        served.delete(clusterId);
      },
    };
    return { fleet, served, registered };
  }

  function startRegistry(fleet: ClusterFleet): ClusterRegistry {
    const logger = pino({ level: "info" }, new Writable({ write: (chunk, _enc, cb) => (lines.push(String(chunk)), cb()) }));
    const registry = new ClusterRegistry(registryCluster.get("cluster-registry")!, fleet, { logger, namespace: CLAIMS_NAMESPACE });
    registries.push(registry);
    void registry.start();
    return registry;
  }

  function claim(name: string, clusterId: string, server: string, token: string) {
    const data = { clusterId, server, "ca.crt": target.caPem, token };
    return {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: CLAIMS_NAMESPACE, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
      data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
    };
  }

  async function put(secret: ReturnType<typeof claim>): Promise<void> {
    const path = `/api/v1/namespaces/${CLAIMS_NAMESPACE}/secrets`;
    const replaced = await rawRequest(management, "PUT", `${path}/${secret.metadata.name}`, secret);
    if (replaced.status === 404) expect((await rawRequest(management, "POST", path, secret)).status).toBe(201);
    else expect(replaced.status).toBe(200);
  }

  beforeAll(async () => {
    // The management cluster was killed and started again by the tests above: wait for it to answer.
    await until(async () => (await rawRequest(management, "GET", "/api/v1/namespaces/default", undefined).catch(() => ({ status: 0 }))).status === 200, 60_000, "the management API server");
    expect((await rawRequest(management, "POST", "/api/v1/namespaces", { metadata: { name: CLAIMS_NAMESPACE } })).status).toBe(201);
    registryCluster = await Clusters.load([{ id: "cluster-registry", kubeconfig: management.kubeconfigPath }]);
  }, 90_000);

  afterAll(async () => {
    await Promise.all(registries.map((r) => r.stop()));
    await registryCluster?.close();
  });

  const serverOf = (served: Map<string, ClusterCredentials>, id: string) => served.get(id)?.server;

  it("neither the registry that saw the real Secret first nor the one started after the attacker's serves the id; either Secret's change or deletion is followed by both", async () => {
    await put(claim("cluster-prod-1", X, target.url, target.adminToken));
    const early = recordingFleet();
    const first = startRegistry(early.fleet);
    await until(() => serverOf(early.served, X) === target.url, 15_000, "the first registry to serve X from the real Secret");

    // The attacker's Secret: sorted before the real one, as every list meets it.
    await put(claim("aaa-cluster-prod-1", X, ATTACKER_SERVER, attackerToken));
    await until(() => !early.served.has(X), 10_000, "the first registry to take X out");

    const late = recordingFleet();
    const second = startRegistry(late.fleet);
    await until(() => second.hasSynced, 15_000, "the second registry's first list");
    const conflict = [{ clusterId: X, secrets: [`${CLAIMS_NAMESPACE}/aaa-cluster-prod-1`, `${CLAIMS_NAMESPACE}/cluster-prod-1`] }];
    expect(first.conflicts()).toEqual(conflict);
    expect(second.conflicts()).toEqual(conflict);
    expect([early.served.has(X), late.served.has(X)]).toEqual([false, false]);
    // The second registry never registered X at all, not even for a moment of its first list.
    expect(late.registered.map((c) => c.id)).not.toContain(X);

    // The attacker's Secret changed to name another id: X is released to the real Secret, Y is the attacker's alone.
    await put(claim("aaa-cluster-prod-1", Y, ATTACKER_SERVER, attackerToken));
    await until(() => [early, late].every((f) => serverOf(f.served, X) === target.url && serverOf(f.served, Y) === ATTACKER_SERVER), 10_000, "both registries to serve X from the real Secret and Y from the other");
    expect([first.conflicts(), second.conflicts()]).toEqual([[], []]);

    // Back to X: out again on both, and Y gone.
    await put(claim("aaa-cluster-prod-1", X, ATTACKER_SERVER, attackerToken));
    await until(() => [early, late].every((f) => !f.served.has(X) && !f.served.has(Y)), 10_000, "both registries to take X out again");

    // The attacker's Secret deleted: both serve X from the real Secret.
    await rawRequest(management, "DELETE", `/api/v1/namespaces/${CLAIMS_NAMESPACE}/secrets/aaa-cluster-prod-1`, undefined);
    await until(() => [early, late].every((f) => serverOf(f.served, X) === target.url), 10_000, "both registries to serve X from the real Secret again");
    expect([first.conflicts(), second.conflicts()]).toEqual([[], []]);

    // Never, on either registry, was X served from the attacker's server.
    for (const f of [early, late]) expect(f.registered.filter((c) => c.id === X).map((c) => c.server)).not.toContain(ATTACKER_SERVER);
    // Loud, and without a credential: each registry logged the conflict naming both Secrets.
    const conflicts = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l["problem"] === "cluster-id-conflict" && l["cluster_id"] === X);
    expect(conflicts.length).toBeGreaterThanOrEqual(2);
    for (const l of conflicts) expect(l["secrets"]).toEqual(conflict[0]!.secrets);
    expect(lines.join("")).not.toContain(attackerToken);
    expect(lines.join("")).not.toContain(target.adminToken);
  }, 90_000);

  it("the real Secret deleted instead: both registries serve the one left (ownership follows the Secrets there are, nothing else)", async () => {
    await put(claim("aaa-cluster-prod-1", X, ATTACKER_SERVER, attackerToken));
    const [early, late] = [recordingFleet(), recordingFleet()];
    const [a, b] = [startRegistry(early.fleet), startRegistry(late.fleet)];
    await until(() => a.hasSynced && b.hasSynced, 15_000, "both registries to list");
    expect([early.served.has(X), late.served.has(X)]).toEqual([false, false]);
    await rawRequest(management, "DELETE", `/api/v1/namespaces/${CLAIMS_NAMESPACE}/secrets/cluster-prod-1`, undefined);
    await until(() => [early, late].every((f) => serverOf(f.served, X) === ATTACKER_SERVER), 10_000, "both registries to serve X from the one Secret left");
  }, 40_000);
});
