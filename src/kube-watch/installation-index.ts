/**
 * The PluginInstallation index of every cluster (FUN-17 §11: "a local PluginInstallation informer"),
 * served by metadata.uid (a uid or name more than one object claims serves none). Fed by a
 * list+watch of plugins.fundament.io/v1 plugininstallations (cluster-scoped), restarted with backoff
 * after any error (watched-index.ts). Until a cluster's index has synced, whenever its watch is
 * broken, and whenever it has not been proven fresh within `freshnessBoundMs` (issue 52), lookups on
 * it throw DependencyUnavailable: a deleted or re-pinned installation must never be served from a
 * view that may be stale. The cluster registry adds a cluster's index when the
 * cluster is registered, and stops and drops it when the cluster is replaced or removed (each
 * cluster's watch is its own: nothing waits on another's).
 */
import type { KubernetesObject } from "#kubernetes-client";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { FLEET_LIST_SLOTS } from "../kube-fleet/list-slots.ts";
import { type ContestedClaim, logContested, SoleClaims, watchKey } from "./sole-claims.ts";
import { keepListWatchMetadata } from "./paged-list.ts";
import { type IndexStore, provenLagSeconds, type ResolvedWatchOptions, resolveWatchOptions, WatchedIndex, type WatchedIndexOptions } from "./watched-index.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import type { Installation, InstallationLookup } from "../ports/policy-ports.ts";

export type { WatchedIndexOptions } from "./watched-index.ts";

export const PLUGIN_INSTALLATIONS = { group: "plugins.fundament.io", version: "v1", plural: "plugininstallations" } as const;

interface PluginInstallationObject extends KubernetesObject {
  spec?: {
    organizationId?: string;
    definitionRef?: { pluginName?: string; pluginVersion?: string; definitionHash?: string };
  };
  status?: { phase?: string };
}

/** The fields the gateway reads, from one PluginInstallation object. */
export function installationOf(obj: PluginInstallationObject): Installation | undefined {
  const uid = obj.metadata?.uid;
  const name = obj.metadata?.name;
  if (uid === undefined || name === undefined) return undefined;
  const ref = obj.spec?.definitionRef ?? {};
  return {
    uid,
    name,
    pluginName: ref.pluginName ?? "",
    pluginVersion: ref.pluginVersion ?? "",
    definitionHash: ref.definitionHash ?? "",
    phase: obj.status?.phase ?? "",
    terminating: obj.metadata?.deletionTimestamp !== undefined && obj.metadata.deletionTimestamp !== null,
    organizationId: obj.spec?.organizationId ?? "",
  };
}

/**
 * What the watch's own cache keeps of a PluginInstallation: exactly what installationOf() reads,
 * and ListWatch's metadata. Not managedFields, annotations (kubectl's last-applied-configuration
 * alone is the whole manifest again), labels, status conditions: several KiB an object in a real
 * cluster, for every installation of every cluster.
 */
export function keepInstallationFields(obj: PluginInstallationObject): PluginInstallationObject {
  const { metadata, spec, status } = obj;
  const ref = spec?.definitionRef;
  return {
    metadata: metadata && { ...keepListWatchMetadata(metadata), deletionTimestamp: metadata.deletionTimestamp },
    spec: spec && {
      organizationId: spec.organizationId,
      definitionRef: ref && { pluginName: ref.pluginName, pluginVersion: ref.pluginVersion, definitionHash: ref.definitionHash },
    },
    status: status && { phase: status.phase },
  };
}

/** Which claim of an installation another object also makes. */
export type InstallationClaim = "uid" | "name";

/**
 * One cluster's installations as its watch last reported them, served by metadata.uid. Kept by
 * ListWatch's key (watchKey): an installation deleted and re-created under its name while no watch
 * heard it (before a list in place) arrives as an update of that key, never as a deletion of the
 * old uid, which goes with it.
 *
 * An installation is served only while no other object claims its uid or its name (sole-claims.ts):
 * a token resolves by uid and acts as the ServiceAccount named after the name (plugin-{name}), so
 * two objects under one name would share that ServiceAccount, and whichever the watch heard last
 * would win on one replica and lose on another. The shipped CRD is cluster-scoped, where the API
 * server keeps both unique; a namespaced one, or a server that breaks the rule, makes them
 * contested, and a contested installation is unknown (403 at the gateway, NOT_FOUND to the mint).
 */
