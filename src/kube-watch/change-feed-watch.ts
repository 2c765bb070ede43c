/**
 * A list+watch of one resource on one cluster that proves how fresh what it has applied is (issue
 * 45, src/cache/freshness.ts): provenUntil() is a time p (performance.now(), ms) such that every
 * change to the resource committed before p has been handed to the handlers, which invalidate what
 * it changes before they return.
 *
 * What kube-apiserver offers: no heartbeat on demand. Its watch cache sends a bookmark about once a
 * minute and 2 s before a watch's own timeoutSeconds, and only one newer than the resourceVersion
 * the watch started from (cacheWatcher.process: `event.ResourceVersion > resourceVersion`): on a
 * quiet resource (no event of it since that version) none arrives, at timeoutSeconds 1, 2, 3 or 4
 * alike, and below 3 none is even scheduled (nextBookmarkTime; measured on v1.37.2,
 * test/kube-watch/change-feed-watch.kube.test.ts). What it does offer, every time: a watch with
 * timeoutSeconds=T that it ends cleanly T s after registering it. So each watch here is a short one
 * (T = 1 s), opened again from the last resourceVersion applied, without bookmarks.
 *
 * The argument. A watch sent at o (our clock) from resourceVersion R (every change up to R applied)
 * is registered by the server's cacher (Cacher.Watch) at some server time s > o, which captures, under
 * its lock, every event its watch cache holds newer than R (getAllEventsSinceLocked); those are
 * written first and in order, then live events; the handler's timeout starts after that capture and
 * ends the response T s later (WatchServer.HandleHTTP). So a watch that ends cleanly no sooner than T
 * after it was sent, every event of which has been applied, proves every change the watch cache held
 * at s applied. The watch cache applies an etcd commit within milliseconds (its own etcd watch);
 * CACHE_LAG_MARGIN_MS allows it 250 ms, so p = o − CACHE_LAG_MARGIN_MS. A list (resourceVersion
 * unset) is a quorum read: everything committed before it was sent is in it, so p = its send time.
 * Where this is an assumption, not a proof:
 *  - a watch cache more than the margin behind etcd (its etcd watch broken while another API server
 *    takes writes) is not seen: the safety-net TTL (kube.sar.safetyNetTtlMs) bounds that;
 *  - the handler chooses between its timeout and events still pending at random, so a capture that
 *    took the whole T to write (hundreds of KB into a full socket) could be cut short at a clean
 *    end; the next watch, from the last version applied, carries the rest at once;
 *  - a clean end sooner than T (a server shutting down, a cacher re-initialising: those close a watch
 *    without writing its capture) proves nothing, and the next watch waits EARLY_END_PAUSE_MS.
 * p never moves back. It stops when a watch stalls (TCP alive, no bytes: its end never comes; it is
 * aborted STALL_GRACE_MS past T and opened again), fails, carries an ERROR event, or before the
 * first list; a 410 (history gone) lists again, and `listed(…, true)` must treat everything as changed.
 *
 * Lag on a healthy quiet cluster: a proof lands every T plus a round trip, so now − p runs from about
 * 1.3 s to 2.3 s: answers cached with a TTL of 5 s are always proven, with 2 s about two thirds of the time.
 * Cost: one watch request per T plus a round trip, ~1 request/s per watched resource per cluster per
 * replica (each served from the watch cache, no etcd read), over the cluster's kept-alive pool; a
 * list only at the start and after a 410.
 */
import { type KubernetesObject, Watch } from "#kubernetes-client";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { errorSummary, sanitizedMessage } from "../redaction/error-cause.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { ListSlots } from "../kube-fleet/list-slots.ts";
import { keepListWatchMetadata, LIST_TIMEOUT_MS, type ListPage, listInPages } from "./watched-index.ts";

/** Each watch's timeoutSeconds: the server ends it cleanly this long after registering it. */
export const WATCH_TIMEOUT_SECONDS = 1;
/** How far the watch cache may lag etcd for a proof to hold (see above). */
export const CACHE_LAG_MARGIN_MS = 250;
/** A watch not ended this long after its timeout is stalled: aborted, and opened again. */
export const STALL_GRACE_MS = 2_000;
/** A watch the server ended before its timeout: wait this long before the next (a server shutting down). */
export const EARLY_END_PAUSE_MS = 1_000;

