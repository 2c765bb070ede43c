/**
 * A quiet watch that hears kube-apiserver's bookmarks keeps its index synced without lists, at the
 * default silence bound, against a real kube-apiserver. Once its watch cache has seen an event,
 * kube-apiserver sends each watcher that asked for them a bookmark about once a minute (the cacher's
 * defaultBookmarkFrequency; 61.1 and 121.7 s after the watch started, measured here), so the
 * index's probe, which lists again in place after a silence, must not come before that bookmark.
 * Until 2026-12-03 it came 60 s after the last sign of life, racing a bookmark ~60.5 s after the one
 * before (and so this test passed or failed by a second): each lost race listed every installation
 * of a quiet cluster again, about every minute, from every replica.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { rawRequest } from "../harness/index.ts";
import { PINNED_HASH } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { apiserverCounts, lookUpThroughout, type RealIndex, startRealIndex } from "./support/real-index.ts";

/** Two bookmark periods and then some: any probe due before a bookmark would have listed twice. */
const QUIET_MS = 150_000;

let real: RealIndex;
let uid: string;

beforeAll(async () => {
  real = await startRealIndex();
  // An event the watch cache sees (an object it listed at its start is none): from here on it sends bookmarks.
  const created = await rawRequest(real.api, "POST", "/apis/plugins.fundament.io/v1/plugininstallations", {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name: "cert-manager" },
    spec: { organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03", definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH } },
  });
  expect(created.status).toBe(201);
  uid = (created.json as { metadata: { uid: string } }).metadata.uid;
  await until(() => real.index.byUid("c", uid) !== undefined, 10_000, "the watch to deliver the installation");
}, 120_000);

afterAll(async () => {
  await real?.stop();
});

it("at the default bound, bookmarks alone keep it synced: no list after the first the API server did not cause, every lookup answered", { timeout: QUIET_MS + 30_000 }, async () => {
  const { api, index } = real;
  expect(index.hasSynced).toBe(true);
  const before = await apiserverCounts(api, "plugininstallations");
  expect(before.LIST).toBeGreaterThan(0);
  expect(before.watchCacheStarts).toBeGreaterThan(0);
  const { unanswered } = await lookUpThroughout(QUIET_MS, 250, () => expect(index.byUid("c", uid)).toBeDefined());
  const after = await apiserverCounts(api, "plugininstallations");
  const cacheRestarts = after.watchCacheStarts - before.watchCacheStarts;
  expect(unanswered).toEqual([]);
  expect(real.warnings()).toEqual([]);
  // Only where the API server restarted its watch cache, which ends every watch on it (as in quiet-watch.kube.test.ts).
  expect(after.LIST - before.LIST).toBeLessThanOrEqual(cacheRestarts);
  expect(after.WATCH - before.WATCH).toBeLessThanOrEqual(cacheRestarts);
});