export class InstallationStore implements IndexStore<PluginInstallationObject> {
  readonly #byKey = new Map<string, Installation>();
  readonly #uids = new SoleClaims();
  readonly #names = new SoleClaims();
  readonly #onContested: (claim: InstallationClaim, contest: ContestedClaim) => void;

  constructor(onContested: (claim: InstallationClaim, contest: ContestedClaim) => void = () => {}) {
    this.#onContested = onContested;
  }

  get size(): number {
    return this.#byKey.size;
  }

  /** Uids and names claimed by more than one object now. */
  get contested(): number {
    return this.#uids.contested + this.#names.contested;
  }

  get(uid: string): Installation | undefined {
    return this.#served(this.#uids.owner(uid));
  }

  named(name: string): Installation | undefined {
    return this.#served(this.#names.owner(name));
  }

  #served(key: string | undefined): Installation | undefined {
    const installation = key === undefined ? undefined : this.#byKey.get(key);
    if (installation === undefined) return undefined;
    return this.#uids.owner(installation.uid) === key && this.#names.owner(installation.name) === key ? installation : undefined;
  }

  keep(obj: PluginInstallationObject): PluginInstallationObject {
    return keepInstallationFields(obj);
  }

  put(obj: PluginInstallationObject): void {
    const key = watchKey(obj.metadata);
    this.#drop(key);
    const installation = installationOf(obj);
    if (installation === undefined) return;
    this.#byKey.set(key, installation);
    const uidContest = this.#uids.claim(installation.uid, key);
    const nameContest = this.#names.claim(installation.name, key);
    if (uidContest !== undefined) this.#onContested("uid", uidContest);
    if (nameContest !== undefined) this.#onContested("name", nameContest);
  }

  remove(obj: PluginInstallationObject): void {
    this.#drop(watchKey(obj.metadata));
  }

  clear(): void {
    this.#byKey.clear();
    this.#uids.clear();
    this.#names.clear();
  }

  #drop(key: string): void {
    const previous = this.#byKey.get(key);
    if (previous === undefined) return;
    this.#byKey.delete(key);
    this.#uids.release(previous.uid, key);
    this.#names.release(previous.name, key);
  }
}

interface ClusterInstallationIndex {
  readonly store: InstallationStore;
  readonly watch: WatchedIndex<PluginInstallationObject>;
  /** Its first list has been attempted, synced or not. */
  attempted: boolean;
  /**
   * Whether the process's readiness waits for it: the clusters known at start do; a cluster
   * registered while the process serves does not (its own checks answer 503 until it syncs, and
   * adding a cluster must never take a serving replica out of service).
   */
  readonly gatesReadiness: boolean;
}

const NAMES = { index: "plugin installation", objects: "installations" } as const;

export class InstallationIndex implements InstallationLookup {
  readonly #clusters = new Map<string, ClusterInstallationIndex>();
  readonly #options: ResolvedWatchOptions;
  #started = false;

  constructor(clusters: readonly Cluster[], options: WatchedIndexOptions) {
    // Every cluster's list queues for the same few slots: 1,000 clusters starting at once on a
    // starved core would otherwise all time out together and retry together (list-slots.ts).
    this.#options = resolveWatchOptions({ listSlots: FLEET_LIST_SLOTS, ...options });
    for (const cluster of clusters) this.#clusters.set(cluster.id, this.#indexOf(cluster, true));
  }

