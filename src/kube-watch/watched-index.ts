/**
 * A list+watch of one resource on one cluster, feeding an in-memory store: a cluster-scoped custom
 * resource, or the labelled Secrets of one namespace (the cluster registry's).
 * Any watch error marks the index unsynced and restarts it with exponential backoff; the restart
 * clears the store before a fresh list, so objects deleted while disconnected disappear. Readers
 * must refuse to answer while `synced` is false: a view that may be stale is never served.
 *
 * A watch can also end or stall without any error: client-node's ListWatch reconnects from the
 * last resource version, without an error and without a list, both when the server closes the
 * stream and when nothing arrives for its request timeout, so an API server that accepts
 * connections and never answers would keep the index "synced" forever. Here:
 *  - the watch asks for bookmarks (an API server sends one about every minute on a quiet watch,
 *    once its watch cache has seen an event or an etcd progress notification since it started);
 *    a watch that heard nothing for longer than that minute (probeAfterMs) is ended and listed again
 *    in place, and no event, bookmark or successful list for the whole `inactivityMs` marks the
 *    index unsynced and restarts it through the same backoff → fresh list as an error;
 *  - a stream the server ends (its watch timeout, a 410) is followed by a list, never by a bare
 *    reconnect: ListWatch lists again in place, so the index stays synced while the view it serves
 *    was current until the end, and the silence bound still runs from the last sign of life.
 * `hasSynced` (synced at least once) is what process readiness waits for: one cluster's later
 * outage answers 503 for that cluster only, rather than taking every replica out of service.
 *
 * An index a PluginToken decision depends on (Revocations, PluginInstallations: issue 52) also
 * proves how fresh it is, as the change feeds do (change-feed-watch.ts has the argument): each watch
 * is short (timeoutSeconds 3, so the API server sends a bookmark within it), opened after a quorum
 * read at t, and t is proven once the watch delivers an event or a bookmark at or past the read's
 * resourceVersion. A clean end is then followed by a bare reconnect from the last version, not by a
 * list. `unavailable()` says why its lookups must not be answered: not synced, or not proven
 * within `freshnessBoundMs` — a hung stream closes the plugin path within that bound, not at the
 * silence probe; and it is given up STALL_GRACE_MS past its timeout and listed again, so the path
 * opens again as soon as a new stream flows.
 */
import { CoreV1Api, CustomObjectsApi, type KubernetesListObject, type KubernetesObject, ListWatch, type V1ObjectMeta, Watch } from "#kubernetes-client";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { EARLY_END_PAUSE_MS, FreshnessProof, QUORUM_READ_TIMEOUT_MS, quorumReadSelector, STALL_GRACE_MS, WATCH_TIMEOUT_SECONDS } from "./change-feed-watch.ts";
import { keepListWatchMetadata, LIST_TIMEOUT_MS, type ListPage, listInPages } from "./paged-list.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { ListSlots } from "../kube-fleet/list-slots.ts";

/**
 * How long a watch may stay silent (no event, no bookmark) before the index counts as unsynced.
 * kube-apiserver's watch cache sends a bookmark to each watcher that asked for them about once a
 * minute (and 2 s before a watch's own timeout; defaultBookmarkFrequency in the cacher), so 90 s is
 * well above a healthy quiet watch that hears them.
 */
export const DEFAULT_WATCH_INACTIVITY_MS = 90_000;

/**
 * kube-apiserver sends a watch that asked for bookmarks one every ~61 s (the cacher's
 * defaultBookmarkFrequency, a minute, plus its dispatch timer's second; test/kube-watch/bookmarked-watch.kube.test.ts),
 * once its watch cache has seen an event since it started.
 */
const BOOKMARK_PERIOD_MS = 61_250;

/** What a probe's list is left before the silence bound: its own deadline and the wait for a list slot. */
const PROBE_LIST_MS = 20_000;

/**
 * How long a watch may be silent before it is ended and listed again in place (the probe): past the
 * bookmark a healthy watch would have heard, so a watch that hears them is never listed again, and
 * PROBE_LIST_MS before the bound. A bound too short for both (below 81.25 s) probes at two thirds of it.
 * The default, 90 s, probes at 70 s.
 */
export function probeAfterMs(inactivityMs: number): number {
  const pastBookmark = inactivityMs - PROBE_LIST_MS;
  return pastBookmark > BOOKMARK_PERIOD_MS ? pastBookmark : Math.floor((inactivityMs * 2) / 3);
}

