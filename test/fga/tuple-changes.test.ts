/**
 * The ReadChanges follower's proof, against an injected client: only a poll that read every page
 * advances provenUntil; a failing, hung or unfinished poll does not; polls never overlap; a change
 * re-read inside the commit window is applied once; a store re-resolved to a new id starts unproven.
 * The real OpenFGA's side is test/fga/tuple-changes.openfga.test.ts.
 */
import pino from "pino";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { type ChangeCause, type ChangesClient, type TupleChangeRead, TupleChanges } from "../../src/fga/tuple-changes.ts";

const STORE = "01HVMMBCMGZNT3SED4Z17ECXCA";
const OTHER_STORE = "01HVMMBCMGZNT3SED4Z17ECXCB";
const T0 = Date.parse("2026-12-06T08:00:00Z");

/** A store's changelog served page by page like OpenFGA's: ascending, from a start time or a token. */
class FakeChanges implements ChangesClient {
  readonly log: TupleChangeRead[] = [];
  models = ["01HVMMBCMGZNT3SED4Z17ECXM1"];
  /** Throws this on every read while set. */
  failure: Error | undefined;
  /** Each read waits for this before answering, when set. */
  gate: Promise<void> | undefined;
  readonly reads: Array<{ startTime?: string; continuationToken?: string }> = [];
  inFlight = 0;
  maxInFlight = 0;

  write(user: string, atMs: number, operation = "TUPLE_OPERATION_WRITE"): void {
    this.log.push({ tuple_key: { user, relation: "viewer", object: "organization:acme" }, operation, timestamp: new Date(atMs).toISOString() });
  }