/** How one watch ended. */
export type WatchOutcome =
  /** The server ended it cleanly: a proof if no sooner than its timeout. */
  | { readonly kind: "ended"; readonly sentAt: number; readonly endedAt: number }
  /** 410: the version it started from is no longer in the server's history; list again. */
  | { readonly kind: "gone" }
  | { readonly kind: "failed"; readonly detail: string };

/**
 * The proof, apart from I/O: what lists and watch ends prove, and why the feed is not synced.
 * Times are on the feed's clock (performance.now()).
 */
export class FreshnessProof {
  #proven: number | undefined;
  #detail: string | undefined = "not listed yet";

  /** A list sent at `sentAt` was applied whole: every change committed before it is in it. */
  listed(sentAt: number): void {
    this.#advance(sentAt);
  }

  /** A watch ended (its events all applied): see the module's comment for what a clean end proves. */
  watched(outcome: WatchOutcome): void {
    if (outcome.kind === "ended") {
      if (outcome.endedAt - outcome.sentAt >= WATCH_TIMEOUT_SECONDS * 1_000) this.#advance(outcome.sentAt - CACHE_LAG_MARGIN_MS);
      else this.#detail = "the API server ended a watch before its timeout";
    } else {
      this.#detail = outcome.kind === "gone" ? "the watch's history is gone (410); listing again" : outcome.detail;
    }
  }

  /** A list or a watch could not be made. */
  failed(detail: string): void {
    this.#detail = detail;
  }

  /** Every change committed before this was applied; undefined before the first list. */
  get provenUntil(): number | undefined {
    return this.#proven;
  }

  /** Why the last attempt proved nothing; undefined while each proves. */
  get detail(): string | undefined {
    return this.#detail;
  }

  #advance(to: number): void {
    this.#proven = this.#proven === undefined ? to : Math.max(this.#proven, to);
    this.#detail = undefined;
  }
}

/** What a feed does with what it hears; each returns once what the change affects is invalidated. */
export interface FeedHandlers<T extends KubernetesObject> {
  /** Every object the server holds: the first list, or (`relist`) one after the watch's history was lost. */
  listed(objects: readonly T[], relist: boolean): void;
  /** One change, in the order the server committed them. */
  changed(type: "ADDED" | "MODIFIED" | "DELETED", object: T): void;
}

/** The resource a feed follows, across all namespaces. */
export interface FeedResource<T extends KubernetesObject> {
  /** Its plural, as details name it ("clusterroles"). */
  readonly plural: string;
  /** The path its watch is opened on. */
  readonly path: string;
  /** One page of its list, through the cluster's own client. */
  lister(cluster: Cluster): ListPage<T>;
}

/** client-node's Watch.watch, or a test's. */
export type WatchConnect = Watch["watch"];

export interface ChangeFeedWatchOptions {
  readonly logger: Logger;
  /** The source's name in log lines (`kube-rbac`). */
  readonly source: string;
  readonly listSlots?: ListSlots;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
  readonly now?: () => number;
  /** Opens a watch; client-node's Watch on the cluster's pool when absent. */
  readonly connect?: WatchConnect;
}

/** The API server refused the credential (403): an operator's fix, logged once until it changes. */
function detailOf(err: unknown, verb: string, plural: string): string {
  const e = err as { code?: unknown; statusCode?: unknown } | undefined;
  const status = typeof e?.statusCode === "number" ? e.statusCode : typeof e?.code === "number" ? e.code : undefined;
  if (status === 403) return `forbidden: the credential cannot ${verb} ${plural}`;
  return `${verb} ${plural} failed: ${errorSummary(err)}`;
}

function isGone(err: unknown): boolean {
  const e = err as { code?: unknown; statusCode?: unknown } | undefined;
  return e?.statusCode === 410 || e?.code === 410;
}

