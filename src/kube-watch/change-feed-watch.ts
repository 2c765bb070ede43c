/**
 * A list+watch of one resource on one cluster that proves how fresh what it has applied is (issue
 * 45, src/cache/freshness.ts): provenUntil() is a time p (performance.now(), ms) such that every
 * change to the resource committed before p has been handed to the handlers, which invalidate what
 * it changes before they return.
 *
 * The argument (issue 52). Each cycle, at time t (our clock), the feed makes a quorum read — a list
 * with resourceVersion unset, of one named object (quorumReadSelector: one etcd key, not the whole
 * resource) — and takes its resourceVersion R. Then it watches from the last resourceVersion applied,
 * with bookmarks. It proves t once the watch has delivered an event or a BOOKMARK whose
 * resourceVersion is at or past R, every event before it applied.
 *  - R covers t: a list with resourceVersion unset is served from etcd (or, where etcd supports
 *    progress requests, from a watch cache first brought up to etcd's current revision: Kubernetes'
 *    consistent reads from cache); either way R is no older than etcd's revision when the read was
 *    made, after t, so every change committed before t has a resourceVersion ≤ R.
 *  - The watch is ordered: the API server delivers a watcher's events in resourceVersion order and a
 *    bookmark at X only once every event up to X has been sent to it; a watcher it cannot keep up
 *    with is ended, never skipped past (cacheWatcher). So a delivered X ≥ R means every change ≤ R —
 *    every change committed before t — was delivered, and so applied.
 *  - No clean end of a watch proves anything: the server ends a watch at its timeout, or a slow
 *    watcher, with events still queued (the proof before issue 52 trusted that end, and a backlog
 *    not drained within a second proved a window whose RoleBinding deletion was never applied).
 * Assumptions, stated: resourceVersions are opaque strings to the API contract; here they are read as
 * what kube-apiserver makes them, etcd revisions (decimal int64s, one counter for every key, growing
 * with each commit), and compared as numbers. One that is not a decimal integer proves nothing.
 *
 * What makes it advance. A bookmark carries the watch cache's own resourceVersion, and the API
 * server sends a watch one about 2 s before its timeoutSeconds (none for a timeout below 3 s) and
 * about once a minute; for it to reach R the watch cache must have heard of R: by an event of this
 * resource, or by an etcd progress notification. On a quiet resource:
 *  - with etcd ≥ 3.4.31 / 3.5.13 (progress requests supported) the quorum read is served from the
 *    watch cache, which asks etcd for progress first: the bookmark that follows reaches R;
 *  - with an older etcd it is served by etcd itself, and the watch cache hears of newer revisions
 *    only through progress notifications, every --experimental-watch-progress-notify-interval
 *    (10 minutes unless set): the proof then lags by up to that interval, and past NOT_PROVING_MS
 *    the feed says why (docs/operations.md says what to set).
 * A proof that cannot advance only keeps the cluster's answers on their short TTLs: safe.
 *
 * Each watch has timeoutSeconds = WATCH_TIMEOUT_SECONDS (3, the shortest with a bookmark), so a cycle
 * is about 3 s and a proof lands about 1 s into it: now − p runs from about 1 s to 4.5 s on a healthy
 * cluster. p never moves back. It stops when a watch stalls (TCP alive, no bytes: its end never
 * comes; it is aborted STALL_GRACE_MS past its timeout and opened again), fails, carries an ERROR
 * event, or before the first list; a 410 (history gone) lists again, and `listed(…, true)` must
 * treat everything as changed. A list (resourceVersion unset) proves its send time at once.
 * Cost per watched resource, cluster and replica: a quorum read of one key and a watch (served from
 * the watch cache) every ~3 s, over the cluster's kept-alive pool; a full list only at the start and
 * after a 410.
 */
import { type KubernetesObject, Watch } from "#kubernetes-client";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { errorSummary, sanitizedMessage } from "../redaction/error-cause.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { ListSlots } from "../kube-fleet/list-slots.ts";
import { keepListWatchMetadata, LIST_TIMEOUT_MS, type ListPage, listInPages } from "./paged-list.ts";

