/**
 * The freshness proof of a change feed (src/kube-watch/change-feed-watch.ts), with a fake watch and a
 * clock the test moves: a list proves its send time, a watch the server ended cleanly no sooner than
 * its timeout proves its send time less the watch cache's margin, and nothing else proves anything —
 * a stalled watch, an error, an ERROR event, an early end, a handler that failed, no list yet.
 */
import type { KubernetesObject } from "#kubernetes-client";
import pino from "pino";
import { describe, expect, it } from "vitest";
import {
  CACHE_LAG_MARGIN_MS,
  ChangeFeedWatch,
  type FeedHandlers,
  FreshnessProof,
  WATCH_TIMEOUT_SECONDS,
  type WatchConnect,
  type WatchOutcome,
} from "../../src/kube-watch/change-feed-watch.ts";
import type { Cluster } from "../../src/kube-fleet/clusters.ts";

const T_MS = WATCH_TIMEOUT_SECONDS * 1_000;

describe("FreshnessProof", () => {
  const ended = (sentAt: number, endedAt: number): WatchOutcome => ({ kind: "ended", sentAt, endedAt });
  it.each([
    { name: "nothing yet", steps: [], proven: undefined, detail: "not listed yet" },
    { name: "a list proves its send time", steps: [{ list: 100 }], proven: 100, detail: undefined },
    { name: "a watch ended at its timeout proves its send time less the margin", steps: [{ list: 100 }, { watch: ended(5_000, 5_000 + T_MS) }], proven: 5_000 - CACHE_LAG_MARGIN_MS, detail: undefined },
    { name: "a watch ended early proves nothing", steps: [{ list: 100 }, { watch: ended(5_000, 5_000 + T_MS - 1) }], proven: 100, detail: "the API server ended a watch before its timeout" },
    { name: "a failed watch proves nothing", steps: [{ list: 100 }, { watch: { kind: "failed", detail: "boom" } as WatchOutcome }], proven: 100, detail: "boom" },
    { name: "a 410 proves nothing", steps: [{ list: 100 }, { watch: { kind: "gone" } as WatchOutcome }], proven: 100, detail: "the watch's history is gone (410); listing again" },
    { name: "a watch before any list proves nothing", steps: [{ failed: "list refused" }], proven: undefined, detail: "list refused" },
    { name: "never moves back", steps: [{ list: 9_000 }, { watch: ended(5_000, 5_000 + T_MS) }], proven: 9_000, detail: undefined },
    { name: "a success after a failure clears the detail", steps: [{ list: 100 }, { failed: "x" }, { watch: ended(2_000, 2_000 + T_MS) }], proven: 2_000 - CACHE_LAG_MARGIN_MS, detail: undefined },
  ] as Array<{ name: string; steps: Array<{ list?: number; watch?: WatchOutcome; failed?: string }>; proven: number | undefined; detail: string | undefined }>)(
    "$name",
    ({ steps, proven, detail }) => {
      const proof = new FreshnessProof();
      for (const step of steps) {
        if (step.list !== undefined) proof.listed(step.list);
        if (step.watch !== undefined) proof.watched(step.watch);
        if (step.failed !== undefined) proof.failed(step.failed);
      }
      expect(proof.provenUntil).toBe(proven);
      expect(proof.detail).toBe(detail);
    },
  );
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
function fakeFeed(options: { list?: () => Promise<unknown> } = {}) {
  let now = 1_000;
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
  it("proves nothing before its list, its list's send time after, and each watch's send time less the margin at its clean end", async () => {
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
    expect(w.params).toEqual({ resourceVersion: "10", timeoutSeconds: WATCH_TIMEOUT_SECONDS });
    for (let i = 0; i < 3; i += 1) {
      const sentAt = f.now();
      f.advance(T_MS + 20);
      w.done(null);
      const next = await f.latest();
      expect(next).not.toBe(w);
      expect(f.feed.provenUntil()).toBe(sentAt - CACHE_LAG_MARGIN_MS);
      expect(f.feed.state()).toMatchObject({ synced: true, lagSeconds: (T_MS + 20 + CACHE_LAG_MARGIN_MS) / 1_000 });
      w = next;
    }
    await f.feed.stop();
  });

  it("applies each event, and opens the next watch from the last version applied", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    w.event("ADDED", { metadata: { name: "b", resourceVersion: "11", managedFields: [{}] } });
    w.event("DELETED", { metadata: { name: "a", resourceVersion: "12" } });
    f.advance(T_MS);
    w.done(null);
    expect((await f.latest()).params).toEqual({ resourceVersion: "12", timeoutSeconds: WATCH_TIMEOUT_SECONDS });
    expect(f.heard).toEqual(["listed 1", "ADDED b", "DELETED a"]);
    await f.feed.stop();
  });

  it("a stalled watch (no end, no byte) stops the proof; its abort says so and the next watch proves again", async () => {
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
    const sentAt = f.now();
    f.advance(T_MS);
    next.done(null);
    await f.latest();
    expect(f.feed.provenUntil()).toBe(sentAt - CACHE_LAG_MARGIN_MS);
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

  it("an ERROR event ends the watch without a proof even though the server then closes it cleanly", async () => {
    const f = fakeFeed();
    f.feed.start();
    const w = await f.latest();
    const proven = f.feed.provenUntil();
    expect(proven).toBe(1_000);
    w.event("ERROR", { kind: "Status", code: 500, reason: "InternalError", message: "internal error" });
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

  it("a watch the server ends before its timeout proves nothing", async () => {
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
    w.event("MODIFIED", { metadata: { name: "a", resourceVersion: "11" } });
    await flush();
    expect(w.aborted()).toBe(true);
    const next = await f.latest();
    expect(next.params["resourceVersion"]).toBe("10");
    expect(f.feed.provenUntil()).toBe(proven);
    expect(f.feed.state().detail).toBe("applying a clusterroles event failed: Error");
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
