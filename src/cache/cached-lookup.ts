/**
 * One remote lookup behind an lru-cache (DESIGN.md: explicit TTLs, one in-flight fetch per key):
 * each answer says how long it may be kept, concurrent misses for a key share one question, a
 * failure is never cached and reaches the caller as DependencyUnavailable, and every lookup counts
 * as a hit or a miss on the `portcullis:cache` channel.
 *
 * A question asked of a source that can be replaced while it runs (a cluster re-pointed or removed)
 * names it: the source is looked up when asking and again when answered, and an answer from one
 * that is no longer current is an error, never cached — forget() cannot drop an entry whose fetch is
 * in flight (lru-cache's keys() skips it).
 */
import { LRUCache } from "lru-cache";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { publishCacheLookup } from "../metrics/events.ts";

/** An answer and how long it may be served; the lookup's `ttlMs` when it does not say. */
export interface CachedAnswer<V> {
  readonly value: V;
  readonly ttlMs?: number;
}

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
  /** Asks the dependency; throws when it gives no answer that may be kept. */
  ask(context: C, source: S): Promise<CachedAnswer<V>>;
}

export class CachedLookup<V extends {}, C, S = undefined> {
  // The context is typed unknown here (lru-cache's fetch() options cannot be resolved for a generic
  // context); lookup() is the only caller and always passes a C.
  readonly #cache: LRUCache<string, V, unknown>;
  readonly #metric: string;
  readonly #dependency: string;
  readonly #question: string;

  constructor(options: CachedLookupOptions<V, C, S>) {
    this.#metric = options.metric;
    this.#dependency = options.dependency;
    this.#question = options.question;
    const { source, dependency } = options;
    this.#cache = new LRUCache<string, V, unknown>({
      max: options.maxEntries,
      ttl: options.ttlMs,
      ...(options.now === undefined ? {} : { perf: { now: options.now } }),
      fetchMethod: async (_key, _stale, { options: entry, context: asking }) => {
        const context = asking as C;
        const asked = source?.current(context);
        if (source !== undefined && asked === undefined) throw new DependencyUnavailable(dependency, `${source.name} not configured`);
        const answer = await options.ask(context, asked as S);
        if (source !== undefined && source.current(context) !== asked) {
          throw new DependencyUnavailable(dependency, `${source.name} replaced or removed while asking`);
        }
        if (answer.ttlMs !== undefined) entry.ttl = answer.ttlMs;
        return answer.value;
      },
    });
  }

  /** The answer for `key`; `context` is what the question is built from, used on a miss only. */
  async lookup(key: string, context: C): Promise<V> {
    // A fresh entry is answered by get(), which costs a fraction of fetch(); anything else (absent,
    // stale, in flight) goes through fetch(). A stale entry is left for fetch() to refresh.
    const hit = this.#cache.get(key, { noDeleteOnStaleGet: true });
    if (hit !== undefined) {
      publishCacheLookup(this.#metric, "hit");
      return hit;
    }
    const status: LRUCache.Status<string, V> = {};
    const answer = await this.#cache.fetch(key, { context, status });
    publishCacheLookup(this.#metric, status.fetch);
    if (answer === undefined) throw new DependencyUnavailable(this.#dependency, `no ${this.#question} answer`);
    return answer;
  }

  /** Drops every answer whose key starts with `prefix` (those in flight are the source's check's). */
  forget(prefix: string): void {
    for (const key of [...this.#cache.keys()]) if (key.startsWith(prefix)) this.#cache.delete(key);
  }
}