/**
 * Handed to ListWatch when the server ended a watch. After a clean end ListWatch reconnects from
 * the last resource version without a list; after a 410 it forgets that version and lists, diffing
 * the list against what it holds (deleting what is gone). A 410 is what this says, so it lists.
 */
const LIST_AGAIN = Object.assign(new Error("the API server ended the watch; list again"), { statusCode: 410 });

/** A 410 Gone answer to the watch request (history compacted). */
function isGone(err: unknown): boolean {
  const e = err as { statusCode?: unknown; code?: unknown };
  return e.statusCode === 410 || e.code === 410;
}

/** No event and no bookmark arrived within the inactivity bound. */
class WatchSilent extends Error {
  override readonly name = "WatchSilent";
}

export interface WatchedResource {
  /** "" for the core group, of which only namespaced Secrets are watched. */
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  /** Namespaced resources: the one namespace watched. Absent for cluster-scoped ones. */
  readonly namespace?: string;
  readonly labelSelector?: string;
}

/** Where the watched objects go: each arrival, each deletion, and a reset before every fresh list. */
export interface IndexStore<T extends KubernetesObject> {
  /**
   * What is kept of each listed or watched object, before ListWatch sees it: ListWatch holds its own
   * copy of every object (to diff a relist against, and to tell an update from a repeat), and the
   * API server's objects carry much the store never reads (managedFields, kubectl's
   * last-applied-configuration annotation, status conditions). Must keep every field put() and
   * remove() read, and keepListWatchMetadata()'s. Absent: the whole object is kept.
   */
  keep?(obj: T): T;
  put(obj: T): void;
  remove(obj: T): void;
  clear(): void;
  /** A list (after clear(), everything it holds) and its watch succeeded; for stores that act on a whole view. */
  synced?(): void;
  readonly size: number;
}

/** How long ago an index was last proven fresh (metrics); undefined when it does not prove. */
export function provenLagSeconds(provenUntil: number | undefined): number | undefined {
  return provenUntil === undefined ? undefined : Math.max(0, performance.now() - provenUntil) / 1_000;
}

