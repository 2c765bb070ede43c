/**
 * A quiet, healthy cluster keeps its index synced, against a real kube-apiserver and the shipped API
 * server pool. The quietest watch there is: PluginInstallations on a cluster that has none yet, so
 * kube-apiserver's watch cache has seen no event for them and sends no bookmark either, with
 * kube.watch.inactivityMs raised to 150 s (allowed up to 24 h). Nothing may end that watch before
 * the bound's own probe (probeAfterMs: 130 s): for longer than a minute every lookup is answered,
 * no watch fails and nothing is listed again. (Until 2026-12-02 the pool's undici bodyTimeout of
 * 60 s ended such a watch with an error each minute: unsynced, 503s for the cluster, a fresh list.
 * At the default bound of 90 s the probe, then at 60 s, came first by a few milliseconds.)
 */
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Clusters } from "../../src/kube/clusters.ts";
import { InstallationIndex } from "../../src/kube/installation-index.ts";
import { CRD_FILES } from "../e2e/fundament-world.ts";
import { applyManifests, type KubeApiserver, startKubeApiserver } from "../harness/index.ts";
import { apiserverRequests } from "./support/apiserver-metrics.ts";

const INACTIVITY_MS = 150_000;
/** Past a minute of silence, and short of the probe. */
const QUIET_MS = 75_000;

let api: KubeApiserver;
let clusters: Clusters;
let index: InstallationIndex;
const warnings: string[] = [];

beforeAll(async () => {
  api = await startKubeApiserver();
  await applyManifests(api, CRD_FILES);
  clusters = await Clusters.load([{ id: "c", kubeconfig: api.kubeconfigPath }]);
  const logger = pino({ level: "warn" }, { write: (line: string) => void warnings.push(line) });
  index = new InstallationIndex(clusters.all(), { logger, inactivityMs: INACTIVITY_MS });
  await index.start();
}, 120_000);

afterAll(async () => {
  await index?.stop();
  await clusters?.close();
  await api?.stop();
});

it("a watch silent for over a minute stays synced: every lookup answered, no failure, no list", { timeout: QUIET_MS + 30_000 }, async () => {
  expect(index.hasSynced).toBe(true);
  const listsBefore = (await apiserverRequests(api, "plugininstallations")).LIST;
  expect(listsBefore).toBeGreaterThan(0);
  let lookups = 0;
  const unanswered: string[] = [];
  for (const started = Date.now(); Date.now() - started < QUIET_MS; await sleep(100)) {
    try {
      expect(index.byUid("c", "no-such-installation")).toBeUndefined();
      lookups++;
    } catch (err) {
      unanswered.push(`${Date.now() - started} ms: ${(err as Error).message}`);
    }
  }
  expect(unanswered).toEqual([]);
  expect(lookups).toBeGreaterThan(QUIET_MS / 200);
  expect(warnings.map((line) => (JSON.parse(line) as { msg: string }).msg)).toEqual([]);
  expect((await apiserverRequests(api, "plugininstallations")).LIST).toBe(listsBefore);
});
