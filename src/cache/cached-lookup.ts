/**
 * One remote lookup behind an lru-cache (DESIGN.md: explicit TTLs, one in-flight fetch per key):
 * each answer says how long it may be kept, concurrent misses for a key share one question, a
 * failure is never cached and reaches the caller as DependencyUnavailable, and every lookup counts
 * as a hit or a miss on the `portcullis:cache` channel.
 *
 * Freshness (issue 45, freshness.ts): an answer is served for its own TTL (the short one), and past
 * it only while its scope's change feed proves every change up to within that TTL applied — so
 * served answers are never staler than the short TTL allows, and a feed that stops proving puts
 * its scope back on the short TTLs at once. invalidate() drops what an event changed; an answer
 * whose question was in flight when an invalidation covering it came is handed to its callers but
 * never served again (it may predate the change).
 *
 * A question asked of a source that can be replaced while it runs (a cluster re-pointed or removed)
 * names it: the source is looked up when asking and again when answered, and an answer from one
 * that is no longer current is an error, never cached.
 */
import { LRUCache } from "lru-cache";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { publishCacheInvalidation, publishCacheLookup } from "../metrics/events.ts";
import type { ChangeFeed } from "./freshness.ts";

/** An answer and how long it may be served without a proof from the feed; the lookup's `ttlMs` when it does not say. */
export interface CachedAnswer<V> {
  readonly value: V;
  readonly ttlMs?: number;
  /** false: something the feed does not report decided it, so no proof of the feed's extends it past `ttlMs`. */
  readonly feedCovers?: boolean;
  /** The longest it is kept while the feed proves it, when shorter than the lookup's safety net (a token's refresh time). */
  readonly safetyNetTtlMs?: number;
}

/**
 * What the cache holds per key, compactly: lru-cache already keeps each slot's start (set to when
 * its question was asked) and TTL in tables preallocated by `maxEntries`, so an answer kept for
 * exactly its own TTL is held as the bare value, and only one kept longer than it is served
 * unproven (freshness), or never to be served again, is held in a Held — the same Held for every
 * entry of one primitive value and TTL (a boolean answer: a handful per cache). Per entry that is
 * the key and lru-cache's slot alone (bench/memory.ts --per-cache).
 */
class Held<V> {
  readonly value: V;
  /** How long it is served without a proof from the feed; negative: never served (an invalidation covering it came while it was asked). */
  readonly ttlMs: number;

  constructor(value: V, ttlMs: number) {
    this.value = value;
    this.ttlMs = ttlMs;
  }
}
const NEVER_SERVED = -1;
/** Distinct values (and TTLs per value) a lookup shares a Held for; past it the table starts again, which costs only sharing. */
const SHARED_HELD_MAX = 64;

/** How events keep a lookup's answers fresh. */
export interface LookupFreshness<C> {
  readonly feed: ChangeFeed;
  /** The scope a question belongs to (its cluster, its store). */
  scopeOf(context: C): string;
  /** The longest an answer is kept while its scope's feed proves it current (the safety net). */
  readonly safetyNetTtlMs: number;
}

/** What sweeping the keys for invalidations may take of each second (5 %); past it they are swept together, once a second. */
const SWEEP_BUDGET_MS = 50;
/** Invalidations remembered for questions in flight; a question older than all of them counts as covered. */
const REMEMBERED_INVALIDATIONS = 1_024;

/** Where a question is asked, when that can change under it. */
export interface LookupSource<C, S> {
  /** What errors call it ("cluster"). */
  readonly name: string;
  /** The source now; undefined when there is none (an error, never cached). */
  current(context: C): S | undefined;
}

export interface CachedLookupOptions<V extends {}, C, S> {
  /** The cache's name on the `portcullis:cache` channel (the metric's label). */
  readonly metric: string;
  /** The dependency its errors name (DependencyUnavailable). */
  readonly dependency: string;
  /** What is asked, as errors name it ("TokenRequest"). */
  readonly question: string;
  readonly maxEntries: number;
  readonly ttlMs: number;
  /** The clock TTLs are measured on (tests move it). */
  readonly now?: () => number;
  readonly source?: LookupSource<C, S>;
  /** Without it, answers live for their TTL only. */
  readonly freshness?: LookupFreshness<C>;
  /** What sweeping for invalidations may take of each second (SWEEP_BUDGET_MS; tests set 0 to see the deferred sweep). */
  readonly sweepBudgetMs?: number;
  /** Asks the dependency; throws when it gives no answer that may be kept. */
  ask(context: C, source: S): Promise<CachedAnswer<V>>;
}