export class ChangeFeedWatch<T extends KubernetesObject> {
  readonly #cluster: Cluster;
  readonly #resource: FeedResource<T>;
  readonly #handlers: FeedHandlers<T>;
  readonly #logger: Logger;
  readonly #source: string;
  readonly #listSlots: ListSlots;
  readonly #initialBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #now: () => number;
  readonly #connect: WatchConnect;
  readonly #proof = new FreshnessProof();
  readonly #stopping = new AbortController();
  /** Aborts the watch in flight, once its request is answered. */
  #abortWatch: (() => void) | undefined;
  /** The detail last logged, so that a lasting failure is logged once. */
  #logged: string | undefined;
  #running: Promise<void> | undefined;

  constructor(cluster: Cluster, resource: FeedResource<T>, handlers: FeedHandlers<T>, options: ChangeFeedWatchOptions) {
    this.#cluster = cluster;
    this.#resource = resource;
    this.#handlers = handlers;
    this.#logger = options.logger;
    this.#source = options.source;
    this.#listSlots = options.listSlots ?? new ListSlots(Number.POSITIVE_INFINITY);
    this.#initialBackoffMs = options.initialBackoffMs ?? 250;
    this.#maxBackoffMs = options.maxBackoffMs ?? 30_000;
    this.#now = options.now ?? (() => performance.now());
    if (options.connect === undefined) {
      const watch = new Watch(cluster.kubeConfig);
      // client-node aborts a watch that receives no byte for this long (its default is 30 s): a
      // stalled watch is one whose clean end has not come this long past its timeout.
      Object.assign(watch, { requestTimeoutMs: WATCH_TIMEOUT_SECONDS * 1_000 + STALL_GRACE_MS });
      this.#connect = watch.watch.bind(watch);
    } else {
      this.#connect = options.connect;
    }
  }

  /** Starts listing and watching in the background; never throws. */
  start(): void {
    this.#running ??= this.#run().catch((err: unknown) => this.#logger.error({ cluster_id: this.#cluster.id, source: this.#source, err }, "change feed stopped"));
  }

  /** Stops it: no handler is called after this resolves. */
  async stop(): Promise<void> {
    this.#stopping.abort(new Error("change feed stopped"));
    this.#abortWatch?.();
    await this.#running;
  }

  provenUntil(): number | undefined {
    return this.#proof.provenUntil;
  }

