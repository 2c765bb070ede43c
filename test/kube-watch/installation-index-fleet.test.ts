/**
 * The installation index as the cluster registry changes the fleet: clusters added and removed while
 * it runs, and which of them the process's readiness waits for. The clusters are the wire-level
 * fake API server (answers its list and watch) and an address nothing listens on (its first list
 * fails at once).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { type Cluster, Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { until } from "../support/wire-fakes/wired.ts";

let dir: string;
let kube: FakeKubeApi;
let clusters: Clusters;
let up: Cluster;
let down: Cluster;
let alsoDown: Cluster;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-index-fleet-"));
  kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  const nowhere = join(dir, "nowhere.yaml");
  writeFileSync(
    nowhere,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster: { server: "https://127.0.0.1:1" } }],
      users: [{ name: "u", user: { token: "t" } }],
      contexts: [{ name: "c", context: { cluster: "c", user: "u" } }],
      "current-context": "c",
    }),
  );
  clusters = await Clusters.load([
    { id: "up", kubeconfig: kube.writeKubeconfig(dir) },
    { id: "down", kubeconfig: nowhere },
    { id: "also-down", kubeconfig: nowhere },
  ]);
  [up, down, alsoDown] = [clusters.get("up")!, clusters.get("down")!, clusters.get("also-down")!];
});

afterAll(async () => {
  await clusters?.close();
  await kube?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function lookup(index: InstallationIndex, clusterId: string): "found" | "no such cluster" | "503" {
  try {
    return index.byUid(clusterId, ids.installation) === undefined ? "no such cluster" : "found";
  } catch (err) {
    if (err instanceof DependencyUnavailable) return "503";
    throw err;
  }
}

const attempted = (index: InstallationIndex, clusterId: string) => index.sizes().some((s) => s.clusterId === clusterId && s.attempted);

describe("clusters added and removed while the index runs", () => {
  it("readiness waits for the clusters known at start, never for one registered while serving", async () => {
    const index = new InstallationIndex([], { logger: pino({ level: "silent" }), initialBackoffMs: 60_000 });
    await index.start();
    try {
      expect(index.ready).toBe(true);

      // Known at start (the registry's first list) and down: attempted, none synced → not ready.
      index.add(down, { gatesReadiness: true });
      await until(() => attempted(index, "down"), 5_000, "the first list of the cluster that is down");
      expect(index.ready).toBe(false);
      expect(lookup(index, "down")).toBe("503");

      // Registered while serving and up: served, and a cluster served makes the replica ready.
      index.add(up, { gatesReadiness: false });
      await until(() => lookup(index, "up") === "found", 5_000, "the registered cluster to sync");
      expect(index.ready).toBe(true);

      // Removed: "no such cluster" (404 unknown-cluster), its watch stopped, the replica not ready again.
      const watchers = kube.watchers;
      index.remove("up");
      expect(lookup(index, "up")).toBe("no such cluster");
      await until(() => kube.watchers < watchers, 5_000, "the removed cluster's watch to end");
      expect(index.ready).toBe(false);

      // With the gating cluster gone, a new cluster that is down does not keep the replica out of service.
      index.remove("down");
      index.add(alsoDown, { gatesReadiness: false });
      await until(() => attempted(index, "also-down"), 5_000, "the first list of the other cluster that is down");
      expect(index.ready).toBe(true);
      expect(lookup(index, "also-down")).toBe("503");
      expect(index.sizes().map((s) => [s.clusterId, s.gatesReadiness])).toEqual([["also-down", false]]);
    } finally {
      await index.stop();
    }
  }, 30_000);

  it("a cluster added again (its registration changed) is watched anew: unsynced until the new watch lists", async () => {
    const index = new InstallationIndex([up], { logger: pino({ level: "silent" }) });
    await index.start();
    try {
      expect(lookup(index, "up")).toBe("found");
      index.add(up, { gatesReadiness: false });
      expect(lookup(index, "up")).toBe("503");
      await until(() => lookup(index, "up") === "found", 5_000, "the new watch to sync");
    } finally {
      await index.stop();
    }
  }, 15_000);
});