export class CachedLookup<V extends {}, C, S = undefined> {
  // The context is typed unknown here (lru-cache's fetch() options cannot be resolved for a generic
  // context); lookup() is the only caller and always passes a C.
  readonly #cache: LRUCache<string, V | Held<V>, unknown>;
  readonly #metric: string;
  readonly #dependency: string;
  readonly #question: string;
  readonly #now: () => number;
  readonly #freshness: LookupFreshness<C> | undefined;
  /** Counts invalidations; `#invalidated` holds the latest ones' prefixes, oldest first. */
  #epoch = 0;
  readonly #invalidated: Array<{ readonly epoch: number; readonly prefix: string; readonly changedAt: number | undefined }> = [];
  /** Invalidations whose answers a sweep has not dropped yet; the time sweeps took in the second since `#budgetSince` (performance.now()). */
  readonly #unswept: Array<{ readonly prefix: string; readonly source: string; readonly cause: string; readonly at: number }> = [];
  #budgetSince = Number.NEGATIVE_INFINITY;
  #sweptMs = 0;
  #sweepTimer: NodeJS.Timeout | undefined;
  readonly #sweepBudgetMs: number;
  /** One Held per primitive value and TTL (see Held). */
  readonly #shared = new Map<V, Map<number, Held<V>>>();
  /** Where get() reports the entry's start (when its question was asked); reused, as get() is synchronous. */
  readonly #status: LRUCache.Status<string, V | Held<V>> = {};
  readonly #getOptions: LRUCache.GetOptions<string, V | Held<V>, unknown> = { noDeleteOnStaleGet: true, status: this.#status };

  constructor(options: CachedLookupOptions<V, C, S>) {
    this.#metric = options.metric;
    this.#dependency = options.dependency;
    this.#question = options.question;
    this.#now = options.now ?? (() => performance.now());
    this.#freshness = options.freshness;
    this.#sweepBudgetMs = options.sweepBudgetMs ?? SWEEP_BUDGET_MS;
    const { source, dependency, freshness } = options;
    this.#cache = new LRUCache<string, V | Held<V>, unknown>({
      max: options.maxEntries,
      ttl: options.ttlMs,
      perf: { now: this.#now },
      // The clock read on every lookup: lru-cache otherwise reuses a reading for 1 ms by arming a
      // timer each time it reads one, a timer per millisecond per cache under load (issue 55).
      ttlResolution: 0,
      fetchMethod: async (key, _stale, { options: entry, context: asking }) => {
        const context = asking as C;
        const askedAt = this.#now();
        const epoch = this.#epoch;
        const asked = source?.current(context);
        if (source !== undefined && asked === undefined) throw new DependencyUnavailable(dependency, `${source.name} not configured`);
        const answer = await options.ask(context, asked as S);
        if (source !== undefined && source.current(context) !== asked) {
          throw new DependencyUnavailable(dependency, `${source.name} replaced or removed while asking`);
        }
        const ttlMs = answer.ttlMs ?? options.ttlMs;
        const keptMs = freshness === undefined || answer.feedCovers === false ? ttlMs : Math.max(ttlMs, Math.min(freshness.safetyNetTtlMs, answer.safetyNetTtlMs ?? freshness.safetyNetTtlMs));
        // Aged from when it was asked, as its TTL is (lru-cache reads a start of 0 as "no TTL").
        (entry as { start?: number }).start = askedAt === 0 ? Number.MIN_VALUE : askedAt;
        // lru-cache reads a TTL of 0 as "forever": an answer that may not be kept is never served again, and leaves soon.
        entry.ttl = Math.max(keptMs, 1);
        if (ttlMs <= 0 || this.#invalidatedSince(epoch, key)) return this.#held(answer.value, NEVER_SERVED);
        if (ttlMs === keptMs) return answer.value;
        // The feed may hear of a change before the replica that answered applied it (another API
        // server's RBAC informer): an answer asked within its TTL after a change covering it is kept
        // for that TTL only: no longer than without the feed, as long as every replica applies a
        // change within that TTL of the feed hearing of it (past that, the safety net bounds it).
        if (this.#changedSince(askedAt - ttlMs, key)) {
          entry.ttl = Math.max(ttlMs, 1);
          return answer.value;
        }
        return this.#held(answer.value, ttlMs);
      },
    });
  }

