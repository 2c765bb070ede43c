/**
 * A watch that stops talking without an error (issue 11): an API server that accepts connections
 * and never answers, a stream that goes quiet after some events, a server that ends the watch and
 * then stalls. client-node's ListWatch reconnects from such ends without an error, so the index
 * must notice by itself: past the inactivity bound it is unsynced and the cluster's checks answer
 * 503 dependency-unavailable until a list succeeds again. A quiet but healthy watch, which hears
 * bookmarks, stays synced. The REAL index and client-node talk to the wire-level fake.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "../support/wire-fakes/openfga.ts";
import { until, wiredConfig } from "../support/wire-fakes/wired.ts";
import { ids, PINNED_HASH, pluginToken } from "../support/tokens.ts";

const INACTIVITY_MS = 1_000;
const BOOKMARK_MS = 100;
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let dir: string;
let kube: FakeKubeApi;
let openfga: FakeOpenFga;
let ports: ConnectedPorts;
let index: InstallationIndex;
let server: TestServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-watch-silence-"));
  openfga = await new FakeOpenFga().start();
  kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  const kubeconfig = kube.writeKubeconfig(dir);
  // Generous deadlines: only the index may make a check fail here, never a slow machine.
  const config = wiredConfig(openfga, kubeconfig, {
    check: { timeoutMs: 5_000, retryAfterSeconds: 1 },
    openfga: { apiUrl: openfga.url, storeId: openfga.storeId, timeoutMs: 2_000, allowTtlMs: 1, denyTtlMs: 1 },
    kube: { sar: { timeoutMs: 2_000, allowTtlMs: 1, denyTtlMs: 1 }, tokenRequest: { timeoutMs: 2_000 } },
  });
  ports = await connectPorts(config, pino({ level: "silent" }));
  // Only the index under test talks to the fake's list and watch (the app's pools stay open for
  // the reviews and token requests).
  await (ports.installations as InstallationIndex).stop();
  const clusters = await Clusters.load([{ id: ids.cluster, kubeconfig }]);
  // The index under test, with a bound short enough for a test; the server asks it, not the app's.
  index = new InstallationIndex(clusters.all(), { logger: pino({ level: "silent" }), inactivityMs: INACTIVITY_MS, initialBackoffMs: 50, maxBackoffMs: 200 });
  void index.start();
  server = await startTestServer({ ...ports, installations: index }, config);
});

afterAll(async () => {
  await server?.stop();
  await index?.stop();
  await Promise.all([openfga?.stop(), kube?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  Object.assign(kube.faults, { sar: "healthy", tokenRequest: "healthy", list: "healthy", watch: "healthy" });
  kube.watchesSilent = false;
  kube.bookmarkIntervalMs = BOOKMARK_MS;
  kube.endWatches();
  // The watch ended above is listed again in place and reconnected (with bookmarks) before a test starts.
  await until(() => answers() && kube.watchers > 0, 5_000, "the index to be synced and watching");
});

function answers(): boolean {
  try {
    index.byUid(ids.cluster, ids.installation);
    return true;
  } catch {
    return false;
  }
}

async function pluginCheck() {
  return server.check({ path: PODS, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Drops every connection (hung ones included) and listens again: the server is healthy from here. */
async function heal(): Promise<void> {
  Object.assign(kube.faults, { list: "healthy", watch: "healthy" });
  kube.watchesSilent = false;
  await kube.down();
  await kube.up();
}