  #indexOf(cluster: Cluster, gatesReadiness: boolean): ClusterInstallationIndex {
    const { logger } = this.#options;
    const store = new InstallationStore((claim, contest) => logContested(logger, { index: "plugininstallations", clusterId: cluster.id, claim }, contest));
    return { store, watch: new WatchedIndex(cluster, PLUGIN_INSTALLATIONS, store, NAMES, this.#options), attempted: false, gatesReadiness };
  }

  /** Starts every cluster's watch; resolves once each has made its first attempt (synced or not). */
  async start(): Promise<void> {
    this.#started = true;
    await Promise.all([...this.#clusters.values()].map((index) => this.#startWatch(index)));
  }

  async #startWatch(index: ClusterInstallationIndex): Promise<void> {
    await index.watch.start();
    index.attempted = true;
  }

  /**
   * Watches a cluster registered while running, or one whose registration changed (its old watch
   * is stopped first: the new one lists through the new credentials). Lookups on it throw until
   * its first list succeeds.
   */
  add(cluster: Cluster, options: { readonly gatesReadiness: boolean }): void {
    this.remove(cluster.id);
    const index = this.#indexOf(cluster, options.gatesReadiness);
    this.#clusters.set(cluster.id, index);
    if (this.#started) void this.#startWatch(index);
  }

  /** Stops a cluster's watch and forgets its installations: lookups on it answer "no such cluster". */
  remove(clusterId: string): void {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return;
    this.#clusters.delete(clusterId);
    void index.watch.stop();
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#clusters.values()].map((index) => index.watch.stop()));
  }

  /** True once every cluster's index has synced at least once. */
  get hasSynced(): boolean {
    return [...this.#clusters.values()].every((index) => index.watch.hasSynced);
  }

  /**
   * The process's readiness: every cluster's first list attempted, at least one cluster synced, and
   * every cluster synced at least once except those whose first attempt failed. One API server down
   * when a replica starts must not keep it out of service for every other cluster — as replicas are
   * replaced, that would empty the fleet — while that cluster's checks answer 503 on every replica
   * alike. With one cluster, or none synced, the replica stays not ready until one syncs. Clusters
   * registered while serving are never waited for, but one of them synced counts as a cluster served.
   */
  get ready(): boolean {
    const all = [...this.#clusters.values()];
    const gating = all.filter((index) => index.gatesReadiness);
    if (gating.length === 0) return true;
    return gating.every((index) => index.watch.hasSynced || index.attempted) && all.some((index) => index.watch.hasSynced);
  }

  /** Installations per cluster (and their contested uids and names), for metrics and /readyz?verbose. */
  sizes(): Array<{ clusterId: string; size: number; contested: number; synced: boolean; hasSynced: boolean; attempted: boolean; gatesReadiness: boolean; lastSyncedAt: Date | undefined; provenLagSeconds: number | undefined; outage?: string }> {
    return [...this.#clusters].map(([clusterId, index]) => {
      const unavailable = index.watch.unavailable();
      return {
      clusterId,
      size: index.store.size,
      contested: index.store.contested,
      synced: unavailable === undefined,
      provenLagSeconds: provenLagSeconds(index.watch.provenUntil),
      ...(unavailable === undefined || !index.watch.synced ? {} : { outage: `this cluster's PluginToken requests answer 503: its installations are ${unavailable}` }),
      hasSynced: index.watch.hasSynced,
      attempted: index.attempted,
      gatesReadiness: index.gatesReadiness,
      lastSyncedAt: index.watch.lastSyncedAt,
      };
    });
  }

  byUid(clusterId: string, uid: string): Installation | undefined {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return undefined;
    const unavailable = index.watch.unavailable();
    if (unavailable !== undefined) throw new DependencyUnavailable("plugin-installation-index", `cluster ${clusterId} ${unavailable}`);
    return index.store.get(uid);
  }

  /** The installation named `name` (metadata.name), for can-i; throws like byUid while unsynced. */
  byName(clusterId: string, name: string): Installation | undefined {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return undefined;
    const unavailable = index.watch.unavailable();
    if (unavailable !== undefined) throw new DependencyUnavailable("plugin-installation-index", `cluster ${clusterId} ${unavailable}`);
    return index.store.named(name);
  }
}
