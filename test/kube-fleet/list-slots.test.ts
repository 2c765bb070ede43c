/**
 * The process's bound on lists running at once (src/kube-fleet/list-slots.ts): the queue itself with a
 * fake list and frozen time, then the watched indexes listing through it against wire-level fake API
 * servers (one whose list hangs).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { FLEET_LIST_SLOTS, ListSlots, MAX_CONCURRENT_FLEET_LISTS } from "../../src/kube-fleet/list-slots.ts";
import { createMetrics } from "../../src/server/prometheus.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { until } from "../support/wire-fakes/wired.ts";

/** A list the test settles by hand, recording when it started and when its signal aborted. */
interface FakeList {
  readonly name: string;
  startedAt?: number;
  abortedAt?: number;
  signal?: AbortSignal;
  resolve(value: string): void;
  reject(err: Error): void;
}

/** Runs `name` through `slots`; `honoursSignal` false is a client that never gives up on its own. */
function enqueue(slots: ListSlots, log: FakeList[], name: string, options: { timeoutMs: number; signal?: AbortSignal; honoursSignal?: boolean }) {
  const list: FakeList = { name, resolve: () => {}, reject: () => {} };
  const result = slots.run(
    (signal) =>
      new Promise<string>((resolve, reject) => {
        list.startedAt = Date.now();
        list.signal = signal;
        list.resolve = resolve;
        list.reject = reject;
        log.push(list);
        signal.addEventListener("abort", () => {
          list.abortedAt = Date.now();
          if (options.honoursSignal ?? true) reject(signal.reason as Error);
        });
      }),
    options,
  );
  // Settled outcomes, so that a rejection is never unhandled while the test looks elsewhere.
  const outcome = result.then(
    (value) => ({ value }),
    (err: Error) => ({ error: err.name }),
  );
  return { list, outcome };
}

const flush = () => vi.advanceTimersByTimeAsync(0);

