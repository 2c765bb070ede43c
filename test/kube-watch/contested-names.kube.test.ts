/**
 * Order never decides ownership, against real kube-apiservers: two replicas (two independent
 * indexes) that heard the same objects in another order — the first from a list and then a watch
 * event, the second from one list, which the API server sorts by namespace and name — give the
 * same answers.
 *  - The shipped CRDs (cluster-scoped): a subject two Revocations cover is reported as revoked by
 *    the same entry (the least name) on both, and stays revoked when one is deleted.
 *  - The CRDs made namespaced (a cluster where they are not Fundament's, or a future version that
 *    moved them): two PluginInstallations or two Projects of one name in two namespaces are served
 *    by neither replica (a log line names both, portcullis_index_conflicts counts them) until one is
 *    deleted; two Revocations of one name are two entries, and deleting one leaves the other in force.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RevocationSubject } from "../../src/kube-watch/revocations.ts";
import { ProjectIndex } from "../../src/konfidence/project-index.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { RevocationIndex } from "../../src/kube-watch/revocation-index.ts";
import { createMetrics } from "../../src/server/prometheus.ts";
import { CRD_FILES, REVOCATION_CRD } from "../e2e/fundament-world.ts";
import { applyManifests, type KubeApiserver, rawRequest, startKubeApiserver } from "../harness/index.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";

const PROJECT_CRD = join(import.meta.dirname, "../../deploy/k8s/crds/projects.konfidence.cloud.yaml");
const INSTALLATIONS = "/apis/plugins.fundament.io/v1";
const PROJECTS = "/apis/konfidence.cloud/v1alpha1";
const REVOCATIONS = "/apis/portcullis.fundament.io/v1alpha1";
const logger = pino({ level: "silent" });

let shipped: KubeApiserver;
let namespaced: KubeApiserver;
let shippedClusters: Clusters;
let namespacedClusters: Clusters;
let dir: string;

/** The shipped CRD with its scope turned to Namespaced. */
function namespacedCrd(file: string): string {
  const text = readFileSync(file, "utf8");
  if (!text.includes("scope: Cluster")) throw new Error(`${file}: no cluster scope to turn`);
  const out = join(dir, `namespaced-${file.split("/").pop()}`);
  writeFileSync(out, text.replace("scope: Cluster", "scope: Namespaced"));
  return out;
}

async function create(api: KubeApiserver, path: string, body: Record<string, unknown>): Promise<{ metadata: { uid: string } }> {
  const { status, json } = await rawRequest(api, "POST", path, body);
  if (status !== 201) throw new Error(`POST ${path}: ${status} ${JSON.stringify(json)}`);
  return json as { metadata: { uid: string } };
}

async function remove(api: KubeApiserver, path: string): Promise<void> {
  const { status, json } = await rawRequest(api, "DELETE", path, undefined);
  if (status !== 200) throw new Error(`DELETE ${path}: ${status} ${JSON.stringify(json)}`);
}

const within = (namespace: string | undefined) => (namespace === undefined ? "" : `/namespaces/${namespace}`);

function revocation(api: KubeApiserver, name: string, spec: Record<string, unknown>, namespace?: string) {
  return create(api, `${REVOCATIONS}${within(namespace)}/revocations`, {
    apiVersion: "portcullis.fundament.io/v1alpha1",
    kind: "Revocation",
    metadata: { name },
    spec: { reason: "INC-7", ...spec },
  });
}

function installation(name: string, namespace: string) {
  return create(namespaced, `${INSTALLATIONS}/namespaces/${namespace}/plugininstallations`, {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name },
    spec: { organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03", definitionRef: { pluginName: name, pluginVersion: "1.4.0", definitionHash: PINNED_HASH } },
  });
}

