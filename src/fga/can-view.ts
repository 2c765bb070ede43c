/**
 * The OpenFGA gate: Check(user:<sub>, can_view, cluster:<cluster_id>) against the Fundament model
 * (FUN-7). Cached with separate allow and deny TTLs, concurrent misses for one key coalesced, a
 * deadline below Envoy's; a failure or timeout is a 503, never an allow, and is never cached.
 * Answers are cached per store id: a store re-created under its name starts with none. With
 * `changesPollMs`, the store's ReadChanges is followed (tuple-changes.ts): a change drops the
 * store's answers, and an answer is kept past its TTL, up to `safetyNetTtlMs`, while every change is
 * known applied.
 */
import { ConsistencyPreference, CredentialsMethod, OpenFgaClient } from "@openfga/sdk";
import type { Logger } from "pino";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import type { ClusterViewCheck } from "../ports/policy-ports.ts";
import { CachedLookup } from "../cache/cached-lookup.ts";
import { KeyTags } from "../cache/key-tags.ts";
import type { FeedState } from "../cache/freshness.ts";
import { isStoreGone, OpenFgaStore, type StoreRef } from "./store.ts";
import { FEED_SOURCE, TupleChanges } from "./tuple-changes.ts";

/** How often a store name is looked up again: at most once a second, at least every 10 s. */
const STORE_LOOKUP = { minIntervalMs: 1_000, refreshMs: 10_000 };

export interface OpenFgaOptions {
  readonly apiUrl: string;
  /** By id, or by name (looked up at start and again when the id stops answering). */
  readonly store: StoreRef;
  /** Pin the model the gate evaluates (only with a store id); the store's latest when absent. */
  readonly authorizationModelId?: string;
  readonly apiToken?: string;
  readonly timeoutMs: number;
  readonly allowTtlMs: number;
  readonly denyTtlMs: number;
  readonly maxEntries: number;
  /** How often the store's changes are read; without it answers live for their TTL only. */
  readonly changesPollMs?: number;
  /** The longest an answer is kept while the changes are followed (only with changesPollMs). */
  readonly safetyNetTtlMs?: number;
  readonly logger?: Logger;
  /** Tests shorten the store name's lookup intervals. */
  readonly storeLookup?: { readonly minIntervalMs: number; readonly refreshMs: number };
}

/** What one cached Check asks. */
interface CheckAsked {
  readonly storeId: string;
  readonly userId: string;
  readonly clusterId: string;
}

export class OpenFgaCanView implements ClusterViewCheck {
  readonly #cache: CachedLookup<boolean, CheckAsked>;
  readonly #store: OpenFgaStore;
  readonly #changes: TupleChanges | undefined;
  readonly #keys: CanViewKeys;

  /** The store the gate asks now (for /readyz?verbose). */
  storeState(): { name: string; ok: boolean; state: string } {
    return this.#store.describe();
  }

