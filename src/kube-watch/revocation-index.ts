/**
 * The deny-list every replica follows: a list+watch of `Revocation` objects
 * (portcullis.fundament.io/v1alpha1, cluster-scoped) on one cluster, the one `revocations` names
 * (the management cluster portcullis runs in, by default). `kubectl apply` of one object reaches
 * every replica's watch within milliseconds; no restart, no rollout.
 *
 * Fail closed: until the watch has synced, whenever it is broken or silent, and whenever it has not
 * been proven fresh within `freshnessBoundMs` (watched-index.ts; issue 52: a hung stream closes the
 * plugin path within that bound), `revoked()` throws DependencyUnavailable, so PluginToken requests
 * answer 503 rather than being allowed past a deny-list that may be missing an entry.
 */
import type { Logger } from "pino";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { watchKey } from "./sole-claims.ts";
import { type IndexStore, provenLagSeconds, resolveWatchOptions, WatchedIndex, type WatchedIndexOptions } from "./watched-index.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import {
  type Revocation,
  type RevocationList,
  type RevocationObject,
  RevocationSet,
  type RevocationSubject,
  REVOCATIONS,
  revocationOf,
} from "./revocations.ts";

type RevocationResource = RevocationObject & { readonly apiVersion?: string; readonly kind?: string };

/**
 * Feeds the watch into a RevocationSet, keyed as ListWatch keys the objects (watchKey); an object
 * that is not a valid entry is logged and left out.
 */
export class RevocationStore implements IndexStore<RevocationResource> {
  readonly set = new RevocationSet();
  readonly #logger: Logger;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  get size(): number {
    return this.set.size;
  }

  put(obj: RevocationResource): void {
    const revocation = revocationOf(obj);
    if ("invalid" in revocation) {
      // Left out rather than guessed at; its name stays so a previous valid version is not kept either.
      this.#logger.error({ revocation: watchKey(obj.metadata), problem: revocation.invalid }, "revocation object ignored: not a valid entry");
      if (obj.metadata?.name !== undefined) this.set.remove(watchKey(obj.metadata));
      return;
    }
    this.set.put(revocation);
  }

  remove(obj: RevocationResource): void {
    if (obj.metadata?.name !== undefined) this.set.remove(watchKey(obj.metadata));
  }

  clear(): void {
    this.set.clear();
  }
}

export class RevocationIndex implements RevocationList {
  readonly #cluster: Cluster;
  readonly #store: RevocationStore;
  readonly #watch: WatchedIndex<RevocationResource>;

  constructor(cluster: Cluster, options: WatchedIndexOptions) {
    this.#cluster = cluster;
    this.#store = new RevocationStore(options.logger);
    this.#watch = new WatchedIndex(cluster, REVOCATIONS, this.#store, { index: "revocation", objects: "revocations" }, resolveWatchOptions(options));
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): Promise<void> {
    return this.#watch.stop();
  }

  /** Synced at least once: part of the process's readiness. */
  get hasSynced(): boolean {
    return this.#watch.hasSynced;
  }

  /** As readiness reads it: a list that synced before and lost its watch is a 503 for plugin requests, not a "never synced" gate. */
  size(): { clusterId: string; size: number; synced: boolean; hasSynced: boolean; lastSyncedAt: Date | undefined; provenLagSeconds: number | undefined; outage?: string } {
    const unavailable = this.#watch.unavailable();
    return {
      clusterId: this.#cluster.id,
      size: this.#store.size,
      synced: unavailable === undefined,
      hasSynced: this.#watch.hasSynced,
      lastSyncedAt: this.#watch.lastSyncedAt,
      provenLagSeconds: provenLagSeconds(this.#watch.provenUntil),
      ...(unavailable === undefined ? {} : { outage: `every PluginToken request answers 503: the revocation list is ${unavailable}` }),
    };
  }

  revoked(subject: RevocationSubject): Revocation | undefined {
    const unavailable = this.#watch.unavailable();
    if (unavailable !== undefined) throw new DependencyUnavailable("revocation-list", unavailable);
    return this.#store.set.match(subject);
  }
}