/**
 * Each watch's timeoutSeconds: the shortest the API server schedules a bookmark for (2 s before it,
 * cacheWatcher.nextBookmarkTime), and it ends the watch this long after registering it.
 */
export const WATCH_TIMEOUT_SECONDS = 3;
/** A watch not ended this long after its timeout is stalled: aborted, and opened again. */
export const STALL_GRACE_MS = 2_000;
/** A watch the server ended before its timeout: wait this long before the next (a server shutting down). */
export const EARLY_END_PAUSE_MS = 1_000;
/** The longest a quorum read may take before the cycle counts as failed. */
export const QUORUM_READ_TIMEOUT_MS = 5_000;
/**
 * Not proven for this long, with nothing failing: the feed says so (unsynced), for the watch cache
 * hears of no newer revision (module comment). Three cycles.
 */
export const NOT_PROVING_MS = 10_000;
/** Quorum reads awaiting their proof, at most (a proof covers every older one). */
const PENDING_MAX = 32;

/**
 * The field selector of a quorum read: one named object (in one namespace, for a namespaced
 * resource), so that the API server reads one etcd key rather than the whole resource
 * (registry.Store.List narrows a single-name selector to its key). Whether it exists is irrelevant:
 * only the list's resourceVersion is read.
 */
export function quorumReadSelector(namespaced: boolean): string {
  return namespaced ? "metadata.namespace=kube-system,metadata.name=portcullis-quorum-read" : "metadata.name=portcullis-quorum-read";
}

/** An etcd revision read from a resourceVersion; undefined for anything else (module comment). */
export function revisionOf(resourceVersion: string | undefined): bigint | undefined {
  if (resourceVersion === undefined || !/^[1-9][0-9]{0,18}$/.test(resourceVersion)) return undefined;
  const revision = BigInt(resourceVersion);
  return revision <= 0x7fff_ffff_ffff_ffffn ? revision : undefined;
}

/** How one watch ended. */
export type WatchOutcome =
  /** The server ended it cleanly; `early` if sooner than its timeout (a server shutting down). */
  | { readonly kind: "ended"; readonly early: boolean }
  /** 410: the version it started from is no longer in the server's history; list again. */
  | { readonly kind: "gone" }
  | { readonly kind: "failed"; readonly detail: string };

/**
 * The proof, apart from I/O: what lists, quorum reads and the watch's deliveries prove, and why
 * the feed is not synced. Times are on the feed's clock (performance.now()).
 */
export class FreshnessProof {
  #proven: number | undefined;
  #detail: string | undefined = "not listed yet";
  /** Every change up to this revision is applied: the list's, then each event's or bookmark's delivered. */
  #applied: bigint | undefined;
  /** Quorum reads not proven yet, oldest first: when each was sent, and the revision it read. */
  #pending: Array<{ readonly at: number; readonly revision: bigint }> = [];

  /** A list sent at `sentAt`, read at `resourceVersion`, was applied whole: every change committed before it is in it. */
  listed(sentAt: number, resourceVersion: string): void {
    this.#pending = [];
    this.#applied = revisionOf(resourceVersion);
    this.#advance(sentAt);
  }

