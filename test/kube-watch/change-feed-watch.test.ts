/**
 * The freshness proof of a change feed (src/kube-watch/change-feed-watch.ts), with a fake quorum read and
 * watch and a clock the test moves: a list proves its send time, a quorum read's send time is proven
 * once the watch delivers an event or a bookmark at or past the read's resourceVersion, and nothing
 * else proves anything — a watch's clean end (the server cuts a backlog at its timeout), a stalled
 * watch, an error, an ERROR event, an early end, a handler that failed, no list yet.
 */
import type { KubernetesObject } from "#kubernetes-client";
import pino from "pino";
import { describe, expect, it } from "vitest";
import {
  ChangeFeedWatch,
  type FeedHandlers,
  FreshnessProof,
  NOT_PROVING_MS,
  revisionOf,
  WATCH_TIMEOUT_SECONDS,
  type WatchConnect,
  type WatchOutcome,
} from "../../src/kube-watch/change-feed-watch.ts";
import type { Cluster } from "../../src/kube-fleet/clusters.ts";

const T_MS = WATCH_TIMEOUT_SECONDS * 1_000;
const WATCH_PARAMS = (resourceVersion: string) => ({ resourceVersion, timeoutSeconds: WATCH_TIMEOUT_SECONDS, allowWatchBookmarks: true });

describe("revisionOf", () => {
  it.each([
    { input: "1", expected: 1n },
    { input: "9223372036854775807", expected: 9223372036854775807n },
    { input: "9223372036854775808", expected: undefined },
    { input: "0", expected: undefined },
    { input: "012", expected: undefined },
    { input: "-5", expected: undefined },
    { input: "12a", expected: undefined },
    { input: "", expected: undefined },
    { input: undefined, expected: undefined },
  ])("$input → $expected", ({ input, expected }) => {
    expect(revisionOf(input)).toBe(expected);
  });
});