describe("a watch that stops talking", () => {
  it("asks for bookmarks, and a quiet watch that hears them stays synced well past the bound", async () => {
    // The PluginInstallation index's requests (the clusters' change feeds list and watch other resources).
    const indexRequests = () => kube.requests.filter((r) => r.url.includes("/plugininstallations"));
    const watchUrls = indexRequests().filter((r) => r.url.includes("watch=true")).map((r) => new URL(r.url, "http://x"));
    expect(watchUrls.length).toBeGreaterThan(0);
    expect(watchUrls.every((u) => u.searchParams.get("allowWatchBookmarks") === "true")).toBe(true);
    const lists = indexRequests().filter((r) => r.method === "GET" && !r.url.includes("watch=true")).length;
    for (let elapsed = 0; elapsed < INACTIVITY_MS * 4; elapsed += 50) {
      expect(answers()).toBe(true);
      await sleep(50);
    }
    expect(await pluginCheck()).toMatchObject({ allowed: true });
    // No relist either: bookmarks alone kept the one watch alive.
    expect(indexRequests().filter((r) => r.method === "GET" && !r.url.includes("watch=true")).length).toBe(lists);
  });

  it("a quiet watch on a server that sends no bookmarks is listed again in place before the bound, and stays synced", async () => {
    kube.bookmarkIntervalMs = undefined;
    kube.endWatches();
    const lists = () => kube.requests.filter((r) => r.method === "GET" && r.url.startsWith("/apis/") && !r.url.includes("watch=true")).length;
    const listsBefore = lists();
    for (let elapsed = 0; elapsed < INACTIVITY_MS * 3; elapsed += 5) {
      expect(answers()).toBe(true);
      await sleep(5);
    }
    // One list about every two thirds of the bound: each a sign of life.
    expect(lists() - listsBefore).toBeGreaterThanOrEqual(3);
    expect(await pluginCheck()).toMatchObject({ allowed: true });
  });

  it("a watch the server ends is followed by a list in place: synced throughout, and what was deleted meanwhile is gone", async () => {
    kube.put({ uid: ids.otherInstallation, name: "grafana", definitionHash: PINNED_HASH });
    await until(() => index.byUid(ids.cluster, ids.otherInstallation) !== undefined, 2_000, "grafana to be indexed");
    const lists = () => kube.requests.filter((r) => r.method === "GET" && r.url.startsWith("/apis/") && !r.url.includes("watch=true")).length;
    const listsBefore = lists();
    await until(() => kube.watchers > 0, 2_000, "the watch to be connected");
    // Deleted without an event: only a list can notice.
    kube.removeSilently(ids.otherInstallation);
    kube.endWatches();
    for (let elapsed = 0; elapsed < 500; elapsed += 10) {
      expect(answers()).toBe(true);
      await sleep(10);
    }
    expect(lists()).toBeGreaterThan(listsBefore);
    expect(index.byUid(ids.cluster, ids.otherInstallation)).toBeUndefined();
    expect(await pluginCheck()).toMatchObject({ allowed: true });
  });

  it.each([
    {
      name: "the stream goes silent after some events, and every new request hangs",
      stall: () => {
        kube.put({ uid: ids.otherInstallation, name: "grafana", definitionHash: PINNED_HASH });
        kube.watchesSilent = true;
        Object.assign(kube.faults, { list: "hang", watch: "hang" });
      },
    },
    {
      name: "the server ends the watch cleanly, then accepts the reconnect and never answers",
      stall: () => {
        Object.assign(kube.faults, { list: "hang", watch: "hang" });
        kube.endWatches();
      },
    },
    {
      name: "the server ends the watch cleanly, then lists but never answers the watch",
      stall: () => {
        kube.faults.watch = "hang";
        kube.endWatches();
      },
    },
  ])("$name: unsynced within the bound, 503 until a list succeeds again", async ({ stall }) => {
    const stalled = performance.now();
    stall();
    const noticedInMs = await until(() => !answers(), INACTIVITY_MS * 3, "the index to notice the stalled watch");
    expect(noticedInMs).toBeLessThan(INACTIVITY_MS * 2 + 500);
    // Stays unsynced while the server stays stalled: no answer is served from the frozen view.
    for (let elapsed = 0; elapsed < INACTIVITY_MS * 3; elapsed += 100) {
      expect(await pluginCheck()).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
      await sleep(100);
    }
    await heal();
    await until(async () => (await pluginCheck()).allowed, 5_000, "a relist to resync the index");
    expect(performance.now() - stalled).toBeGreaterThan(INACTIVITY_MS);
  });
});