  /**
   * A quorum read sent at `sentAt` read `resourceVersion`: `sentAt` is proven once the watch has
   * delivered that far — at once if it has (nothing was committed since: no bookmark would come).
   */
  asked(sentAt: number, resourceVersion: string | undefined): void {
    const revision = revisionOf(resourceVersion);
    if (revision === undefined) {
      this.#detail = "a quorum read's resourceVersion is not an etcd revision: nothing can be proven";
      return;
    }
    if (this.#applied !== undefined && revision <= this.#applied) {
      this.#advance(sentAt);
      return;
    }
    this.#pending.push({ at: sentAt, revision });
    if (this.#pending.length > PENDING_MAX) this.#pending.shift();
  }

  /** The watch delivered an event (applied) or a bookmark at `resourceVersion`: every change up to it is applied. */
  reached(resourceVersion: string | undefined): void {
    const revision = revisionOf(resourceVersion);
    if (revision === undefined) return;
    if (this.#applied === undefined || revision > this.#applied) this.#applied = revision;
    let provable: number | undefined;
    while (this.#pending.length > 0 && this.#pending[0]!.revision <= revision) provable = this.#pending.shift()!.at;
    if (provable !== undefined) this.#advance(provable);
  }

  /** A watch ended: never a proof; how it ended may say why the feed is not synced. */
  watched(outcome: WatchOutcome): void {
    if (outcome.kind === "ended") {
      if (outcome.early) this.#detail = "the API server ended a watch before its timeout";
    } else {
      this.#detail = outcome.kind === "gone" ? "the watch's history is gone (410); listing again" : outcome.detail;
    }
  }

  /** A list, quorum read or watch could not be made. */
  failed(detail: string): void {
    this.#detail = detail;
  }

  /** Every change committed before this was applied; undefined before the first list. */
  get provenUntil(): number | undefined {
    return this.#proven;
  }

  /** Why the feed proves nothing at `now`: its last failure, or no proof for NOT_PROVING_MS; undefined while it proves. */
  detailAt(now: number): string | undefined {
    if (this.#detail !== undefined || this.#proven === undefined) return this.#detail;
    if (now - this.#proven <= NOT_PROVING_MS) return undefined;
    return `no event or bookmark reached a quorum read's resourceVersion within ${NOT_PROVING_MS / 1_000} s: the API server's watch cache hears of newer revisions only by events or etcd progress notifications (docs/operations.md)`;
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
  /**
   * A quorum read through the cluster's own client: its list with resourceVersion unset and
   * quorumReadSelector's field selector; resolves with the list's resourceVersion.
   */
  quorumRead(cluster: Cluster): (signal: AbortSignal) => Promise<string | undefined>;
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
    const detail = this.#proof.detailAt(this.#now());
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
          this.#proof.listed(sentAt, version);
          this.#recovered();
        } catch (err) {
          if (this.#stopped) return;
          this.#proof.failed(detailOf(err, "list", this.#resource.plural));
          this.#report();
          pauseMs = backoffMs;
        }
      } else {
        const askedAt = this.#now();
        let asked = false;
        try {
          const read = this.#resource.quorumRead(this.#cluster);
          const signal = AbortSignal.any([this.#stopping.signal, AbortSignal.timeout(QUORUM_READ_TIMEOUT_MS)]);
          this.#proof.asked(askedAt, await read(signal));
          asked = true;
        } catch (err) {
          if (this.#stopped) return;
          this.#proof.failed(detailOf(err, "list", this.#resource.plural));
          this.#report();
          pauseMs = backoffMs;
        }
        if (asked) {
          const { outcome, resourceVersion: reached } = await this.#watchOnce(resourceVersion);
          if (this.#stopped) return;
          resourceVersion = outcome.kind === "gone" ? undefined : reached;
          this.#proof.watched(outcome);
          if (outcome.kind === "failed") pauseMs = backoffMs;
          else if (outcome.kind === "ended" && outcome.early) pauseMs = EARLY_END_PAUSE_MS;
          if (this.#proof.detailAt(this.#now()) === undefined) this.#recovered();
          else this.#report();
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
            ? { kind: "ended", early: this.#now() - sentAt < WATCH_TIMEOUT_SECONDS * 1_000 }
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
          if (type !== "ADDED" && type !== "MODIFIED" && type !== "DELETED" && type !== "BOOKMARK") return;
          let version = (obj as T | undefined)?.metadata?.resourceVersion;
          if (type !== "BOOKMARK") {
            const object = keepMetadata(obj as T);
            this.#handlers.changed(type, object);
            version = object.metadata?.resourceVersion;
          }
          if (typeof version !== "string" || version === "") return;
          // Delivered in order, every event before it applied: the watch has reached `version`.
          reached = version;
          this.#proof.reached(version);
        } catch (err) {
          problem = { kind: "failed", detail: `applying a ${this.#resource.plural} event failed: ${errorSummary(err)}` };
          this.#abortWatch?.();
        }
      };
      this.#connect(this.#resource.path, { resourceVersion: from, timeoutSeconds: WATCH_TIMEOUT_SECONDS, allowWatchBookmarks: true }, onEvent, settle).then(
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
    const detail = this.#proof.detailAt(this.#now());
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
