/**
 * A quiet, healthy cluster keeps its index synced, against a real kube-apiserver and the shipped API
 * server pool. The quietest watch there is: PluginInstallations on a cluster that has none yet, so
 * kube-apiserver's watch cache has seen no event for them and sends no bookmark either, with
 * kube.watch.inactivityMs raised to 150 s (allowed up to 24 h). Nothing of the index's may end that
 * watch before the bound's own probe (probeAfterMs: 130 s): for longer than a minute every lookup is
 * answered, no watch fails and nothing is listed again, unless kube-apiserver restarted its watch
 * cache, which ends every watch on it (support/real-index.ts apiserverCounts). (Until 2026-12-02 the
 * pool's undici bodyTimeout of 60 s ended such a watch with an error each minute: unsynced, 503s for
 * the cluster, a fresh list. At the default bound of 90 s the probe, then at 60 s, came first by a
 * few milliseconds.)
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { apiserverCounts, lookUpThroughout, type RealIndex, startRealIndex } from "./support/real-index.ts";

const INACTIVITY_MS = 150_000;
/** Past a minute of silence, and short of the probe. */
const QUIET_MS = 75_000;

let real: RealIndex;

beforeAll(async () => {
  real = await startRealIndex({ inactivityMs: INACTIVITY_MS });
}, 120_000);

afterAll(async () => {
  await real?.stop();
});

it("a watch silent for over a minute stays synced: every lookup answered, no failure, no list the API server did not cause", { timeout: QUIET_MS + 30_000 }, async () => {
  const { api, index } = real;
  expect(index.hasSynced).toBe(true);
  const before = await apiserverCounts(api, "plugininstallations");
  expect(before.LIST).toBeGreaterThan(0);
  expect(before.watchCacheStarts).toBeGreaterThan(0);
  const { answered, unanswered } = await lookUpThroughout(QUIET_MS, 100, () => expect(index.byUid("c", "no-such-installation")).toBeUndefined());
  expect(unanswered).toEqual([]);
  expect(answered).toBeGreaterThan(QUIET_MS / 200);
  expect(real.warnings()).toEqual([]);
  // A list again only where the API server ended the watch by restarting its watch cache, never of
  // the index's own doing. (Once in 17 CI runs a second list came without a warning; the cache's
  // restarts were not read then, and now are.)
  const after = await apiserverCounts(api, "plugininstallations");
  expect(after.LIST - before.LIST).toBeLessThanOrEqual(after.watchCacheStarts - before.watchCacheStarts);
});