/** The API path of a resource, a page of its list, and a quorum read (change-feed-watch.ts) resolving with its resourceVersion. */
function listerOf<T extends KubernetesObject>(cluster: Cluster, resource: WatchedResource): { path: string; listPage: ListPage<T>; quorumRead: (signal: AbortSignal) => Promise<string | undefined> } {
  const { group, version, plural, namespace, labelSelector } = resource;
  const scope = namespace === undefined ? "" : `/namespaces/${namespace}`;
  if (group === "") {
    if (plural !== "secrets" || namespace === undefined) throw new TypeError("of the core group, only the Secrets of one namespace are watched");
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    return {
      path: `/api/${version}${scope}/${plural}`,
      listPage: async (page, signal) => (await core.listNamespacedSecret({ namespace, labelSelector, ...page }, cluster.callOptions(signal))) as unknown as KubernetesListObject<T>,
      quorumRead: async (signal) => (await core.listNamespacedSecret({ namespace, fieldSelector: quorumReadSelector(false) }, cluster.callOptions(signal))).metadata?.resourceVersion,
    };
  }
  const custom = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
  return {
    path: `/apis/${group}/${version}${scope}/${plural}`,
    listPage: (page, signal) =>
      namespace === undefined
        ? custom.listClusterCustomObject({ group, version, plural, labelSelector, ...page }, cluster.callOptions(signal))
        : custom.listNamespacedCustomObject({ group, version, namespace, plural, labelSelector, ...page }, cluster.callOptions(signal)),
    // The namespace is in the path: a name alone narrows the read to one key.
    quorumRead: async (signal) => {
      const fieldSelector = quorumReadSelector(false);
      const list = namespace === undefined ? await custom.listClusterCustomObject({ group, version, plural, fieldSelector }, cluster.callOptions(signal)) : await custom.listNamespacedCustomObject({ group, version, namespace, plural, fieldSelector }, cluster.callOptions(signal));
      return (list as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
    },
  };
}

export interface WatchedIndexOptions {
  readonly logger: Logger;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
  /** No event or bookmark for this long: unsynced, then relisted (DEFAULT_WATCH_INACTIVITY_MS). */
  readonly inactivityMs?: number;
  /** Bounds how many lists run at once, shared with other indexes (FLEET_LIST_SLOTS); unbounded when absent. */
  readonly listSlots?: ListSlots;
  /** Prove freshness (module comment); lookups are refused while not proven within this bound. Absent: not proven. */
  readonly freshnessBoundMs?: number;
}

/** How the index names itself in log lines: `{index} index synced`, `{ objects: size }`. */
export interface IndexNames {
  readonly index: string;
  readonly objects: string;
}

export type ResolvedWatchOptions = Required<Omit<WatchedIndexOptions, "freshnessBoundMs">> & Pick<WatchedIndexOptions, "freshnessBoundMs">;

export function resolveWatchOptions(options: WatchedIndexOptions): ResolvedWatchOptions {
  return {
    ...(options.freshnessBoundMs === undefined ? {} : { freshnessBoundMs: options.freshnessBoundMs }),
    logger: options.logger,
    initialBackoffMs: options.initialBackoffMs ?? 250,
    maxBackoffMs: options.maxBackoffMs ?? 30_000,
    inactivityMs: options.inactivityMs ?? DEFAULT_WATCH_INACTIVITY_MS,
    listSlots: options.listSlots ?? new ListSlots(Number.POSITIVE_INFINITY),
  };
}

export class WatchedIndex<T extends KubernetesObject> {
  readonly #cluster: Cluster;
  readonly #resource: WatchedResource;
  readonly #store: IndexStore<T>;
  readonly #names: IndexNames;
  readonly #options: ResolvedWatchOptions;
  #listWatch: ListWatch<T> | undefined;
  /** Proven freshness, when freshnessBoundMs is set (module comment). */
  readonly #proof = new FreshnessProof();
  /** A list ListWatch is applying: proven (listed) once its watch is opened, which ListWatch does after applying it. */
  #listed: { readonly sentAt: number; readonly resourceVersion: string } | undefined;
  #synced = false;
  #hasSynced = false;
  #lastSyncedAt: Date | undefined;
  #stopped = false;
  #backoffMs: number;
  #restartTimer: NodeJS.Timeout | undefined;
  #silenceTimer: NodeJS.Timeout | undefined;
  #probeTimer: NodeJS.Timeout | undefined;
  /** The last proving watch ended cleanly before its timeout (a server shutting down): pause before the next. */
  #endedEarly = false;
  /** Ends the live watch so that ListWatch lists again in place; unset while no watch is live. */
  #listAgain: (() => void) | undefined;
  /** Aborted when the current list+watch is given up on: its list leaves the queue, or stops and frees its slot. */
  #givenUp: AbortController | undefined;
  /**
   * Which list+watch is current. Every failure moves it on, so callbacks of a watch already given
   * up on (its abort ends it once more) are ignored instead of restarting the index again.
   */
  #generation = 0;

  constructor(cluster: Cluster, resource: WatchedResource, store: IndexStore<T>, names: IndexNames, options: ResolvedWatchOptions) {
    this.#cluster = cluster;
    this.#resource = resource;
    this.#store = store;
    this.#names = names;
    this.#options = options;
    this.#backoffMs = options.initialBackoffMs;
  }

  /** The store's keep(), given objects only: anything else reaches ListWatch as it came, to fail there as before. */
  get #keep(): (obj: T) => T {
    const store = this.#store;
    if (store.keep === undefined) return (obj) => obj;
    return (obj) => (typeof obj === "object" && obj !== null ? store.keep!(obj) : obj);
  }

  get synced(): boolean {
    return this.#synced;
  }

  get hasSynced(): boolean {
    return this.#hasSynced;
  }

  /** Every change committed before this (performance.now()) is applied; undefined unless proven. */
  get provenUntil(): number | undefined {
    return this.#options.freshnessBoundMs === undefined ? undefined : this.#proof.provenUntil;
  }

  /** Why a lookup must not be answered now: not synced, or not proven within freshnessBoundMs; undefined when it may. */
  unavailable(): string | undefined {
    if (!this.#synced) return "not synced";
    const bound = this.#options.freshnessBoundMs;
    if (bound === undefined) return undefined;
    const proven = this.#proof.provenUntil;
    const lagMs = proven === undefined ? Number.POSITIVE_INFINITY : performance.now() - proven;
    if (lagMs <= bound) return undefined;
    return `not proven fresh within ${bound} ms (last proof ${proven === undefined ? "never" : `${Math.round(lagMs)} ms ago`})`;
  }

  /** When a list and its watch last succeeded (for /readyz?verbose); undefined before the first. */
  get lastSyncedAt(): Date | undefined {
    return this.#lastSyncedAt;
  }

  /** Resolves once the first list has been attempted, synced or not; failures restart in the background. */
  async start(): Promise<void> {
    if (this.#stopped) return;
    const generation = this.#generation;
    const givenUp = new AbortController();
    this.#givenUp = givenUp;
    const { path, listPage, quorumRead } = listerOf<T>(this.#cluster, this.#resource);
    const keep = this.#keep;
    const listWatch = new ListWatch<T>(
      path,
      this.#guardedWatch(generation, keep, quorumRead),
      // client-node sets no deadline on the list: a list the API server never answers would keep the
      // index unsynced for undici's 300 s default, long after the server is healthy again. Lists
      // (the first, and every one in place) wait for a slot; the deadline runs from the slot.
      async () => {
        const sentAt = performance.now();
        const list = await this.#options.listSlots.run((signal) => listInPages(listPage, keep, signal), { timeoutMs: LIST_TIMEOUT_MS, signal: givenUp.signal });
        this.#heardFrom(generation);
        const resourceVersion = list.metadata?.resourceVersion;
        if (generation === this.#generation && typeof resourceVersion === "string") this.#listed = { sentAt, resourceVersion };
        return list;
      },
      false,
      this.#resource.labelSelector,
      undefined,
      // ListWatch waits before a reconnect that follows another with no event in between (1 s
      // doubling to 30 s), so that a server ending every watch at once is not hammered. Capped at a
      // sixth of the bound, a watch is live again well before the next list in place is due.
      // A proving watch ends every WATCH_TIMEOUT_SECONDS by design, and on a quiet resource with no
      // bookmark (the API server promises none) that doubling stretched the cycle to 18 s, past the
      // freshness bound: a healthy cluster's PluginTokens answered 503 for 8 s of every 18. It
      // pauses only after a watch the server ended early, as the change feeds do.
      { delayFn: (ms) => sleep(this.#options.freshnessBoundMs === undefined ? Math.min(ms, Math.floor(this.#options.inactivityMs / 6)) : this.#endedEarly ? EARLY_END_PAUSE_MS : 0) },
    );
    // A list+watch given up on may still deliver a list it had in flight: never into a newer view.
    const current = () => generation === this.#generation;
    const put = (obj: T) => current() && this.#store.put(obj);
    listWatch.on("add", put);
    listWatch.on("update", put);
    listWatch.on("delete", (obj) => current() && this.#store.remove(obj));
    listWatch.on("error", (err) => this.#failed(generation, err));
    this.#listWatch = listWatch;
    try {
      await listWatch.start();
    } catch (err) {
      // e.g. a kubeconfig credential plugin failing: ListWatch rejects instead of emitting "error".
      this.#failed(generation, err);
    }
    // Any failure while listing or connecting moved the generation on.
    if (generation === this.#generation && !this.#stopped) {
      this.#synced = true;
      this.#hasSynced = true;
      this.#lastSyncedAt = new Date();
      this.#backoffMs = this.#options.initialBackoffMs;
      this.#heardFrom(generation);
      this.#store.synced?.();
      this.#options.logger.info({ cluster_id: this.#cluster.id, [this.#names.objects]: this.#store.size }, `${this.#names.index} index synced`);
    }
  }

  /**
   * A Watch that asks for bookmarks and counts every event as a sign of life. A stream the server
   * ended (no error, or a 410), or that #listAgain ended, is handed back to ListWatch as
   * LIST_AGAIN, so it lists before it watches again; every other end — an error, client-node's own
   * timeout (silence) — goes to #failed. Failures to connect go to #failed too: ListWatch
   * reconnects from a callback that nobody awaits, so a rejection there would be unhandled,
   * freezing the index while it still called itself synced.
   */
  #guardedWatch(generation: number, keep: (obj: T) => T, quorumRead: (signal: AbortSignal) => Promise<string | undefined>): Watch {
    const watch = new Watch(this.#cluster.kubeConfig);
    const proving = this.#options.freshnessBoundMs !== undefined;
    // client-node aborts a watch that receives no byte for 30 s (a private field, set by name). A
    // healthy quiet watch hears a bookmark only about once a minute, so its bound is ours; a proving
    // watch ends within its timeoutSeconds, so one silent STALL_GRACE_MS past it is stalled, as the
    // change feeds' are: given up and listed again then, not at the silence probe (a minute in
    // which the plugin path would answer 503 past freshnessBoundMs).
    Object.assign(watch, { requestTimeoutMs: proving ? WATCH_TIMEOUT_SECONDS * 1_000 + STALL_GRACE_MS : this.#options.inactivityMs });
    const connect = watch.watch.bind(watch);
    const current = () => generation === this.#generation && !this.#stopped;
    watch.watch = async (path, queryParams, callback, done) => {
      let endedForList = false;
      try {
        if (proving && current()) {
          // ListWatch opens a watch only after applying its list.
          if (this.#listed !== undefined) this.#proof.listed(this.#listed.sentAt, this.#listed.resourceVersion);
          this.#listed = undefined;
          const askedAt = performance.now();
          this.#proof.asked(askedAt, await quorumRead(AbortSignal.any([this.#givenUp!.signal, AbortSignal.timeout(QUORUM_READ_TIMEOUT_MS)])));
        }
        const openedAt = performance.now();
        const request = await connect(
          path,
          { ...queryParams, allowWatchBookmarks: true, ...(proving ? { timeoutSeconds: WATCH_TIMEOUT_SECONDS } : {}) },
          (phase, obj, event) => {
            this.#heardFrom(generation);
            // A BOOKMARK carries only a resourceVersion; an ERROR is a Status, read by ListWatch whole.
            callback(phase, phase === "ADDED" || phase === "MODIFIED" || phase === "DELETED" ? keep(obj) : obj, event);
            // Applied (ListWatch's handlers are synchronous), in order: the watch has reached it.
            if (proving && current() && phase !== "ERROR") this.#proof.reached((obj as KubernetesObject | undefined)?.metadata?.resourceVersion);
          },
          (err) => {
            if (generation === this.#generation) this.#listAgain = undefined;
            // A proving watch ends every few seconds: reconnected from the last version, its freshness proven by the reads.
            if (proving && !endedForList && (err === null || err === undefined)) {
              this.#endedEarly = performance.now() - openedAt < WATCH_TIMEOUT_SECONDS * 1_000;
              done(null);
            } else if (endedForList || err === null || err === undefined || isGone(err)) done(LIST_AGAIN);
            else this.#failed(generation, err);
          },
        );
        if (generation === this.#generation && !request.signal.aborted) {
          this.#listAgain = () => {
            endedForList = true;
            request.abort();
          };
        }
        return request;
      } catch (err) {
        this.#failed(generation, err);
        return new AbortController();
      }
    };
    return watch;
  }

  /**
   * A sign of life (an event, a bookmark, a list): the silence bound starts again. An API server
   * sends bookmarks only once its watch cache has seen an event or an etcd progress notification
   * since it started, so a quiet watch may be healthy yet silent: past probeAfterMs the live watch
   * is ended and ListWatch lists again in place (the index stays synced, and the list is the sign of
   * life). Past the whole bound without one, the index is unsynced.
   */
  #heardFrom(generation: number): void {
    if (generation !== this.#generation || this.#stopped) return;
    clearTimeout(this.#probeTimer);
    clearTimeout(this.#silenceTimer);
    const bound = this.#options.inactivityMs;
    this.#probeTimer = setTimeout(() => this.#listAgain?.(), probeAfterMs(bound));
    this.#silenceTimer = setTimeout(() => this.#failed(generation, new WatchSilent(`no watch event, bookmark or list within ${bound} ms`)), bound);
  }

  /**
   * The list+watch of `generation` failed or went silent: unsynced at once, then a fresh list after
   * the backoff. Later news from it is ignored.
   */
  #failed(generation: number, err: unknown): void {
    if (generation !== this.#generation) return;
    void this.#giveUpCurrent();
    if (this.#stopped) return;
    const delay = this.#backoffMs;
    this.#backoffMs = Math.min(this.#backoffMs * 2, this.#options.maxBackoffMs);
    this.#options.logger.warn(
      { cluster_id: this.#cluster.id, err, retry_in_ms: delay },
      `${this.#names.index} watch failed; restarting`,
    );
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => {
      // A fresh list replaces the whole view: objects deleted while disconnected disappear.
      this.#store.clear();
      void this.start();
    }, delay);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    await this.#giveUpCurrent();
  }

  /** Unsynced, and the current list+watch given up on: its timers cleared, its later news ignored. */
  #giveUpCurrent(): Promise<void> {
    this.#generation++;
    this.#synced = false;
    this.#listAgain = undefined;
    this.#givenUp?.abort(new Error("list+watch given up on"));
    clearTimeout(this.#probeTimer);
    clearTimeout(this.#silenceTimer);
    return this.#listWatch?.stop() ?? Promise.resolve();
  }
}