function project(name: string, namespace: string, group: string) {
  return create(namespaced, `${PROJECTS}/namespaces/${namespace}/projects`, {
    apiVersion: "konfidence.cloud/v1alpha1",
    kind: "Project",
    metadata: { name },
    spec: { roleBindings: { admin: [{ session: { memberOf: [group] } }] } },
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-contested-"));
  [shipped, namespaced] = await Promise.all([startKubeApiserver(), startKubeApiserver()]);
  await applyManifests(shipped, [REVOCATION_CRD]);
  await applyManifests(namespaced, [...CRD_FILES, PROJECT_CRD, REVOCATION_CRD].map(namespacedCrd));
  for (const name of ["team-a", "team-b"]) expect((await rawRequest(namespaced, "POST", "/api/v1/namespaces", { metadata: { name } })).status).toBe(201);
  shippedClusters = await Clusters.load([{ id: ids.cluster, kubeconfig: shipped.kubeconfigPath }]);
  namespacedClusters = await Clusters.load([{ id: ids.otherCluster, kubeconfig: namespaced.kubeconfigPath }]);
}, 180_000);

afterAll(async () => {
  await shippedClusters?.close();
  await namespacedClusters?.close();
  await Promise.all([shipped?.stop(), namespaced?.stop()]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** A replica's index, started and synced (listed). */
async function started<T extends { start(): Promise<void> }>(index: T, synced: (index: T) => boolean): Promise<T> {
  await index.start();
  await until(() => synced(index), 10_000, "the index to sync");
  return index;
}

describe("the shipped, cluster-scoped Revocation CRD", () => {
  it("reports a subject two entries cover as revoked by the same entry on both replicas, whichever they heard first", async () => {
    const subject: RevocationSubject = { installationId: ids.installation, pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH, userId: ids.user };
    const cluster = shippedClusters.get(ids.cluster)!;
    await revocation(shipped, "zz-cert-manager", { plugin: { name: "cert-manager" } });
    const first = await started(new RevocationIndex(cluster, { logger }), (i) => i.size().synced);
    try {
      // Heard by the first replica's watch, after the entry it listed…
      await revocation(shipped, "aa-installation", { installation: { id: ids.installation } });
      await until(() => first.size().size === 2, 5_000, "the watch event");
      // …and by the second in one list, sorted by name.
      const second = await started(new RevocationIndex(cluster, { logger }), (i) => i.size().synced);
      try {
        expect([first.revoked(subject)?.name, second.revoked(subject)?.name]).toEqual(["aa-installation", "aa-installation"]);
        await remove(shipped, `${REVOCATIONS}/revocations/aa-installation`);
        await until(() => first.size().size === 1 && second.size().size === 1, 5_000, "the deletion");
        expect([first.revoked(subject)?.name, second.revoked(subject)?.name]).toEqual(["zz-cert-manager", "zz-cert-manager"]);
      } finally {
        await second.stop();
      }
    } finally {
      await first.stop();
    }
  });
});

describe("the CRDs made namespaced: one name in two namespaces", () => {
  it("serves neither PluginInstallation on either replica until one is deleted, then the other on both", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const loud = pino({ level: "error" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const clusterId = ids.otherCluster;
    const b = await installation("cert-manager", "team-b");
    const first = await started(new InstallationIndex(namespacedClusters.all(), { logger: loud }), (i) => i.sizes()[0]!.synced);
    const second = new InstallationIndex(namespacedClusters.all(), { logger: loud });
    try {
      expect(first.byUid(clusterId, b.metadata.uid)?.name).toBe("cert-manager");
      const a = await installation("cert-manager", "team-a");
      await until(() => first.byUid(clusterId, b.metadata.uid) === undefined, 5_000, "the watch event");
      await started(second, (i) => i.sizes()[0]!.synced);
      const answers = () => [first, second].flatMap((replica) => [replica.byUid(clusterId, a.metadata.uid), replica.byUid(clusterId, b.metadata.uid), replica.byName(clusterId, "cert-manager")]);
      expect(answers()).toEqual([undefined, undefined, undefined, undefined, undefined, undefined]);
      expect(lines.filter((l) => l["index"] === "plugininstallations").map((l) => [l["claim"], l["value"], l["objects"]])).toContainEqual([
        "name",
        "cert-manager",
        ["team-a/cert-manager", "team-b/cert-manager"],
      ]);
      const metrics = createMetrics({ indexSizes: () => [...first.sizes().map((s) => ({ index: "plugininstallations", ...s }))] });
      expect(await metrics.metrics()).toContain(`portcullis_index_conflicts{index="plugininstallations",cluster_id="${clusterId}"} 1`);

      await remove(namespaced, `${INSTALLATIONS}/namespaces/team-b/plugininstallations/cert-manager`);
      await until(() => first.sizes()[0]!.size === 1 && second.sizes()[0]!.size === 1, 5_000, "the deletion");
      expect([first, second].map((replica) => replica.byUid(clusterId, a.metadata.uid)?.uid)).toEqual([a.metadata.uid, a.metadata.uid]);
      expect(first.sizes()[0]!.contested).toBe(0);
    } finally {
      await Promise.all([first.stop(), second.stop()]);
    }
  });

  it("serves neither Project on either replica until one is deleted, then the other on both", async () => {
    const cluster = namespacedClusters.get(ids.otherCluster)!;
    const options = { logger, trusts: () => true };
    await project("alpha", "team-b", "squatters");
    const first = await started(new ProjectIndex(cluster, options), (i) => i.synced);
    const second = new ProjectIndex(cluster, options);
    try {
      const groups = (replica: ProjectIndex) => replica.byName("alpha")?.bindings.session.flatMap((b) => b.subject.memberOf);
      expect(groups(first)).toEqual(["squatters"]);
      await project("alpha", "team-a", "alpha-admins");
      await until(() => groups(first)?.[0] !== "squatters", 5_000, "the watch event");
      await started(second, (i) => i.synced);
      expect([groups(first), groups(second)]).toEqual([undefined, undefined]);
      expect([first.sizes()[0]!.contested, second.sizes()[0]!.contested]).toEqual([1, 1]);

      await remove(namespaced, `${PROJECTS}/namespaces/team-b/projects/alpha`);
      await until(() => first.sizes()[0]!.size === 1 && second.sizes()[0]!.size === 1, 5_000, "the deletion");
      expect([groups(first), groups(second)]).toEqual([["alpha-admins"], ["alpha-admins"]]);
    } finally {
      await Promise.all([first.stop(), second.stop()]);
    }
  });

  it("keeps two Revocations of one name as two entries on both replicas: deleting one leaves the other in force", async () => {
    const cluster = namespacedClusters.get(ids.otherCluster)!;
    const byInstallation: RevocationSubject = { installationId: ids.installation, pluginName: "grafana", pluginVersion: "1.0.0", definitionHash: PINNED_HASH, userId: ids.otherUser };
    const byUser: RevocationSubject = { installationId: ids.otherInstallation, pluginName: "grafana", pluginVersion: "1.0.0", definitionHash: PINNED_HASH, userId: ids.user };
    await revocation(namespaced, "inc-1", { installation: { id: ids.installation } }, "team-b");
    const first = await started(new RevocationIndex(cluster, { logger }), (i) => i.size().synced);
    const second = new RevocationIndex(cluster, { logger });
    try {
      await revocation(namespaced, "inc-1", { user: { id: ids.user } }, "team-a");
      await until(() => first.revoked(byUser) !== undefined, 5_000, "the watch event");
      await started(second, (i) => i.size().synced);
      const answers = () => [first, second].flatMap((replica) => [replica.revoked(byInstallation)?.name, replica.revoked(byUser)?.name]);
      expect(answers()).toEqual(["team-b/inc-1", "team-a/inc-1", "team-b/inc-1", "team-a/inc-1"]);

      await remove(namespaced, `${REVOCATIONS}/namespaces/team-a/revocations/inc-1`);
      await until(() => first.size().size === 1 && second.size().size === 1, 5_000, "the deletion");
      expect(answers()).toEqual(["team-b/inc-1", undefined, "team-b/inc-1", undefined]);
    } finally {
      await Promise.all([first.stop(), second.stop()]);
    }
  });
});
