/**
 * Follows the OpenFGA store's ReadChanges (issue 45), so a tuple change drops the can_view answers
 * at once and the cache may keep answers past their short TTL while every change is known applied.
 *
 * One follower for the store id the gate asks now (a store resolved by name may be re-created under
 * a new id: the old id's follower is dropped with its proof, the new one starts unproven). A poll
 * reads every page of changes, then, unless the gate pins a model, the store's latest model id;
 * polls never overlap and each has the gate's deadline. Only a poll that read to the end advances
 * the proof, so a failing, hung or not-yet-started feed leaves the answers on the short TTLs.
 *
 * Why provenUntil(store) = p, the start of the last complete poll, holds — every change committed
 * before p is applied:
 * - The first complete poll of a store drops all the store's answers ("sync"): whatever changed
 *   before it, nothing asked before it is served again, and what is asked after it sees OpenFGA's
 *   state after p.
 * - A later poll reads from `from` = (the newest change timestamp a complete poll saw) − window,
 *   on OpenFGA's own clock (a change's timestamp is its ULID's time, which orders ReadChanges).
 *   Each page is one consistent read, and pages walk the ULIDs upwards, so a change committed before
 *   the poll started and not older than `from` is on a page. A change committed after the previous
 *   complete poll started carries a ULID taken when its write began on some OpenFGA replica; its
 *   write took at most OpenFGA's request timeout (3 s by default; a cancelled transaction does not
 *   commit), the newest timestamp seen was committed at most one poll (the gate's timeout) after
 *   that poll began, and replica clocks differ by NTP's error: `window` covers all three, so a write
 *   that commits late with an older ULID (SQL datastores take the ULID before the transaction) is
 *   still read. Changes re-read inside the window are recognised and not applied twice.
 * - The first poll reads from its own wall clock − window (clock skew between portcullis and OpenFGA
 *   within the window; beyond it OpenFGA refuses a start time in its future, and the feed stays
 *   unproven).
 * - OpenFGA leaves out changes younger than OPENFGA_CHANGELOG_HORIZON_OFFSET (minutes, 0 by
 *   default): the proof assumes the default (docs/operations.md says so).
 * Any tuple change drops every answer of the store: a tuple can reach can_view through relations
 * (organization admin and viewer, cluster owner) and the store's latest model can change without a
 * tuple change, so no narrower mapping is provable without re-deriving it from the model in force.
 */
import type { Logger } from "pino";
import type { ChangeFeed, FeedState } from "../cache/freshness.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { errorSummary } from "../redaction/error-cause.ts";

/** What the follower reads of OpenFGA (the SDK's OpenFgaClient has both). */
export interface ChangesClient {
  readChanges(
    body: { type: string; startTime?: string },
    options: { storeId: string; continuationToken?: string; pageSize?: number },
  ): Promise<{ changes: ReadonlyArray<TupleChangeRead>; continuation_token?: string }>;
  /** Newest first. */
  readAuthorizationModels(options: { storeId: string; pageSize?: number }): Promise<{ authorization_models: ReadonlyArray<{ id: string }> }>;
}

export interface TupleChangeRead {
  readonly tuple_key: { readonly user: string; readonly relation: string; readonly object: string };
  readonly operation: string;
  /** RFC 3339 with nanoseconds: the change's ULID time, on OpenFGA's clock. */
  readonly timestamp: string;
}

/** Why a store's answers are dropped. */
export type ChangeCause = "tuple" | "model" | "sync";

export interface TupleChangesOptions {
  readonly client: ChangesClient;
  /** The store id the gate asks now; undefined while a name is unresolved. */
  readonly currentStore: () => string | undefined;
  readonly pollMs: number;
  /** One poll's deadline, every page included (the gate's timeout). */
  readonly timeoutMs: number;
  /** The gate asks the store's latest model: a new one changes answers too. */
  readonly followModel: boolean;
  /** Drops every answer of `storeId`. */
  readonly invalidate: (storeId: string, cause: ChangeCause) => void;
  readonly logger?: Logger;
  /** The proof's clock (performance.now(), the cache's); tests move it. */
  readonly now?: () => number;
  /** The wall clock, for the first poll's start time. */
  readonly wallNow?: () => number;
  readonly pageSize?: number;
}

