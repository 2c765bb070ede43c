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
}

/** What the cache holds per key: the answer, when it was asked, and how long it is served unproven. */
interface Entry<V> {
  readonly value: V;
  readonly askedAt: number;
  /** Negative when an invalidation covering it came while it was asked: never served. */
  readonly ttlMs: number;
}

/** How events keep a lookup's answers fresh. */
export interface LookupFreshness<C> {
  readonly feed: ChangeFeed;
  /** The scope a question belongs to (its cluster, its store). */
  scopeOf(context: C): string;
  /** The longest an answer is kept while its scope's feed proves it current (the safety net). */
  readonly safetyNetTtlMs: number;
}

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
  /** Asks the dependency; throws when it gives no answer that may be kept. */
  ask(context: C, source: S): Promise<CachedAnswer<V>>;
}

export class CachedLookup<V extends {}, C, S = undefined> {
  // The context is typed unknown here (lru-cache's fetch() options cannot be resolved for a generic
  // context); lookup() is the only caller and always passes a C.
  readonly #cache: LRUCache<string, Entry<V>, unknown>;
  readonly #metric: string;
  readonly #dependency: string;
  readonly #question: string;
  readonly #now: () => number;
  readonly #freshness: LookupFreshness<C> | undefined;
  /** Counts invalidations; `#invalidated` holds the latest ones' prefixes, oldest first. */
  #epoch = 0;
  readonly #invalidated: Array<{ readonly epoch: number; readonly prefix: string }> = [];

  constructor(options: CachedLookupOptions<V, C, S>) {
    this.#metric = options.metric;
    this.#dependency = options.dependency;
    this.#question = options.question;
    this.#now = options.now ?? (() => performance.now());
    this.#freshness = options.freshness;
    const { source, dependency, freshness } = options;
    this.#cache = new LRUCache<string, Entry<V>, unknown>({
      max: options.maxEntries,
      ttl: options.ttlMs,
      perf: { now: this.#now },
      // A clock a test moves is read on every lookup (lru-cache otherwise reuses a reading for 1 ms by a timer).
      ...(options.now === undefined ? {} : { ttlResolution: 0 }),
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
        entry.ttl = freshness === undefined ? ttlMs : Math.max(ttlMs, freshness.safetyNetTtlMs);
        return { value: answer.value, askedAt, ttlMs: this.#invalidatedSince(epoch, key) ? -1 : ttlMs };
      },
    });
  }

  /** The answer for `key`; `context` is what the question is built from, used on a miss only. */
  async lookup(key: string, context: C): Promise<V> {
    // A fresh entry is answered by get(), which costs a fraction of fetch(); anything else (absent,
    // stale, unproven, in flight) goes through fetch(). A stale entry is left for fetch() to refresh.
    const held = this.#cache.get(key, { noDeleteOnStaleGet: true });
    if (held !== undefined && this.#servable(held, context)) {
      publishCacheLookup(this.#metric, "hit");
      return held.value;
    }
    const status: LRUCache.Status<string, Entry<V>> = {};
    // An entry held but not servable is asked again (an entry in flight is still shared).
    const answer = await this.#cache.fetch(key, { context, status, forceRefresh: held !== undefined });
    publishCacheLookup(this.#metric, status.fetch);
    if (answer === undefined) throw new DependencyUnavailable(this.#dependency, `no ${this.#question} answer`);
    return answer.value;
  }

  /**
   * Drops every answer whose key starts with `prefix`, because an event (`source`, `cause`) may have
   * changed it; questions in flight under it are answered but not served again.
   */
  invalidate(prefix: string, source: string, cause: string): void {
    this.#epoch += 1;
    this.#invalidated.push({ epoch: this.#epoch, prefix });
    if (this.#invalidated.length > REMEMBERED_INVALIDATIONS) this.#invalidated.shift();
    let dropped = 0;
    for (const key of [...this.#cache.keys()]) {
      if (key.startsWith(prefix)) {
        this.#cache.delete(key);
        dropped += 1;
      }
    }
    publishCacheInvalidation(this.#metric, source, cause, dropped);
  }

  /** Drops every answer whose key starts with `prefix` (a cluster replaced or removed: its source's check covers those in flight). */
  forget(prefix: string): void {
    for (const key of [...this.#cache.keys()]) if (key.startsWith(prefix)) this.#cache.delete(key);
  }

  /** Within its own TTL, or its scope's feed proves every change up to within that TTL applied. */
  #servable(entry: Entry<V>, context: C): boolean {
    const now = this.#now();
    if (now - entry.askedAt <= entry.ttlMs) return true;
    if (this.#freshness === undefined || entry.ttlMs < 0) return false;
    const proven = this.#freshness.feed.provenUntil(this.#freshness.scopeOf(context));
    return proven !== undefined && now - proven <= entry.ttlMs;
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