describe("FreshnessProof", () => {
  const ended: WatchOutcome = { kind: "ended", early: false };
  type Step = { list?: number; asked?: [number, string]; reached?: string; watch?: WatchOutcome; failed?: string };
  it.each([
    { name: "nothing yet", steps: [], proven: undefined, detail: "not listed yet" },
    { name: "a list proves its send time", steps: [{ list: 100 }], proven: 100, detail: undefined },
    { name: "a quorum read alone proves nothing", steps: [{ list: 100 }, { asked: [5_000, "20"] }], proven: 100, detail: undefined },
    { name: "an event or bookmark at the read's version proves its send time", steps: [{ list: 100 }, { asked: [5_000, "20"] }, { reached: "20" }], proven: 5_000, detail: undefined },
    { name: "one past it too", steps: [{ list: 100 }, { asked: [5_000, "20"] }, { reached: "21" }], proven: 5_000, detail: undefined },
    { name: "one short of it proves nothing", steps: [{ list: 100 }, { asked: [5_000, "20"] }, { reached: "19" }], proven: 100, detail: undefined },
    { name: "a clean end at the timeout proves nothing (a backlog cut)", steps: [{ list: 100 }, { asked: [5_000, "20"] }, { reached: "15" }, { watch: ended }], proven: 100, detail: undefined },
    { name: "a delivery proves the newest read it reaches", steps: [{ list: 100 }, { asked: [2_000, "20"] }, { asked: [3_000, "30"] }, { reached: "25" }], proven: 2_000, detail: undefined },
    { name: "and a later one the next", steps: [{ list: 100 }, { asked: [2_000, "20"] }, { asked: [3_000, "30"] }, { reached: "25" }, { reached: "30" }], proven: 3_000, detail: undefined },
    { name: "revisions compare as numbers, not as strings", steps: [{ list: 100 }, { asked: [2_000, "9"] }, { reached: "10" }], proven: 2_000, detail: undefined },
    { name: "a read of no etcd revision proves nothing, and says so", steps: [{ list: 100 }, { asked: [2_000, "abc"] }, { reached: "99" }], proven: 100, detail: "a quorum read's resourceVersion is not an etcd revision: nothing can be proven" },
    { name: "a delivery of no etcd revision proves nothing", steps: [{ list: 100 }, { asked: [2_000, "5"] }, { reached: "x" }], proven: 100, detail: undefined },
    { name: "a read no newer than what was delivered proves at once (no bookmark would come)", steps: [{ list: 100 }, { reached: "20" }, { asked: [5_000, "20"] }], proven: 5_000, detail: undefined },
    { name: "a read no newer than the list's version proves at once", steps: [{ list: 100 }, { asked: [5_000, "1"] }], proven: 5_000, detail: undefined },
    { name: "a list drops the reads it covers", steps: [{ list: 100 }, { asked: [2_000, "20"] }, { list: 3_000 }, { reached: "20" }], proven: 3_000, detail: undefined },
    { name: "a watch ended early says so", steps: [{ list: 100 }, { watch: { kind: "ended", early: true } }], proven: 100, detail: "the API server ended a watch before its timeout" },
    { name: "a failed watch says why", steps: [{ list: 100 }, { watch: { kind: "failed", detail: "boom" } }], proven: 100, detail: "boom" },
    { name: "a 410 says so", steps: [{ list: 100 }, { watch: { kind: "gone" } }], proven: 100, detail: "the watch's history is gone (410); listing again" },
    { name: "a failure before any list", steps: [{ failed: "list refused" }], proven: undefined, detail: "list refused" },
    { name: "never moves back", steps: [{ list: 9_000 }, { asked: [5_000, "20"] }, { reached: "20" }], proven: 9_000, detail: undefined },
    { name: "a proof after a failure clears the detail", steps: [{ list: 100 }, { failed: "x" }, { asked: [2_000, "20"] }, { reached: "20" }], proven: 2_000, detail: undefined },
  ] as Array<{ name: string; steps: Step[]; proven: number | undefined; detail: string | undefined }>)("$name", ({ steps, proven, detail }) => {
    const proof = new FreshnessProof();
    for (const step of steps) {
      if (step.list !== undefined) proof.listed(step.list, "1");
      if (step.asked !== undefined) proof.asked(...step.asked);
      if (step.reached !== undefined) proof.reached(step.reached);
      if (step.watch !== undefined) proof.watched(step.watch);
      if (step.failed !== undefined) proof.failed(step.failed);
    }
    expect(proof.provenUntil).toBe(proven);
    expect(proof.detailAt(proven ?? 0)).toBe(detail);
  });

  it("says it proves nothing once no proof came for NOT_PROVING_MS, and stops saying so at the next", () => {
    const proof = new FreshnessProof();
    proof.listed(100, "1");
    expect(proof.detailAt(100 + NOT_PROVING_MS)).toBeUndefined();
    expect(proof.detailAt(101 + NOT_PROVING_MS)).toMatch(/^no event or bookmark reached a quorum read's resourceVersion within 10 s/);
    proof.asked(100 + NOT_PROVING_MS, "7");
    proof.reached("7");
    expect(proof.detailAt(101 + NOT_PROVING_MS)).toBeUndefined();
  });
});

interface OpenWatch {
  readonly params: Record<string, unknown>;
  readonly event: (type: string, obj: unknown) => void;
  readonly done: (err: unknown) => void;
  readonly aborted: () => boolean;
}

const flush = async () => {
  for (let i = 0; i < 10; i += 1) await new Promise((resolve) => setImmediate(resolve));
};

/** A feed on a fake cluster, list and watch, with a clock the test moves and everything it was told. */
function fakeFeed(options: { list?: () => Promise<unknown>; quorumRead?: () => Promise<string | undefined> } = {}) {
  let now = 1_000;
  /** What a quorum read answers: etcd's current revision, one past the list's (something else was written since). */
  let revision = "11";
  let reads = 0;
  const watches: OpenWatch[] = [];
  const heard: string[] = [];
  const warnings: string[] = [];
  let listed = 0;
  let failHandler = false;
  /** Watches latest() has handed out. */
  let returned = 0;
  const connect: WatchConnect = async (_path, params, callback, done) => {
    const controller = new AbortController();
    let finished = false;
    watches.push({
      params,
      event: (type, obj) => callback(type, obj, { type, object: obj }),
      done: (err) => {
        if (!finished) {
          finished = true;
          done(err);
        }
      },
      aborted: () => controller.signal.aborted,
    });
    controller.signal.addEventListener("abort", () => {
      if (!finished) {
        finished = true;
        done(new DOMException("aborted", "AbortError"));
      }
    });
    return controller;
  };
  const handlers: FeedHandlers<KubernetesObject> = {
    listed: (objects, relist) => heard.push(`${relist ? "relisted" : "listed"} ${objects.length}`),
    changed: (type, obj) => {
      if (failHandler) throw new Error("cache gone");
      heard.push(`${type} ${obj.metadata?.name}`);
    },
  };
  const logger = pino({ level: "info" }, { write: (line: string) => void warnings.push((JSON.parse(line) as { msg: string; detail?: string }).detail ?? (JSON.parse(line) as { msg: string }).msg) });
  const feed = new ChangeFeedWatch(
    { id: "c", callOptions: () => ({}) } as unknown as Cluster,
    {
      plural: "clusterroles",
      path: "/apis/rbac.authorization.k8s.io/v1/clusterroles",
      lister: () => async () => {
        listed += 1;
        if (options.list !== undefined) return (await options.list()) as never;
        return { metadata: { resourceVersion: "10" }, items: [{ metadata: { name: "a", resourceVersion: "9" } }] };
      },
      quorumRead: () => async () => {
        reads += 1;
        return options.quorumRead === undefined ? revision : options.quorumRead();
      },
    },
    handlers,
    { logger, source: "kube-rbac", now: () => now, connect, initialBackoffMs: 1, maxBackoffMs: 1 },
  );
  return {
    feed,
    watches,
    heard,
    warnings,
    lists: () => listed,
    reads: () => reads,
    /** Commits a change elsewhere: etcd's revision moves on. */
    commit: (to: string) => (revision = to),
    advance: (ms: number) => (now += ms),
    now: () => now,
    failHandlers: () => (failHandler = true),
    /** The next watch the feed opens (after a backoff of a millisecond, perhaps). */
    async latest(): Promise<OpenWatch> {
      for (const deadline = Date.now() + 1_000; watches.length <= returned && Date.now() < deadline; ) {
        await flush();
        if (watches.length <= returned) await new Promise((resolve) => setTimeout(resolve, 1));
      }
      returned = watches.length;
      const w = watches.at(-1);
      if (w === undefined) throw new Error("no watch opened");
      return w;
    },
  };
}

describe("ChangeFeedWatch", () => {
  it("proves its list's send time, then each quorum read's send time once the watch delivers a bookmark at or past its version", async () => {
    let releaseList: (() => void) | undefined;
    const f = fakeFeed({ list: () => new Promise((resolve) => (releaseList = () => resolve({ metadata: { resourceVersion: "10" }, items: [] }))) });
    f.feed.start();
    await flush();
    expect(f.feed.provenUntil()).toBeUndefined();
    expect(f.feed.state()).toEqual({ synced: false, detail: "not listed yet" });
    const listSentAt = f.now();
    f.advance(300);
    releaseList!();
    let w = await f.latest();
    expect(f.feed.provenUntil()).toBe(listSentAt);
    expect(w.params).toEqual(WATCH_PARAMS("10"));
    let read = "11";
    for (let i = 0; i < 3; i += 1) {
      // This cycle's quorum read was made just before its watch opened, at etcd's revision then.
      const readAt = f.now();
      expect(f.reads()).toBe(i + 1);
      f.advance(1_000);
      w.event("BOOKMARK", { kind: "ClusterRole", metadata: { resourceVersion: String(Number(read) - 1) } });
      expect(f.feed.provenUntil()).toBeLessThan(readAt);
      w.event("BOOKMARK", { kind: "ClusterRole", metadata: { resourceVersion: read } });
      expect(f.feed.provenUntil()).toBe(readAt);
      expect(f.feed.state()).toEqual({ synced: true, lagSeconds: 1 });
      const delivered = read;
      read = String(20 + i * 10);
      f.commit(read);
      f.advance(T_MS - 1_000);
      w.done(null);
      w = await f.latest();
      // From the last bookmark delivered.
      expect(w.params).toEqual(WATCH_PARAMS(delivered));
    }
    await f.feed.stop();
  });

  it("nothing committed since what was applied: the read proves at once, with no bookmark (none would come)", async () => {
    const f = fakeFeed();
    f.commit("10");
    f.feed.start();
    let w = await f.latest();
    f.advance(T_MS);
    w.done(null);
    w = await f.latest();
    expect(f.feed.provenUntil()).toBe(f.now());
    await f.feed.stop();
  });

  it("a backlog the server cuts at the timeout: the clean end proves nothing, the event at the read's version does", async () => {
    const f = fakeFeed();
    f.commit("50");
    f.feed.start();
    let w = await f.latest();
    const listedAt = f.feed.provenUntil();
    for (const rv of ["20", "30", "40"]) w.event("MODIFIED", { metadata: { name: "bulk", resourceVersion: rv } });
    f.advance(T_MS);
    w.done(null);
    w = await f.latest();
    const readAt = f.now();
    expect(f.feed.provenUntil()).toBe(listedAt);
    expect(w.params).toEqual(WATCH_PARAMS("40"));
    w.event("DELETED", { metadata: { name: "read-pods", resourceVersion: "50" } });
    expect(f.feed.provenUntil()).toBe(readAt);
    expect(f.heard).toEqual(["listed 1", "MODIFIED bulk", "MODIFIED bulk", "MODIFIED bulk", "DELETED read-pods"]);
    await f.feed.stop();
  });

  it("applies each event, and opens the next watch from the last version delivered, a bookmark's too", async () => {
    const f = fakeFeed();
    f.feed.start();
    let w = await f.latest();
    w.event("ADDED", { metadata: { name: "b", resourceVersion: "11", managedFields: [{}] } });
    w.event("DELETED", { metadata: { name: "a", resourceVersion: "12" } });
    f.advance(T_MS);
    w.done(null);
    w = await f.latest();
    expect(w.params).toEqual(WATCH_PARAMS("12"));
    w.event("BOOKMARK", { metadata: { resourceVersion: "15" } });
    f.advance(T_MS);
    w.done(null);
    expect((await f.latest()).params).toEqual(WATCH_PARAMS("15"));
    expect(f.heard).toEqual(["listed 1", "ADDED b", "DELETED a"]);
    await f.feed.stop();
  });

  it("a stalled watch (no end, no byte) stops the proof; its abort says so and the next delivery proves again", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    const proven = f.feed.provenUntil();
    f.advance(30_000);
    await flush();
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state().lagSeconds).toBeGreaterThanOrEqual(30);
    // client-node's own inactivity timeout (T + STALL_GRACE_MS) ends it.
    w.done(new DOMException("The operation was aborted due to timeout", "TimeoutError"));
    const next = await f.latest();
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state()).toMatchObject({ synced: false, detail: expect.stringMatching(/^a watch of clusterroles stalled/) });
    next.event("BOOKMARK", { metadata: { resourceVersion: "11" } });
    expect(f.feed.provenUntil()).toBe(f.now());
    expect(f.feed.state().synced).toBe(true);
    await f.feed.stop();
  });

  it.each([
    { name: "a 403", err: Object.assign(new Error("Forbidden"), { statusCode: 403 }), detail: "forbidden: the credential cannot watch clusterroles" },
    { name: "a connection refused", err: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6443"), { code: "ECONNREFUSED", syscall: "connect" }), detail: "watch clusterroles failed: Error ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:6443" },
  ])("an error ($name) stops the proof, is retried from the same version, and is logged once", async ({ err, detail }) => {
    const f = fakeFeed();
    f.feed.start();
    let w = await f.latest();
    const proven = f.feed.provenUntil();
    expect(proven).toBe(1_000);
    for (let i = 0; i < 3; i += 1) {
      f.advance(T_MS);
      w.done(err);
      w = await f.latest();
    }
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state()).toMatchObject({ synced: false, detail });
    expect(w.params["resourceVersion"]).toBe("10");
    expect(f.lists()).toBe(1);
    expect(f.warnings.filter((line) => line === detail)).toHaveLength(1);
    await f.feed.stop();
  });

  it("a quorum read the credential may not make: no watch, no proof, 'forbidden' said once, retried", async () => {
    const f = fakeFeed({ quorumRead: () => Promise.reject(Object.assign(new Error("HTTP-Code: 403"), { code: 403, body: "{}", headers: {} })) });
    f.feed.start();
    await flush();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(f.reads()).toBeGreaterThan(1);
    expect(f.watches).toHaveLength(0);
    expect(f.feed.provenUntil()).toBe(1_000);
    expect(f.feed.state()).toMatchObject({ synced: false, detail: "forbidden: the credential cannot list clusterroles" });
    expect(f.warnings).toEqual(["forbidden: the credential cannot list clusterroles"]);
    await f.feed.stop();
  });

  it("an ERROR event ends the watch without a proof even though a bookmark past the read follows", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    const proven = f.feed.provenUntil();
    expect(proven).toBe(1_000);
    f.advance(500);
    w.event("ERROR", { kind: "Status", code: 500, reason: "InternalError", message: "internal error" });
    w.event("BOOKMARK", { metadata: { resourceVersion: "99" } });
    f.advance(T_MS);
    w.done(null);
    await f.latest();
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state()).toMatchObject({ synced: false, detail: "watch clusterroles failed: an ERROR event (500 InternalError)" });
    await f.feed.stop();
  });

  it.each([
    { name: "an ERROR event with a 410 Status", end: (w: OpenWatch) => (w.event("ERROR", { kind: "Status", code: 410 }), w.done(null)) },
    { name: "a 410 answer to the watch request", end: (w: OpenWatch) => w.done(Object.assign(new Error("Gone"), { statusCode: 410 })) },
  ])("$name lists again, as a relist", async ({ end }) => {
    const f = fakeFeed();
    f.feed.start();
    end(await f.latest());
    await f.latest();
    expect(f.lists()).toBe(2);
    expect(f.heard).toEqual(["listed 1", "relisted 1"]);
    await f.feed.stop();
  });

  it("a watch the server ends before its timeout says so", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    const proven = f.feed.provenUntil();
    expect(proven).toBe(1_000);
    f.advance(T_MS - 1);
    w.done(null);
    await flush();
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state().detail).toBe("the API server ended a watch before its timeout");
    await f.feed.stop();
  });

  it("a handler that throws fails its watch: no proof, the watch aborted, its version not passed", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    const proven = f.feed.provenUntil();
    expect(proven).toBe(1_000);
    f.failHandlers();
    f.advance(100);
    w.event("MODIFIED", { metadata: { name: "a", resourceVersion: "11" } });
    await flush();
    expect(w.aborted()).toBe(true);
    const next = await f.latest();
    expect(next.params["resourceVersion"]).toBe("10");
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state().detail).toBe("applying a clusterroles event failed: Error");
    await f.feed.stop();
  });

  it("a quiet resource whose bookmarks never reach a read: unsynced past NOT_PROVING_MS, said once", async () => {
    const f = fakeFeed();
    f.commit("20");
    f.feed.start();
    let w = await f.latest();
    for (let elapsed = 0; elapsed <= NOT_PROVING_MS; elapsed += T_MS) {
      w.event("BOOKMARK", { metadata: { resourceVersion: "10" } });
      f.advance(T_MS);
      w.done(null);
      w = await f.latest();
    }
    expect(f.feed.provenUntil()).toBe(1_000);
    expect(f.feed.state()).toMatchObject({ synced: false, detail: expect.stringMatching(/^no event or bookmark reached a quorum read's resourceVersion/) });
    f.advance(T_MS);
    w.done(null);
    w = await f.latest();
    expect(f.warnings.filter((line) => line.startsWith("no event or bookmark"))).toHaveLength(1);
    w.event("BOOKMARK", { metadata: { resourceVersion: "20" } });
    expect(f.feed.state().synced).toBe(true);
    await f.feed.stop();
  });

  it("a list the credential may not make: never proven, 'forbidden' said once, retried", async () => {
    const f = fakeFeed({ list: () => Promise.reject(Object.assign(new Error("HTTP-Code: 403"), { code: 403, body: "{}", headers: {} })) });
    f.feed.start();
    await flush();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(f.lists()).toBeGreaterThan(1);
    expect(f.feed.provenUntil()).toBeUndefined();
    expect(f.feed.state()).toEqual({ synced: false, detail: "forbidden: the credential cannot list clusterroles" });
    expect(f.warnings).toEqual(["forbidden: the credential cannot list clusterroles"]);
    expect(f.watches).toHaveLength(0);
    await f.feed.stop();
  });

  it("stop() ends the watch in flight and calls no handler after", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    await f.feed.stop();
    expect(w.aborted()).toBe(true);
    w.event("ADDED", { metadata: { name: "late", resourceVersion: "20" } });
    expect(f.heard).toEqual(["listed 1"]);
  });
});