export const FEED_SOURCE = "openfga-changes";
/** OpenFGA's largest ReadChanges page by default (--read-changes-max-page-size). */
const PAGE_SIZE = 100;
/** OpenFGA's default request timeout (a write's longest life) plus clock error between replicas. */
const COMMIT_WINDOW_MS = 5_000;

/** What is known of the followed store. */
interface Followed {
  readonly storeId: string;
  /** Where the first poll starts, on the wall clock. */
  readonly firstFromMs: number;
  /** The newest change timestamp a complete poll saw (OpenFGA's clock, ms). */
  newestMs?: number;
  /** Changes already applied that a later poll may read again, with their timestamps (ms). */
  readonly applied: Map<string, number>;
  modelId?: string;
  /** The start of the last complete poll. */
  provenAt?: number;
  /** Why the last poll failed; undefined once one completes. */
  failure?: string;
}

export class TupleChanges implements ChangeFeed {
  readonly #options: TupleChangesOptions;
  readonly #now: () => number;
  readonly #wallNow: () => number;
  readonly #pageSize: number;
  readonly #windowMs: number;
  #followed: Followed | undefined;
  #polling: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(options: TupleChangesOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#wallNow = options.wallNow ?? Date.now;
    this.#pageSize = options.pageSize ?? PAGE_SIZE;
    this.#windowMs = COMMIT_WINDOW_MS + options.timeoutMs;
  }

  provenUntil(scope: string): number | undefined {
    const followed = this.#followed;
    // A failing poll does not take back what the last complete one proved; the cache ages it.
    return followed?.storeId === scope ? followed.provenAt : undefined;
  }

  /** The followed store's state, for metrics and /readyz?verbose. */
  feedStates(): FeedState[] {
    const followed = this.#followed;
    if (followed === undefined) return [];
    const proven = followed.provenAt;
    if (proven === undefined || followed.failure !== undefined) {
      return [{ source: FEED_SOURCE, scope: followed.storeId, synced: false, detail: followed.failure ?? "first read of the changes not complete" }];
    }
    return [{ source: FEED_SOURCE, scope: followed.storeId, synced: true, lagSeconds: Math.max(0, this.#now() - proven) / 1000 }];
  }

  /** Polls every pollMs from now on, the next poll starting once the last has ended. */
  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    const loop = (): void => {
      const started = this.#now();
      // #pollOnce catches what a read throws; the catch keeps anything else from ending the process.
      void this.poll().catch(() => {}).finally(() => {
        if (this.#stopped) return;
        this.#timer = setTimeout(loop, Math.max(0, this.#options.pollMs - (this.#now() - started)));
        this.#timer.unref();
      });
    };
    loop();
  }

  /** No more polls; a poll in flight changes nothing once it ends. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#polling;
    this.#followed = undefined;
  }

  /** One poll of the store the gate asks now; a call while one runs joins it. */
  poll(): Promise<void> {
    this.#polling ??= this.#pollOnce().finally(() => {
      this.#polling = undefined;
    });
    return this.#polling;
  }

  async #pollOnce(): Promise<void> {
    if (this.#stopped) return;
    const storeId = this.#options.currentStore();
    // A name between two lookups has no id for a moment: the proof waits, as it does for a failed read.
    if (storeId === undefined) return;
    if (this.#followed?.storeId !== storeId) {
      this.#followed = { storeId, firstFromMs: this.#wallNow() - this.#windowMs, applied: new Map() };
    }
    const followed = this.#followed;
    const startedAt = this.#now();
    const fromMs = followed.newestMs === undefined ? followed.firstFromMs : Math.max(followed.firstFromMs, followed.newestMs - this.#windowMs);
    try {
      const read = await withDeadline(FEED_SOURCE, this.#options.timeoutMs, () => this.#readAll(storeId, fromMs, startedAt + this.#options.timeoutMs), {
        "openfga.store_id": storeId,
      });
      // A poll that outlived stop() or a store change proves nothing about what is followed now.
      if (this.#stopped || this.#followed !== followed) return;
      this.#apply(followed, fromMs, read.changes, read.modelId);
    } catch (err) {
      if (!this.#stopped && this.#followed === followed) this.#failed(followed, err);
      return;
    }
    if (followed.failure !== undefined || followed.provenAt === undefined) {
      this.#options.logger?.info({ store_id: storeId }, "following the OpenFGA store's changes: can_view answers are kept up to openfga.safetyNetTtlMs and dropped on a change");
    }
    followed.failure = undefined;
    followed.provenAt = startedAt;
  }

  /** Every page from `fromMs` on, then the latest model's id (when followed); throws past `deadlineAt`. */
  async #readAll(storeId: string, fromMs: number, deadlineAt: number): Promise<{ changes: TupleChangeRead[]; modelId: string | undefined }> {
    const { client } = this.#options;
    const changes: TupleChangeRead[] = [];
    let continuationToken: string | undefined;
    for (;;) {
      const page = await client.readChanges(
        // A continuation token carries its own position (OpenFGA ignores start_time with one).
        continuationToken === undefined ? { type: "", startTime: new Date(fromMs).toISOString() } : { type: "" },
        { storeId, pageSize: this.#pageSize, ...(continuationToken === undefined ? {} : { continuationToken }) },
      );
      changes.push(...page.changes);
      // A short page is the end as of its read; a full one may have more behind it.
      if (page.changes.length < this.#pageSize) break;
      if (page.continuation_token === undefined || page.continuation_token === "" || page.continuation_token === continuationToken) {
        throw new DependencyUnavailable(FEED_SOURCE, "a full page of changes without a way to the next");
      }
      continuationToken = page.continuation_token;
      // withDeadline stops waiting at the deadline; this stops the pages a late answer would go on to read.
      if (this.#now() >= deadlineAt || this.#stopped) throw new DependencyUnavailable(FEED_SOURCE, "changes not read to the end within the deadline");
    }
    if (!this.#options.followModel) return { changes, modelId: undefined };
    const latest = await client.readAuthorizationModels({ storeId, pageSize: 1 });
    const modelId = latest.authorization_models[0]?.id;
    if (modelId === undefined) throw new DependencyUnavailable(FEED_SOURCE, "the store has no authorization model");
    return { changes, modelId };
  }

  /** Drops the store's answers for what is new in this complete poll. */
  #apply(followed: Followed, fromMs: number, changes: readonly TupleChangeRead[], modelId: string | undefined): void {
    const { invalidate } = this.#options;
    // Checked before anything is recorded: a poll that fails here must leave no change marked applied.
    const timed = changes.map((change) => ({ key: changeKey(change), at: Date.parse(change.timestamp) }));
    if (timed.some(({ at }) => !Number.isFinite(at))) throw new DependencyUnavailable(FEED_SOURCE, "a change without a readable timestamp");
    let newTuples = 0;
    // The next read starts from the newest timestamp less the window: one from an OpenFGA replica
    // whose clock runs ahead must not move that start past changes not made yet, so it counts as
    // no later than this clock (a start too early only reads changes again, which are skipped).
    const wallNow = this.#wallNow();
    for (const { key, at } of timed) {
      if (followed.applied.has(key)) continue;
      followed.applied.set(key, at);
      const upTo = Math.min(at, wallNow);
      followed.newestMs = Math.max(followed.newestMs ?? upTo, upTo);
      newTuples += 1;
    }
    // What a later poll cannot read again (its start only moves forward) need not be remembered.
    for (const [key, at] of followed.applied) if (at < fromMs) followed.applied.delete(key);
    if (followed.provenAt === undefined) invalidate(followed.storeId, "sync");
    else if (newTuples > 0) invalidate(followed.storeId, "tuple");
    if (modelId !== undefined && followed.modelId !== undefined && modelId !== followed.modelId) invalidate(followed.storeId, "model");
    if (modelId !== undefined) followed.modelId = modelId;
  }

  /** The proof stops advancing; logged when the feed turns from healthy (or new) to failing. */
  #failed(followed: Followed, err: unknown): void {
    const reason = errorSummary(err);
    if (followed.failure === undefined) {
      this.#options.logger?.warn(
        { store_id: followed.storeId, reason },
        "reading the OpenFGA store's changes failed: can_view answers fall back to openfga.allowTtlMs/denyTtlMs until a read completes",
      );
    }
    followed.failure = reason;
  }
}

/** One change's identity: a tuple is written or deleted at most once at one instant. */
function changeKey(change: TupleChangeRead): string {
  const { user, relation, object } = change.tuple_key;
  return `${change.timestamp} ${change.operation} ${object}#${relation}@${user}`;
}