  /** Synced while each list and watch proves; the lag since the proof, and why not synced. */
  state(): { synced: boolean; lagSeconds?: number; detail?: string } {
    const proven = this.#proof.provenUntil;
    const detail = this.#proof.detail;
    return {
      synced: proven !== undefined && detail === undefined,
      ...(proven === undefined ? {} : { lagSeconds: Math.max(0, this.#now() - proven) / 1_000 }),
      ...(detail === undefined ? {} : { detail }),
    };
  }

  get #stopped(): boolean {
    return this.#stopping.signal.aborted;
  }

  async #run(): Promise<void> {
    let resourceVersion: string | undefined;
    let listedOnce = false;
    let backoffMs = this.#initialBackoffMs;
    while (!this.#stopped) {
      let pauseMs = 0;
      if (resourceVersion === undefined) {
        const sentAt = this.#now();
        try {
          const listPage = this.#resource.lister(this.#cluster);
          const list = await this.#listSlots.run((signal) => listInPages(listPage, keepMetadata, signal), { timeoutMs: LIST_TIMEOUT_MS, signal: this.#stopping.signal });
          if (this.#stopped) return;
          const version = list.metadata?.resourceVersion;
          if (typeof version !== "string" || version === "" || !Array.isArray(list.items)) throw new Error("the list carried no resourceVersion or items");
          this.#handlers.listed(list.items, listedOnce);
          listedOnce = true;
          resourceVersion = version;
          this.#proof.listed(sentAt);
          this.#recovered();
        } catch (err) {
          if (this.#stopped) return;
          this.#proof.failed(detailOf(err, "list", this.#resource.plural));
          this.#report();
          pauseMs = backoffMs;
        }
      } else {
        const { outcome, resourceVersion: reached } = await this.#watchOnce(resourceVersion);
        if (this.#stopped) return;
        resourceVersion = outcome.kind === "gone" ? undefined : reached;
        this.#proof.watched(outcome);
        if (outcome.kind === "failed") {
          this.#report();
          pauseMs = backoffMs;
        } else if (this.#proof.detail === undefined) {
          this.#recovered();
        } else if (outcome.kind === "ended") {
          pauseMs = EARLY_END_PAUSE_MS;
        }
      }
      if (pauseMs === 0) {
        backoffMs = this.#initialBackoffMs;
        continue;
      }
      if (pauseMs === backoffMs) backoffMs = Math.min(backoffMs * 2, this.#maxBackoffMs);
      try {
        await sleep(pauseMs, undefined, { signal: this.#stopping.signal });
      } catch {
        return;
      }
    }
  }

  /**
   * One watch from `from`: applies each change as it comes and resolves with how it ended and the
   * last resourceVersion applied. A handler that throws fails the watch (client-node would swallow it).
   */
  #watchOnce(from: string): Promise<{ outcome: WatchOutcome; resourceVersion: string }> {
    const sentAt = this.#now();
    let reached = from;
    let problem: WatchOutcome | undefined;
    return new Promise((resolve) => {
      let settled = false;
      const settle = (err: unknown) => {
        if (settled) return;
        settled = true;
        this.#abortWatch = undefined;
        const outcome: WatchOutcome =
          problem ??
          (err === null || err === undefined
            ? { kind: "ended", sentAt, endedAt: this.#now() }
            : isGone(err)
              ? { kind: "gone" }
              : {
                  kind: "failed",
                  detail: (err as { name?: unknown }).name === "TimeoutError" ? `a watch of ${this.#resource.plural} stalled (no end within ${WATCH_TIMEOUT_SECONDS * 1_000 + STALL_GRACE_MS} ms)` : detailOf(err, "watch", this.#resource.plural),
                });
        resolve({ outcome, resourceVersion: reached });
      };
      const onEvent = (type: string, obj: unknown) => {
        if (problem !== undefined || this.#stopped) return;
        try {
          if (type === "ERROR") {
            const status = obj as { code?: unknown; reason?: unknown } | undefined;
            const said = [status?.code, status?.reason].filter((v) => typeof v === "number" || (typeof v === "string" && v !== "")).join(" ");
            problem = status?.code === 410 ? { kind: "gone" } : { kind: "failed", detail: `watch ${this.#resource.plural} failed: an ERROR event (${sanitizedMessage(said) || "no status"})` };
            return;
          }
          if (type !== "ADDED" && type !== "MODIFIED" && type !== "DELETED") return;
          const object = keepMetadata(obj as T);
          this.#handlers.changed(type, object);
          const version = object.metadata?.resourceVersion;
          if (typeof version === "string" && version !== "") reached = version;
        } catch (err) {
          problem = { kind: "failed", detail: `applying a ${this.#resource.plural} event failed: ${errorSummary(err)}` };
          this.#abortWatch?.();
        }
      };
      this.#connect(this.#resource.path, { resourceVersion: from, timeoutSeconds: WATCH_TIMEOUT_SECONDS }, onEvent, settle).then(
        (controller) => {
          if (settled) return;
          this.#abortWatch = () => controller.abort();
          if (this.#stopped || problem !== undefined) controller.abort();
        },
        settle,
      );
    });
  }

  /** Logs a failure once per distinct detail: a lasting 403 is one line, not one per retry. */
  #report(): void {
    const detail = this.#proof.detail;
    if (detail === undefined || detail === this.#logged) return;
    this.#logged = detail;
    this.#logger.warn({ cluster_id: this.#cluster.id, source: this.#source, detail }, "change feed not proving freshness; its cluster's answers keep their short TTLs");
  }

  #recovered(): void {
    if (this.#logged === undefined) return;
    this.#logged = undefined;
    this.#logger.info({ cluster_id: this.#cluster.id, source: this.#source }, "change feed proving freshness again");
  }
}

/** What a feed keeps of an object: the metadata its handlers read (namespace, name, uid, resourceVersion). */
function keepMetadata<T extends KubernetesObject>(obj: T): T {
  return { apiVersion: obj.apiVersion, kind: obj.kind, metadata: keepListWatchMetadata(obj.metadata ?? {}) } as T;
}