  constructor(options: OpenFgaOptions) {
    // The store id goes with each call: it may change while the client lives.
    const client = new OpenFgaClient({
      apiUrl: options.apiUrl,
      ...(options.authorizationModelId === undefined ? {} : { authorizationModelId: options.authorizationModelId }),
      ...(options.apiToken === undefined
        ? {}
        : { credentials: { method: CredentialsMethod.ApiToken, config: { token: options.apiToken } } }),
      // Our own deadline bounds the call; a retry would only run past it.
      retryParams: { maxRetry: 0 },
      // withDeadline stops waiting but cannot abort the SDK's request: axios must drop the socket at
      // the same deadline, or a slow OpenFGA holds one open socket per check for the SDK's 10 s default.
      baseOptions: { timeout: options.timeoutMs },
    });
    this.#store = new OpenFgaStore(options.store, client, {
      timeoutMs: options.timeoutMs,
      ...(options.storeLookup ?? STORE_LOOKUP),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
    });
    this.#store.resolveInBackground();
    this.#keys = new CanViewKeys(options.maxEntries);
    this.#changes =
      options.changesPollMs === undefined
        ? undefined
        : new TupleChanges({
            client,
            currentStore: () => this.#store.current(),
            pollMs: options.changesPollMs,
            timeoutMs: options.timeoutMs,
            followModel: options.authorizationModelId === undefined,
            // Any change may reach any answer of the store (tuple-changes.ts says why).
            invalidate: (storeId, cause) => this.#cache.invalidate(this.#keys.storePrefix(storeId), FEED_SOURCE, cause, cause === "sync" ? "resync" : "change"),
            ...(options.logger === undefined ? {} : { logger: options.logger }),
          });
    const changes = this.#changes;
    // Kept until a change drops it, an answer must not come from OpenFGA's own Check cache (when
    // enabled, it serves what it computed before the change for its TTL; HIGHER_CONSISTENCY skips it).
    const consistency = changes === undefined ? {} : { consistency: ConsistencyPreference.HigherConsistency };
    this.#cache = new CachedLookup({
      metric: "openfga_can_view",
      dependency: "openfga",
      question: "Check",
      maxEntries: options.maxEntries,
      ttlMs: options.allowTtlMs,
      ...(changes === undefined
        ? {}
        : { freshness: { feed: changes, scopeOf: (asked: CheckAsked) => asked.storeId, safetyNetTtlMs: options.safetyNetTtlMs ?? options.allowTtlMs } }),
      ask: async (context: CheckAsked) => {
        const answer = await withDeadline(
          "openfga",
          options.timeoutMs,
          () =>
            client
              .check({ user: `user:${context.userId}`, relation: "can_view", object: `cluster:${context.clusterId}` }, { storeId: context.storeId, ...consistency })
              .catch((err: unknown) => {
                if (isStoreGone(err)) this.#store.forget(context.storeId);
                throw err;
              }),
          { "openfga.store_id": context.storeId, "openfga.relation": "can_view", "openfga.object": `cluster:${context.clusterId}` },
        );
        if (typeof answer.allowed !== "boolean") throw new DependencyUnavailable("openfga", "Check answered without a decision");
        return { value: answer.allowed, ttlMs: answer.allowed ? options.allowTtlMs : options.denyTtlMs };
      },
    });
    this.#changes?.start();
  }

  /** The store's changes feed, for metrics and /readyz?verbose (none without changesPollMs). */
  feedStates(): FeedState[] {
    return this.#changes?.feedStates() ?? [];
  }

  /** Stops following the store's changes: its answers fall back to their TTLs. */
  async stop(): Promise<void> {
    await this.#changes?.stop();
  }

  /** Not an async function: with the store's id known, as it nearly always is, a hit is the cache's settled promise alone. */
  canView(userId: string, clusterId: string): Promise<boolean> {
    const storeId = this.#store.current();
    if (storeId === undefined) return this.#store.id().then((id) => this.#lookup(id, userId, clusterId));
    return this.#lookup(storeId, userId, clusterId);
  }

  #lookup(storeId: string, userId: string, clusterId: string): Promise<boolean> {
    return this.#cache.lookup(this.#keys.key(storeId, userId, clusterId), { storeId, userId, clusterId });
  }
}

/**
 * The cache keys of the gate's Checks: `${store tag} ${cluster tag} ${user id}` (KeyTags), per store
 * id, so a store re-created under its name starts with no answers. The tags hold no space and the
 * user id comes last, so a key reads back as one (store, cluster, user): equal keys are equal Checks,
 * whatever a user id holds. ~40 characters where the ids were ~100 (bench/memory.ts --per-cache).
 */
export class CanViewKeys {
  readonly #stores: KeyTags;
  readonly #clusters: KeyTags;

  /** `maxEntries`: the cache's bound, which bounds the tag tables too (KeyTags). */
  constructor(maxEntries: number) {
    this.#stores = new KeyTags(maxEntries);
    this.#clusters = new KeyTags(maxEntries);
  }

  key(storeId: string, userId: string, clusterId: string): string {
    return `${this.#stores.tagOf(storeId)} ${this.#clusters.tagOf(clusterId)} ${userId}`;
  }

  /** What every key of the store's Checks starts with (and no other store's). */
  storePrefix(storeId: string): string {
    return `${this.#stores.tagOf(storeId)} `;
  }
}
