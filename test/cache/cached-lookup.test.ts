import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { CachedLookup } from "../../src/cache/cached-lookup.ts";
import type { ChangeFeed } from "../../src/cache/freshness.ts";
import type { CacheInvalidation } from "../../src/metrics/events.ts";
import { timersArmedBy } from "../support/timers-armed.ts";

/** A lookup on a clock the test moves, whose answers count the questions asked; its scope is the key's first segment. */
function lookupWith(options: { feed?: ChangeFeed; ttlMs?: number; safetyNetTtlMs?: number; sweepBudgetMs?: number } = {}) {
  let now = 1_000;
  let asked = 0;
  let release: (() => void) | undefined;
  let holdNext = false;
  const cache = new CachedLookup<string, { key: string }>({
    metric: "test",
    dependency: "test",
    question: "Question",
    maxEntries: 100,
    ttlMs: options.ttlMs ?? 5_000,
    now: () => now,
    ...(options.sweepBudgetMs === undefined ? {} : { sweepBudgetMs: options.sweepBudgetMs }),
    ...(options.feed === undefined ? {} : { freshness: { feed: options.feed, scopeOf: (c) => c.key.split("/")[0]!, safetyNetTtlMs: options.safetyNetTtlMs ?? 60_000 } }),
    ask: async () => {
      asked += 1;
      const answer = `answer ${asked}`;
      if (holdNext) {
        holdNext = false;
        await new Promise<void>((resolve) => (release = resolve));
      }
      return { value: answer };
    },
  });
  return {
    cache,
    get: (key: string) => cache.lookup(key, { key }),
    advance: (ms: number) => (now += ms),
    now: () => now,
    asked: () => asked,
    holdNextQuestion: () => (holdNext = true),
    release: () => release?.(),
  };
}

/** A feed whose proof per scope the test sets. */
function feed(): ChangeFeed & { prove(scope: string, at: number | undefined): void } {
  const proofs = new Map<string, number | undefined>();
  return { provenUntil: (scope) => proofs.get(scope), prove: (scope, at) => proofs.set(scope, at) };
}