describe("ListSlots", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("runs at most its limit at once, the waiting ones in arrival order", async () => {
    vi.useFakeTimers();
    const slots = new ListSlots(2);
    const started: FakeList[] = [];
    const runs = ["a", "b", "c", "d", "e"].map((name) => enqueue(slots, started, name, { timeoutMs: 10_000 }));
    await flush();
    expect(started.map((l) => l.name)).toEqual(["a", "b"]);
    expect([slots.running, slots.waiting]).toEqual([2, 3]);

    // Each one that ends lets the next in line start, never more than two at once.
    started[1]!.resolve("b");
    await flush();
    expect(started.map((l) => l.name)).toEqual(["a", "b", "c"]);
    started[0]!.resolve("a");
    await flush();
    expect(started.map((l) => l.name)).toEqual(["a", "b", "c", "d"]);
    expect(slots.running).toBe(2);
    started[2]!.resolve("c");
    started[3]!.resolve("d");
    await flush();
    started[4]!.resolve("e");
    expect(await Promise.all(runs.map((r) => r.outcome))).toEqual(["a", "b", "c", "d", "e"].map((value) => ({ value })));
    expect([slots.running, slots.waiting]).toEqual([0, 0]);
  });

  it("a failed list frees its slot", async () => {
    vi.useFakeTimers();
    const slots = new ListSlots(1);
    const started: FakeList[] = [];
    const failing = enqueue(slots, started, "failing", { timeoutMs: 10_000 });
    const next = enqueue(slots, started, "next", { timeoutMs: 10_000 });
    await flush();
    started[0]!.reject(Object.assign(new Error("connection refused"), { name: "ConnectError" }));
    await flush();
    expect(started.map((l) => l.name)).toEqual(["failing", "next"]);
    started[1]!.resolve("ok");
    expect(await failing.outcome).toEqual({ error: "ConnectError" });
    expect(await next.outcome).toEqual({ value: "ok" });
  });

  it("the deadline counts from the start of the list, not from the time it waited for a slot", async () => {
    vi.useFakeTimers({ now: 0 });
    const slots = new ListSlots(1);
    const started: FakeList[] = [];
    enqueue(slots, started, "first", { timeoutMs: 1_000 });
    const second = enqueue(slots, started, "second", { timeoutMs: 1_000 });
    await vi.advanceTimersByTimeAsync(900);
    started[0]!.resolve("first");
    await flush();
    expect(started[1]!.startedAt).toBe(900);

    // 1,000 ms after it was queued it has run 100 ms: not failed.
    await vi.advanceTimersByTimeAsync(200);
    expect(started[1]!.signal!.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(800);
    expect(started[1]!.abortedAt).toBe(1_900);
    expect(await second.outcome).toEqual({ error: "TimeoutError" });
  });

  it("a list that never answers and ignores its signal holds its slot no longer than its deadline", async () => {
    vi.useFakeTimers({ now: 0 });
    const slots = new ListSlots(1);
    const started: FakeList[] = [];
    const hung = enqueue(slots, started, "hung", { timeoutMs: 1_000, honoursSignal: false });
    enqueue(slots, started, "next", { timeoutMs: 1_000 });
    await vi.advanceTimersByTimeAsync(999);
    expect(started.map((l) => l.name)).toEqual(["hung"]);
    await vi.advanceTimersByTimeAsync(1);
    expect(await hung.outcome).toEqual({ error: "TimeoutError" });
    expect(started.map((l) => [l.name, l.startedAt])).toEqual([
      ["hung", 0],
      ["next", 1_000],
    ]);
  });

  it("a list no longer wanted leaves the queue without running, or is aborted and frees its slot", async () => {
    vi.useFakeTimers();
    const slots = new ListSlots(1);
    const started: FakeList[] = [];
    const runningOwner = new AbortController();
    const waitingOwner = new AbortController();
    const running = enqueue(slots, started, "running", { timeoutMs: 10_000, signal: runningOwner.signal });
    const waiting = enqueue(slots, started, "waiting", { timeoutMs: 10_000, signal: waitingOwner.signal });
    const last = enqueue(slots, started, "last", { timeoutMs: 10_000 });
    await flush();

    waitingOwner.abort(Object.assign(new Error("cluster removed"), { name: "GivenUp" }));
    expect(await waiting.outcome).toEqual({ error: "GivenUp" });
    expect(slots.waiting).toBe(1);

    runningOwner.abort(Object.assign(new Error("cluster removed"), { name: "GivenUp" }));
    expect(await running.outcome).toEqual({ error: "GivenUp" });
    await flush();
    expect(started.map((l) => l.name)).toEqual(["running", "last"]);
    started[1]!.resolve("last");
    expect(await last.outcome).toEqual({ value: "last" });

    const gone = new AbortController();
    gone.abort(Object.assign(new Error("already given up"), { name: "GivenUp" }));
    expect(await enqueue(slots, started, "never", { timeoutMs: 10_000, signal: gone.signal }).outcome).toEqual({ error: "GivenUp" });
    expect(started.map((l) => l.name)).toEqual(["running", "last"]);
    expect([slots.running, slots.waiting]).toEqual([0, 0]);
  });

  it("with no limit (a single index of its own) every list starts at once, with the same deadline", async () => {
    vi.useFakeTimers({ now: 0 });
    const slots = new ListSlots(Number.POSITIVE_INFINITY);
    const started: FakeList[] = [];
    const runs = ["a", "b", "c"].map((name) => enqueue(slots, started, name, { timeoutMs: 1_000 }));
    await flush();
    expect(started.map((l) => l.name)).toEqual(["a", "b", "c"]);
    expect(slots.running).toBe(3);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await Promise.all(runs.map((r) => r.outcome))).toEqual([{ error: "TimeoutError" }, { error: "TimeoutError" }, { error: "TimeoutError" }]);
    expect(slots.running).toBe(0);
  });

  it.each([0, -1, 1.5, Number.NaN, Number.NEGATIVE_INFINITY])("refuses a limit of %s", (limit) => {
    expect(() => new ListSlots(limit)).toThrow(TypeError);
  });
});