  /** The answer for `key`; `context` is what the question is built from, used on a miss only. */
  lookup(key: string, context: C): Promise<V> {
    // Not an async function: a hit is one settled promise, without an async frame. What throws
    // here (a scope's feed) still reaches the caller as a rejection.
    let held: V | Held<V> | undefined;
    try {
      held = this.#cache.get(key, this.#getOptions);
      if (held !== undefined && this.#status.get === "hit" && this.#servedFresh(key, held, context)) {
        publishCacheLookup(this.#metric, "hit");
        return Promise.resolve(held instanceof Held ? held.value : held);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#fetched(key, context, held !== undefined);
  }

  /**
   * A fresh entry is answered by get(), which costs a fraction of fetch(); anything else (absent,
   * stale, unproven, in flight) goes through fetch(). A stale entry is left for fetch() to refresh.
   * get() hands back the value an entry being asked again held ("fetching"), and invalidate()
   * cannot drop such an entry (lru-cache's keys() skips it): that value may predate a change
   * applied since, so its callers join the question in flight instead.
   */
  #servedFresh(key: string, held: V | Held<V>, context: C): boolean {
    return this.#servable(held, context) && (this.#unswept.length === 0 || !this.#undropped(key, this.#status.start!));
  }

  /** An answer fetched: absent, stale, unproven or in flight. */
  async #fetched(key: string, context: C, held: boolean): Promise<V> {
    const status: LRUCache.Status<string, V | Held<V>> = {};
    // An entry held but not servable is asked again (an entry in flight is still shared); a new
    // one is keyed by a flat copy of the key.
    const answer = await this.#cache.fetch(held ? key : flatCopy(key), { context, status, forceRefresh: held });
    publishCacheLookup(this.#metric, status.fetch);
    if (answer === undefined) throw new DependencyUnavailable(this.#dependency, `no ${this.#question} answer`);
    return answer instanceof Held ? answer.value : answer;
  }

  /**
   * Drops every answer whose key starts with `prefix`, because an event (`source`, `cause`) may have
   * changed it; questions in flight under it are answered but not served again. `kind`: "change"
   * when the event is a change (answers asked soon after keep their own TTL only), "resync" when it
   * names none (a first list, a first read of the changes).
   */
  invalidate(prefix: string, source: string, cause: string, kind: "change" | "resync" = "change"): void {
    this.#epoch += 1;
    this.#invalidated.push({ epoch: this.#epoch, prefix, changedAt: kind === "change" ? this.#now() : undefined });
    if (this.#invalidated.length > REMEMBERED_INVALIDATIONS) this.#invalidated.shift();
    // From here no lookup under `prefix` is answered from the cache (#undropped); the entries
    // themselves go in a sweep of every key. A tenant who may write RoleBindings in their own
    // namespace sends events at will, and each sweep scans the whole cache (~8 ms at 50,000
    // entries): sweeps run at once within SWEEP_BUDGET_MS of each second, and past it together at
    // the start of the next.
    this.#unswept.push({ prefix, source, cause, at: this.#now() });
    const now = performance.now();
    if (now - this.#budgetSince >= 1_000) {
      this.#budgetSince = now;
      this.#sweptMs = 0;
    }
    if (this.#sweptMs < this.#sweepBudgetMs) this.#sweep();
    else this.#sweepTimer ??= setTimeout(() => this.#sweep(), this.#budgetSince + 1_000 - now).unref();
  }

  /** Drops the answers under every invalidation not swept yet, in one pass over the keys. */
  #sweep(): void {
    clearTimeout(this.#sweepTimer);
    this.#sweepTimer = undefined;
    const started = performance.now();
    if (started - this.#budgetSince >= 1_000) {
      this.#budgetSince = started;
      this.#sweptMs = 0;
    }
    const unswept = this.#unswept.splice(0);
    const dropped = unswept.map(() => 0);
    for (const key of [...this.#cache.keys()]) {
      const i = unswept.findIndex((u) => key.startsWith(u.prefix));
      if (i < 0) continue;
      // An answer asked again since every invalidation covering it (a lookup under one refetches) stays.
      // get() reports the entry's start on this cache's clock (info() gives it on Date.now()'s).
      const held: LRUCache.Status<string, V | Held<V>> = {};
      this.#cache.get(key, { status: held, allowStale: true, noDeleteOnStaleGet: true });
      const askedAt = held.start ?? Number.NEGATIVE_INFINITY;
      if (!unswept.some((u) => u.at >= askedAt && key.startsWith(u.prefix))) continue;
      this.#cache.delete(key);
      dropped[i]! += 1;
    }
    this.#sweptMs += performance.now() - started;
    unswept.forEach((u, i) => publishCacheInvalidation(this.#metric, u.source, u.cause, dropped[i]!));
  }

  /** Whether the answer to `key`, asked at `askedAt`, is under an invalidation since then whose sweep is still due. */
  #undropped(key: string, askedAt: number): boolean {
    for (const u of this.#unswept) if (u.at >= askedAt && key.startsWith(u.prefix)) return true;
    return false;
  }

  /** Drops every answer whose key starts with `prefix` (a cluster replaced or removed: its source's check covers those in flight). */
  forget(prefix: string): void {
    for (const key of [...this.#cache.keys()]) if (key.startsWith(prefix)) this.#cache.delete(key);
  }

  /**
   * Within its own TTL, or its scope's feed proves every change up to within that TTL applied. A
   * bare value's TTL is its entry's. One clock reading, exact (lru-cache's own may be 1 ms old).
   */
  #servable(held: V | Held<V>, context: C): boolean {
    const now = this.#now();
    // Set by the get() that returned it: when its question was asked, and the entry's TTL.
    const age = now - this.#status.start!;
    if (!(held instanceof Held)) return age <= this.#status.ttl!;
    if (held.ttlMs < 0) return false;
    if (age <= held.ttlMs) return true;
    if (this.#freshness === undefined) return false;
    const proven = this.#freshness.feed.provenUntil(this.#freshness.scopeOf(context));
    return proven !== undefined && now - proven <= held.ttlMs;
  }

  /** The Held of `value` and `ttlMs`: shared when the value is a primitive, its own otherwise. */
  #held(value: V, ttlMs: number): Held<V> {
    if (typeof value === "object" || typeof value === "function") return new Held(value, ttlMs);
    let byTtl = this.#shared.get(value);
    if (byTtl === undefined) {
      if (this.#shared.size >= SHARED_HELD_MAX) this.#shared.clear();
      byTtl = new Map();
      this.#shared.set(value, byTtl);
    }
    let held = byTtl.get(ttlMs);
    if (held === undefined) {
      if (byTtl.size >= SHARED_HELD_MAX) byTtl.clear();
      held = new Held(value, ttlMs);
      byTtl.set(ttlMs, held);
    }
    return held;
  }

  /** Whether a change covering `key` was invalidated at or after `since` (or too many came since to tell). */
  #changedSince(since: number, key: string): boolean {
    for (let i = this.#invalidated.length - 1; i >= 0; i -= 1) {
      const { changedAt, prefix } = this.#invalidated[i]!;
      if (changedAt === undefined) continue;
      if (changedAt < since) return false;
      if (key.startsWith(prefix)) return true;
    }
    // Every one remembered came since: any forgotten may have too.
    return this.#epoch > this.#invalidated.length;
  }

  /** Whether an invalidation since `epoch` covered `key` (or too many came to tell). */
  #invalidatedSince(epoch: number, key: string): boolean {
    if (epoch === this.#epoch) return false;
    const oldest = this.#invalidated[0];
    if (oldest === undefined || oldest.epoch > epoch + 1) return true;
    for (let i = this.#invalidated.length - 1; i >= 0 && this.#invalidated[i]!.epoch > epoch; i -= 1) {
      if (key.startsWith(this.#invalidated[i]!.prefix)) return true;
    }
    return false;
  }
}

/**
 * A flat copy of `key`, when it is Latin-1 (as every key built from ids and names is). Keys are
 * built by concatenation, which V8 keeps as a tree of the parts until it is read whole; the cache
 * holds its keys for as long as their entries live, and a flat copy is 64 bytes lighter per key
 * than such a tree once it has been read (bench/memory.ts --per-cache).
 */
function flatCopy(key: string): string {
  const copy = Buffer.from(key, "latin1").toString("latin1");
  return copy === key ? copy : key;
}