describe("CachedLookup freshness", () => {
  // Served past its own TTL only while its scope's feed proves every change up to within that TTL applied.
  it.each([
    { name: "no feed: within the TTL", feed: false, age: 4_999, proofAge: undefined, served: true },
    { name: "no feed: past the TTL", feed: false, age: 5_001, proofAge: undefined, served: false },
    { name: "feed not synced: past the TTL", feed: true, age: 5_001, proofAge: undefined, served: false },
    { name: "feed proven just now: past the TTL", feed: true, age: 30_000, proofAge: 0, served: true },
    { name: "feed proven within the TTL: past the TTL", feed: true, age: 30_000, proofAge: 4_999, served: true },
    { name: "feed silent longer than the TTL", feed: true, age: 30_000, proofAge: 5_001, served: false },
    { name: "feed proven, past the safety net", feed: true, age: 60_001, proofAge: 0, served: false },
    { name: "feed not synced: within the TTL", feed: true, age: 4_000, proofAge: undefined, served: true },
  ])("$name", async ({ feed: withFeed, age, proofAge, served }) => {
    const changes = feed();
    const l = lookupWith(withFeed ? { feed: changes } : {});
    expect(await l.get("c1/k")).toBe("answer 1");
    l.advance(age);
    changes.prove("c1", proofAge === undefined ? undefined : l.now() - proofAge);
    expect(await l.get("c1/k")).toBe(served ? "answer 1" : "answer 2");
  });

  it("a feed's proof is per scope", async () => {
    const changes = feed();
    const l = lookupWith({ feed: changes });
    await l.get("c1/k");
    await l.get("c2/k");
    l.advance(10_000);
    changes.prove("c1", l.now());
    expect(await l.get("c1/k")).toBe("answer 1");
    expect(await l.get("c2/k")).toBe("answer 3");
  });

  it("invalidate drops the answers under its prefix only", async () => {
    const l = lookupWith();
    await l.get("c1/ns-a/k");
    await l.get("c1/ns-b/k");
    l.cache.invalidate("c1/ns-a/", "test", "change");
    expect(await l.get("c1/ns-a/k")).toBe("answer 3");
    expect(await l.get("c1/ns-b/k")).toBe("answer 2");
  });

  it("an answer in flight when an invalidation covers it reaches its caller but is never served again", async () => {
    const l = lookupWith();
    l.holdNextQuestion();
    const pending = l.get("c1/k");
    await Promise.resolve();
    l.cache.invalidate("c1/", "test", "change");
    l.release();
    expect(await pending).toBe("answer 1");
    expect(await l.get("c1/k")).toBe("answer 2");
    expect(await l.get("c1/k")).toBe("answer 2");
  });

  it("an answer in flight when an invalidation of another prefix comes is kept", async () => {
    const l = lookupWith();
    l.holdNextQuestion();
    const pending = l.get("c1/k");
    await Promise.resolve();
    l.cache.invalidate("c2/", "test", "change");
    l.release();
    expect(await pending).toBe("answer 1");
    expect(await l.get("c1/k")).toBe("answer 1");
  });

  // lru-cache's keys() skips an entry being refreshed and its get() hands back the value it refreshes:
  // an invalidation during the refresh must still keep that value from being served, even once the
  // feed proves again (it proves the invalidation applied).
  it("an answer being refreshed when an invalidation covers it is not served again, even once the feed proves", async () => {
    const changes = feed();
    const l = lookupWith({ feed: changes });
    expect(await l.get("c1/k")).toBe("answer 1");
    l.advance(10_000);
    l.holdNextQuestion();
    // The feed silent past the answer's TTL: it is asked again (held until released).
    const refreshing = l.get("c1/k");
    await Promise.resolve();
    l.cache.invalidate("c1/", "test", "change");
    changes.prove("c1", l.now());
    const during = l.get("c1/k");
    l.release();
    expect(await refreshing).toBe("answer 2");
    // It joins the question in flight (asked before the change, as any coalesced caller's answer may be).
    expect(await during).toBe("answer 2");
    expect(await l.get("c1/k")).toBe("answer 3");
  });

  // The feed hears of a change before every replica of the dependency applies it (another API server's
  // RBAC informer, its watch cache): an answer asked just after may predate the change, and the proof,
  // which covers the invalidation, must not keep it past its own TTL.
  it.each([
    { name: "asked within its TTL after a change covering it: kept for its TTL only", kind: "change", prefix: "c1/", askedAfter: 1_000, served: false },
    { name: "asked more than its TTL after a change covering it: kept while proven", kind: "change", prefix: "c1/", askedAfter: 5_001, served: true },
    { name: "asked just after a change of another prefix: kept while proven", kind: "change", prefix: "c2/", askedAfter: 1_000, served: true },
    { name: "asked just after a resync (no change named): kept while proven", kind: "resync", prefix: "c1/", askedAfter: 1_000, served: true },
  ] as const)("$name", async ({ kind, prefix, askedAfter, served }) => {
    const changes = feed();
    const l = lookupWith({ feed: changes });
    l.cache.invalidate(prefix, "test", "change", kind);
    l.advance(askedAfter);
    expect(await l.get("c1/k")).toBe("answer 1");
    l.advance(10_000);
    changes.prove("c1", l.now());
    expect(await l.get("c1/k")).toBe(served ? "answer 1" : "answer 2");
  });

  it("an answer asked after more changes than are remembered, all within its TTL, is kept for its TTL only", async () => {
    const changes = feed();
    const l = lookupWith({ feed: changes });
    l.cache.invalidate("c1/", "test", "change");
    for (let i = 0; i < 2_000; i += 1) l.cache.invalidate(`other-${i}/`, "test", "change");
    l.advance(1_000);
    await l.get("c1/k");
    l.advance(10_000);
    changes.prove("c1", l.now());
    expect(await l.get("c1/k")).toBe("answer 2");
  });

  it("an answer in flight through more invalidations than are remembered is never served again", async () => {
    const l = lookupWith();
    l.holdNextQuestion();
    const pending = l.get("c1/k");
    await Promise.resolve();
    for (let i = 0; i < 2_000; i += 1) l.cache.invalidate(`other-${i}/`, "test", "change");
    l.release();
    await pending;
    expect(await l.get("c1/k")).toBe("answer 2");
  });

  it("invalidations past the sweep budget are swept together a second later, and nothing under them is served meanwhile", async () => {
    const swept: CacheInvalidation[] = [];
    // This test's invalidations only (the others' sweeps may still be due).
    const onSweep = (m: unknown) => void ((m as CacheInvalidation).cause === "rolebinding" && swept.push(m as CacheInvalidation));
    subscribe("portcullis:cache-invalidation", onSweep);
    try {
      // The budget spent: a tenant's RoleBinding churn waits for the next second's sweep.
      const l = lookupWith({ sweepBudgetMs: 0 });
      expect(await l.get("c1/ns-a/k")).toBe("answer 1");
      expect(await l.get("c1/ns-b/k")).toBe("answer 2");
      for (let i = 0; i < 100; i += 1) l.cache.invalidate(`c1/tenant-${i}/`, "test", "rolebinding");
      expect(swept).toHaveLength(0);
      l.cache.invalidate("c1/ns-a/", "test", "rolebinding");
      l.advance(1);
      // Not swept yet, and not served: asked again; the answer asked since is served.
      expect(await l.get("c1/ns-a/k")).toBe("answer 3");
      expect(await l.get("c1/ns-a/k")).toBe("answer 3");
      expect(await l.get("c1/ns-b/k")).toBe("answer 2");
      await sleep(1_200);
      expect(swept).toHaveLength(101);
      // The sweep keeps what was asked after the invalidation.
      expect(swept.at(-1)).toEqual({ cache: "test", source: "test", cause: "rolebinding", entries: 0 });
      expect(await l.get("c1/ns-a/k")).toBe("answer 3");
    } finally {
      unsubscribe("portcullis:cache-invalidation", onSweep);
    }
  });
});

describe("CachedLookup on its own clock (performance.now)", () => {
  // lru-cache keeps a clock reading for 1 ms by arming a timer each time it reads one: under load a
  // timer per millisecond per cache, each armed, fired and freed (issue 55).
  it("arms no timer on a hit", async () => {
    const cache = new CachedLookup<string, { key: string }>({ metric: "test", dependency: "test", question: "Question", maxEntries: 10, ttlMs: 60_000, ask: async () => ({ value: "answer" }) });
    expect(await cache.lookup("k", { key: "k" })).toBe("answer");
    await sleep(5);
    expect(timersArmedBy(() => void cache.lookup("k", { key: "k" }))).toBe(0);
    expect(await cache.lookup("k", { key: "k" })).toBe("answer");
  });
});