describe("watched indexes list through the shared slots", () => {
  let dir: string;
  let hung: FakeKubeApi;
  let healthy: FakeKubeApi;
  let clusters: Clusters;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "portcullis-list-slots-"));
    hung = await new FakeKubeApi().start();
    hung.faults.list = "hang";
    healthy = await new FakeKubeApi().start();
    healthy.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
    clusters = await Clusters.load([
      { id: "hung", kubeconfig: hung.writeKubeconfig(dir) },
      { id: "healthy", kubeconfig: healthy.writeKubeconfig(dir) },
    ]);
  });

  afterAll(async () => {
    await clusters?.close();
    await hung?.stop();
    await healthy?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  function lookup(index: InstallationIndex): "found" | "503" | "absent" {
    try {
      return index.byUid("healthy", ids.installation) === undefined ? "absent" : "found";
    } catch (err) {
      if (err instanceof DependencyUnavailable) return "503";
      throw err;
    }
  }

  it("a cluster waiting for a slot is unsynced (503), and a cluster given up on frees its slot at once", async () => {
    const slots = new ListSlots(1);
    const index = new InstallationIndex([clusters.get("hung")!, clusters.get("healthy")!], { logger: pino({ level: "silent" }), listSlots: slots });
    const started = index.start();
    try {
      await until(() => slots.running === 1 && slots.waiting === 1 && hung.requests.length > 0, 5_000, "the hung list to hold the one slot");
      expect(healthy.requests).toHaveLength(0);
      expect(lookup(index)).toBe("503");

      // The hung cluster removed: its list is aborted (well before its 10 s deadline), the healthy one lists and syncs.
      index.remove("hung");
      await until(() => lookup(index) === "found", 5_000, "the healthy cluster to sync once the slot is free");
      await started;
      expect([slots.running, slots.waiting]).toEqual([0, 0]);
      // The watch stream is open and holds no slot.
      expect(healthy.watchers).toBe(1);
    } finally {
      await index.stop();
    }
  }, 15_000);

  it("every cluster's index shares the process's fleet slots unless given its own; portcullis_fleet_list_slots shows them", async () => {
    const metrics = createMetrics({ indexSizes: () => [] });
    const slotSeries = async () => (await metrics.metrics()).split("\n").filter((l) => l.startsWith("portcullis_fleet_list_slots{"));
    // The fleet's slots all held by lists that never end, until the test gives them up.
    const holders = new AbortController();
    const held = Array.from({ length: MAX_CONCURRENT_FLEET_LISTS }, () =>
      FLEET_LIST_SLOTS.run(() => new Promise<never>(() => {}), { timeoutMs: 60_000, signal: holders.signal }).catch(() => "given up"),
    );
    const index = new InstallationIndex([clusters.get("healthy")!], { logger: pino({ level: "silent" }) });
    const listsBefore = healthy.requests.length;
    const started = index.start();
    try {
      await until(() => FLEET_LIST_SLOTS.waiting === 1, 5_000, "the cluster's list to queue");
      expect(healthy.requests.length).toBe(listsBefore);
      expect(lookup(index)).toBe("503");
      // What an operator sees of it: every slot in use, one list waiting.
      expect(await slotSeries()).toEqual([`portcullis_fleet_list_slots{state="in_use"} ${MAX_CONCURRENT_FLEET_LISTS}`, 'portcullis_fleet_list_slots{state="waiting"} 1']);
      holders.abort(new Error("test over"));
      await until(() => lookup(index) === "found", 5_000, "the cluster to sync once a slot is free");
      await started;
      expect(await Promise.all(held)).toEqual(held.map(() => "given up"));
      expect(await slotSeries()).toEqual(['portcullis_fleet_list_slots{state="in_use"} 0', 'portcullis_fleet_list_slots{state="waiting"} 0']);
    } finally {
      holders.abort(new Error("test over"));
      await index.stop();
    }
  }, 15_000);
});