  async readChanges(body: { type: string; startTime?: string }, options: { storeId: string; continuationToken?: string; pageSize?: number }) {
    this.reads.push({ ...(body.startTime === undefined ? {} : { startTime: body.startTime }), ...(options.continuationToken === undefined ? {} : { continuationToken: options.continuationToken }) });
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      await this.gate;
      if (this.failure !== undefined) throw this.failure;
      const from = options.continuationToken === undefined ? this.log.findIndex((c) => Date.parse(c.timestamp) >= Date.parse(body.startTime!)) : Number(options.continuationToken);
      const start = from < 0 ? this.log.length : from;
      const page = this.log.slice(start, start + (options.pageSize ?? 100));
      return { changes: page, continuation_token: String(start + page.length) };
    } finally {
      this.inFlight -= 1;
    }
  }

  async readAuthorizationModels() {
    if (this.failure !== undefined) throw this.failure;
    return { authorization_models: [{ id: this.models.at(-1)! }] };
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function follower(client: FakeChanges, overrides: Partial<ConstructorParameters<typeof TupleChanges>[0]> = {}) {
  let now = 1_000;
  let store: string | undefined = STORE;
  const dropped: Array<[string, ChangeCause]> = [];
  const lines: string[] = [];
  const logger = pino(
    { level: "info" },
    new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  );
  const feed = new TupleChanges({
    client,
    currentStore: () => store,
    pollMs: 20,
    timeoutMs: 300,
    followModel: true,
    invalidate: (storeId, cause) => dropped.push([storeId, cause]),
    logger,
    now: () => now,
    wallNow: () => T0 + now,
    pageSize: 2,
    ...overrides,
  });
  return {
    feed,
    dropped,
    lines,
    advance: (ms: number) => (now += ms),
    at: () => now,
    useStore: (id: string | undefined) => (store = id),
  };
}

describe("TupleChanges: what a poll proves", () => {
  it("proves nothing before its first complete poll", () => {
    const { feed } = follower(new FakeChanges());
    expect(feed.provenUntil(STORE)).toBeUndefined();
    expect(feed.feedStates()).toEqual([]);
  });

  it("after a complete poll, proves up to the poll's start and drops the store's answers once (sync)", async () => {
    const client = new FakeChanges();
    const f = follower(client);
    const started = f.at();
    const poll = f.feed.poll();
    f.advance(50); // the poll takes 50 ms
    await poll;
    expect(f.feed.provenUntil(STORE)).toBe(started);
    expect(f.feed.provenUntil(OTHER_STORE)).toBeUndefined();
    expect(f.dropped).toEqual([[STORE, "sync"]]);
    expect(f.feed.feedStates()).toEqual([{ source: "openfga-changes", scope: STORE, synced: true, lagSeconds: 0.05 }]);
  });

  it("a page in progress proves nothing: a full page is followed to the end first", async () => {
    const client = new FakeChanges();
    const f = follower(client);
    await f.feed.poll();
    const firstProof = f.feed.provenUntil(STORE);
    for (const [i, user] of ["user:a", "user:b", "user:c"].entries()) client.write(user, T0 + f.at() + i);
    f.advance(100);
    const second = f.at();
    const hold = deferred();
    client.gate = hold.promise;
    const poll = f.feed.poll();
    await new Promise((r) => setTimeout(r, 10));
    expect(f.feed.provenUntil(STORE)).toBe(firstProof);
    hold.resolve();
    client.gate = undefined;
    await poll;
    // Two pages (page size 2): the proof is the poll's start, and the three changes dropped the answers once.
    expect(client.reads.slice(-2).map((r) => r.continuationToken !== undefined)).toEqual([false, true]);
    expect(f.feed.provenUntil(STORE)).toBe(second);
    expect(f.dropped).toEqual([
      [STORE, "sync"],
      [STORE, "tuple"],
    ]);
  });

  it("a failing poll does not advance the proof; logged once per change of state, never with a credential", async () => {
    const client = new FakeChanges();
    const f = follower(client);
    await f.feed.poll();
    const proven = f.feed.provenUntil(STORE);
    client.failure = new Error("401 for Authorization: Bearer s3cr3t-token");
    for (let i = 0; i < 3; i++) {
      f.advance(100);
      await f.feed.poll();
    }
    expect(f.feed.provenUntil(STORE)).toBe(proven);
    expect(f.feed.feedStates()).toMatchObject([{ scope: STORE, synced: false }]);
    expect(f.feed.feedStates()[0]!.lagSeconds).toBeUndefined();
    client.failure = undefined;
    f.advance(100);
    const recovered = f.at();
    await f.feed.poll();
    expect(f.feed.provenUntil(STORE)).toBe(recovered);
    const warnings = f.lines.filter((l) => l.includes("failed"));
    expect(warnings).toHaveLength(1);
    expect(f.lines.filter((l) => l.includes("following the OpenFGA store's changes"))).toHaveLength(2);
    expect(f.lines.join("")).not.toContain("s3cr3t");
  });

  it("a poll that outlives its deadline fails and proves nothing", async () => {
    const client = new FakeChanges();
    const f = follower(client, { timeoutMs: 30, now: () => performance.now() });
    client.gate = new Promise(() => {});
    const started = performance.now();
    await f.feed.poll();
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(f.feed.provenUntil(STORE)).toBeUndefined();
    expect(f.feed.feedStates()).toMatchObject([{ synced: false, detail: expect.stringContaining("30 ms") }]);
  });

  it("a change re-read inside the commit window is applied once; a new one drops the answers again", async () => {
    const client = new FakeChanges();
    const f = follower(client, { pageSize: 100 });
    await f.feed.poll();
    client.write("user:a", T0 + f.at());
    f.advance(100);
    await f.feed.poll();
    f.advance(100);
    await f.feed.poll(); // reads user:a again (inside the window): nothing new
    client.write("user:a", T0 + f.at(), "TUPLE_OPERATION_DELETE");
    f.advance(100);
    await f.feed.poll();
    expect(f.dropped.map(([, cause]) => cause)).toEqual(["sync", "tuple", "tuple"]);
  });

  it("reads the first poll from its wall clock less the window, later ones from the newest change less the window", async () => {
    const client = new FakeChanges();
    const f = follower(client, { pageSize: 100, timeoutMs: 300 });
    await f.feed.poll();
    const window = 5_000 + 300;
    expect(client.reads[0]!.startTime).toBe(new Date(T0 + 1_000 - window).toISOString());
    const written = T0 + 60_000;
    client.write("user:a", written);
    f.advance(70_000);
    await f.feed.poll();
    f.advance(100);
    await f.feed.poll();
    expect(client.reads.at(-1)!.startTime).toBe(new Date(written - window).toISOString());
  });

  it("a late commit with an older timestamp than the newest seen is still read and applied", async () => {
    const client = new FakeChanges();
    const f = follower(client, { pageSize: 100 });
    await f.feed.poll();
    client.write("user:b", T0 + 10_000);
    f.advance(20_000);
    await f.feed.poll();
    // A write that took its ULID 2 s before user:b's commits only now (a SQL transaction).
    client.log.unshift({ tuple_key: { user: "user:late", relation: "viewer", object: "organization:acme" }, operation: "TUPLE_OPERATION_WRITE", timestamp: new Date(T0 + 8_000).toISOString() });
    f.advance(100);
    await f.feed.poll();
    expect(f.dropped.map(([, cause]) => cause)).toEqual(["sync", "tuple", "tuple"]);
  });

  it("a change stamped ahead of this clock (an OpenFGA replica's clock running fast) does not move the next read past changes not made yet", async () => {
    const client = new FakeChanges();
    const f = follower(client, { pageSize: 100, timeoutMs: 300 });
    await f.feed.poll();
    const window = 5_000 + 300;
    // Stamped a minute ahead of the wall clock.
    client.write("user:skewed", T0 + f.at() + 60_000);
    f.advance(100);
    await f.feed.poll();
    f.advance(100);
    await f.feed.poll();
    expect(client.reads.at(-1)!.startTime).toBe(new Date(T0 + 1_100 - window).toISOString());
    // A change made now, stamped by a replica on time, is read and applied.
    client.write("user:on-time", T0 + f.at());
    f.advance(100);
    await f.feed.poll();
    expect(f.dropped.map(([, cause]) => cause)).toEqual(["sync", "tuple", "tuple"]);
  });

  it("a new latest model drops the answers; a pinned model is not read", async () => {
    const client = new FakeChanges();
    const f = follower(client);
    await f.feed.poll();
    client.models.push("01HVMMBCMGZNT3SED4Z17ECXM2");
    await f.feed.poll();
    expect(f.dropped.map(([, cause]) => cause)).toEqual(["sync", "model"]);

    const pinned = new FakeChanges();
    pinned.readAuthorizationModels = () => Promise.reject(new Error("not to be read"));
    const p = follower(pinned, { followModel: false });
    await p.feed.poll();
    expect(p.feed.provenUntil(STORE)).toBeDefined();
  });

  it("a store re-resolved to another id is followed from scratch; a moment without an id keeps the proof", async () => {
    const client = new FakeChanges();
    const f = follower(client);
    await f.feed.poll();
    const proven = f.feed.provenUntil(STORE);
    f.useStore(undefined);
    f.advance(100);
    await f.feed.poll();
    expect(f.feed.provenUntil(STORE)).toBe(proven);
    f.useStore(OTHER_STORE);
    expect(f.feed.provenUntil(OTHER_STORE)).toBeUndefined();
    await f.feed.poll();
    expect(f.feed.provenUntil(STORE)).toBeUndefined();
    expect(f.feed.provenUntil(OTHER_STORE)).toBe(f.at());
    expect(f.dropped).toEqual([
      [STORE, "sync"],
      [OTHER_STORE, "sync"],
    ]);
  });
});

describe("TupleChanges: polling", () => {
  it("never overlaps two polls, even when a poll takes longer than the interval", async () => {
    const client = new FakeChanges();
    const slow = { ...client, readChanges: async (...args: Parameters<FakeChanges["readChanges"]>) => {
      await new Promise((r) => setTimeout(r, 30));
      return client.readChanges(...args);
    }, readAuthorizationModels: () => client.readAuthorizationModels() };
    const f = follower(client, { client: slow, pollMs: 5, now: () => performance.now() });
    f.feed.start();
    const concurrent = await Promise.all([f.feed.poll(), f.feed.poll()]);
    expect(concurrent).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 250));
    await f.feed.stop();
    expect(client.reads.length).toBeGreaterThan(3);
    expect(client.maxInFlight).toBe(1);
  });

  it("stops: no read after stop(), and a poll in flight at stop() proves nothing", async () => {
    const client = new FakeChanges();
    const hold = deferred();
    client.gate = hold.promise;
    const f = follower(client, { now: () => performance.now() });
    f.feed.start();
    await new Promise((r) => setTimeout(r, 10));
    const stopping = f.feed.stop();
    hold.resolve();
    await stopping;
    const reads = client.reads.length;
    await new Promise((r) => setTimeout(r, 100));
    await f.feed.poll();
    expect(client.reads.length).toBe(reads);
    expect(f.feed.provenUntil(STORE)).toBeUndefined();
    expect(f.dropped).toEqual([]);
  });
});
