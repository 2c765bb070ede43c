/**
 * The proving watch's cycle on a quiet resource (issue 52's gate, found by
 * test/kube-fleet/clusters.isolation.process.test.ts): each watch ends cleanly at its timeoutSeconds,
 * and an API server promises no bookmark (the cacher sends none before its watch cache has seen an
 * event). client-node's ListWatch waits before every reconnect that follows a watch with no event —
 * 1 s doubling — so the cycle stretched to 3 + 8 s and more and a healthy cluster's installation
 * index fell out of its freshness bound, its PluginTokens answering 503 for part of every cycle.
 * The REAL index and client-node talk to the wire-level fake, which sends no bookmark unless told.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { EARLY_END_PAUSE_MS } from "../../src/kube-watch/change-feed-watch.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";

/** Above a cycle (3 s watch + a quorum read) with a loaded machine's slack, below a 1 s + 2 s + 4 s backoff's cycle. */
const BOUND_MS = 5_000;
/** Long enough for ListWatch's fourth reconnect (after 1, 2 and 4 s of waiting): proofs at 0, 3, 7, 12 and 19 s. */
const OBSERVE_MS = 22_000;

let dir: string;
let kube: FakeKubeApi;
let index: InstallationIndex;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-proving-cycle-"));
  kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  const clusters = await Clusters.load([{ id: ids.cluster, kubeconfig: kube.writeKubeconfig(dir) }]);
  index = new InstallationIndex(clusters.all(), { logger: pino({ level: "silent" }), freshnessBoundMs: BOUND_MS });
  void index.start();
});

afterAll(async () => {
  await index?.stop();
  await kube?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function refusal(): string | undefined {
  try {
    index.byUid(ids.cluster, ids.installation);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

it("a quiet resource on a server that sends no bookmark: each watch is reopened at once after its clean end, and the index stays proven within its bound", async () => {
  expect(kube.bookmarkIntervalMs).toBeUndefined();
  await until(() => refusal() === undefined, 10_000, "the index to be synced and proven");
  const watches = () => kube.requests.filter((r) => r.url.includes("/plugininstallations") && r.url.includes("watch=true")).length;
  const watchesBefore = watches();
  const refusals = new Set<string>();
  let worstLagSeconds = 0;
  for (const end = performance.now() + OBSERVE_MS; performance.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    const why = refusal();
    if (why !== undefined) refusals.add(why.replace(/\d+ ms ago/, "… ms ago"));
    worstLagSeconds = Math.max(worstLagSeconds, index.sizes()[0]?.provenLagSeconds ?? Number.POSITIVE_INFINITY);
  }
  const opened = watches() - watchesBefore;
  console.log(`proving cycle, quiet resource, no bookmarks: ${opened} watches in ${OBSERVE_MS} ms, worst proven lag ${worstLagSeconds.toFixed(2)} s (bound ${BOUND_MS / 1_000} s)`);
  expect([...refusals]).toEqual([]);
  expect(worstLagSeconds).toBeLessThan(BOUND_MS / 1_000);
  // One watch per ~3 s cycle (at least 5 in 22 s; with the backoff it was 4).
  expect(opened).toBeGreaterThanOrEqual(5);
}, OBSERVE_MS + 30_000);

it("a server that ends every watch at once (shutting down) is not hammered: one watch per EARLY_END_PAUSE_MS at most", async () => {
  await until(() => refusal() === undefined, 10_000, "the index to be synced and proven");
  const watches = () => kube.requests.filter((r) => r.url.includes("/plugininstallations") && r.url.includes("watch=true")).length;
  const watchesBefore = watches();
  const started = performance.now();
  while (performance.now() - started < 5_000) {
    kube.endWatches();
    await new Promise((r) => setTimeout(r, 10));
  }
  const opened = watches() - watchesBefore;
  console.log(`every watch ended at once: ${opened} watches in 5000 ms`);
  // The first reconnect is immediate (ListWatch's own), each later one paused EARLY_END_PAUSE_MS.
  expect(opened).toBeLessThanOrEqual(5_000 / EARLY_END_PAUSE_MS + 2);
  expect(opened).toBeGreaterThanOrEqual(2);
}, 30_000);
