/**
 * One cluster's API server goes down after both clusters' indexes synced: the replica stays ready
 * and keeps serving the other cluster, the lost cluster's checks answer 503 (never an allow from a
 * view that may be stale), and /readyz?verbose says which index is unsynced and why that does not
 * take the replica out of service. A replica that starts while one cluster's API server fails its
 * first list is ready for the others too (with a single cluster it is not: test/server/ports.faults.test.ts). Real ports (client-node ListWatch, SAR, TokenRequest, OpenFGA SDK)
 * against the wire fakes; the second cluster is a second fake API server.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { ConnectedPorts } from "../../src/server/ports.ts";
import { ids, PINNED_HASH, pluginToken } from "../support/tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { startWired, until, type Wired } from "../support/wire-fakes/wired.ts";

const dir = mkdtempSync(join(tmpdir(), "portcullis-cluster-outage-"));
let w: Wired;
let second: FakeKubeApi;

beforeAll(async () => {
  second = await new FakeKubeApi().start();
  second.put({ uid: ids.otherInstallation, name: "cert-manager", definitionHash: PINNED_HASH });
  second.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  second.serviceAccounts.add(`fundament-system/fundament-${ids.user}`);
  const kubeconfig = second.writeKubeconfig(dir);
  w = await startWired(
    {},
    { config: (config) => ({ ...config, clusters: [...config.clusters, { ...config.clusters[0]!, id: ids.otherCluster, kubeconfig }] }) },
  );
  await until(() => answers(w.ports, ids.otherCluster, ids.otherInstallation), 10_000, "the second cluster's index to sync");
});
afterAll(async () => {
  await w.stop();
  await second.stop();
  rmSync(dir, { recursive: true, force: true });
});

function answers(ports: ConnectedPorts, cluster: string, installation: string): boolean {
  try {
    ports.installations.byUid(cluster, installation);
    return true;
  } catch {
    return false;
  }
}

const checkOn = async (cluster: string, installation: string) =>
  w.server.check({
    path: `/clusters/${cluster}/api/v1/namespaces/team-a/pods`,
    headers: { authorization: `Bearer ${await pluginToken({ cluster_id: cluster, installation_id: installation })}` },
    policy: "kube-api-proxy",
  });

const readyz = async (query = "") => {
  const res = await fetch(`http://127.0.0.1:${w.server.server.adminPort}/readyz${query}`);
  return { status: res.status, body: await res.text() };
};

/**
 * An allow, retried briefly: the fakes' deadlines are a few hundred milliseconds, which a loaded
 * machine can miss once (a 503, fail-closed); the synced cluster must be served, not on every try.
 */
const served = (check: () => Promise<{ allowed: boolean }>, what: string) => until(async () => (await check()).allowed, 5_000, what);

it("serves the synced cluster, answers 503 for the lost one, and stays ready", async () => {
  await served(() => checkOn(ids.cluster, ids.installation), "the first cluster to be served");
  await served(() => checkOn(ids.otherCluster, ids.otherInstallation), "the second cluster to be served");
  const before = await readyz("?verbose");
  expect(before.status).toBe(200);
  expect(before.body).toContain(`[+]index plugininstallations cluster=${ids.otherCluster}: synced, 1 object`);

  await second.stop();
  await until(() => !answers(w.ports, ids.otherCluster, ids.otherInstallation), 10_000, "the lost cluster's index to go unsynced");

  expect(await checkOn(ids.otherCluster, ids.otherInstallation)).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
  await served(() => checkOn(ids.cluster, ids.installation), "the synced cluster to be served during the other's outage");
  expect(w.server.server.health.serving).toBe(true);
  expect(await readyz()).toEqual({ status: 200, body: "ready\n" });
  const verbose = await readyz("?verbose");
  expect(verbose.status).toBe(200);
  const iso = String.raw`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`;
  expect(verbose.body).toMatch(new RegExp(String.raw`^\[\+\]index plugininstallations cluster=${ids.cluster}: synced, 1 object, last synced ${iso}$`, "m"));
  expect(verbose.body).toMatch(
    new RegExp(String.raw`^\[-\]index plugininstallations cluster=${ids.otherCluster}: unsynced, last synced ${iso}: this cluster's checks answer 503 until its watch recovers \(does not gate readiness\)$`, "m"),
  );
  expect(verbose.body).toContain(`[+]openfga store: ${w.config.openfga!.storeId} (configured by id) (does not gate readiness)\n`);
  expect(verbose.body.endsWith("\nready\n")).toBe(true);
}, 30_000);

it("a replica starting while one cluster's API server fails its first list is ready for the others, and serves that cluster once it syncs", async () => {
  const dirB = mkdtempSync(join(tmpdir(), "portcullis-cluster-outage-start-"));
  const failing = await new FakeKubeApi().start();
  failing.put({ uid: ids.otherInstallation, name: "cert-manager", definitionHash: PINNED_HASH });
  failing.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  failing.faults.list = "status-500";
  const kubeconfig = failing.writeKubeconfig(dirB);
  const fresh = await startWired(
    {},
    { config: (config) => ({ ...config, clusters: [...config.clusters, { ...config.clusters[0]!, id: ids.otherCluster, kubeconfig }] }) },
  );
  try {
    const check = async (cluster: string, installation: string) =>
      fresh.server.check({
        path: `/clusters/${cluster}/api/v1/namespaces/team-a/pods`,
        headers: { authorization: `Bearer ${await pluginToken({ cluster_id: cluster, installation_id: installation })}` },
        policy: "kube-api-proxy",
      });
    const readyzOf = async (query = "") => {
      const res = await fetch(`http://127.0.0.1:${fresh.server.server.adminPort}/readyz${query}`);
      return { status: res.status, body: await res.text() };
    };
    await until(async () => (await readyzOf()).status === 200, 10_000, "readiness with one cluster failing its first list");
    expect(answers(fresh.ports, ids.otherCluster, ids.otherInstallation)).toBe(false);
    await served(() => check(ids.cluster, ids.installation), "the synced cluster to be served");
    expect(await check(ids.otherCluster, ids.otherInstallation)).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
    const verbose = await readyzOf("?verbose");
    expect(verbose.body).toContain(
      `[-]index plugininstallations cluster=${ids.otherCluster}: never synced, its first list failed: this cluster's checks answer 503 until it syncs (does not gate readiness)\n`,
    );
    expect(verbose.body.endsWith("\nready\n")).toBe(true);

    failing.faults.list = "healthy";
    await until(async () => (await check(ids.otherCluster, ids.otherInstallation)).allowed, 20_000, "the failing cluster to sync and be served");
  } finally {
    await fresh.stop();
    await failing.stop();
    rmSync(dirB, { recursive: true, force: true });
  }
}, 40_000);
