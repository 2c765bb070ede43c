/**
 * The PluginInstallation index of every cluster (FUN-17 §11: "a local PluginInstallation informer"),
 * keyed by metadata.uid. Fed by a list+watch of plugins.fundament.io/v1 plugininstallations
 * (cluster-scoped), restarted with backoff after any error (watched-index.ts). Until a cluster's
 * index has synced, and whenever its watch is broken, lookups on it throw DependencyUnavailable: a
 * deleted or re-pinned installation must never be served from a view that may be stale.
 */
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Cluster } from "./clusters.ts";
import { type IndexStore, resolveWatchOptions, WatchedIndex, type WatchedIndexOptions } from "./watched-index.ts";
import { DependencyUnavailable } from "../authz/errors.ts";
import type { Installation, InstallationLookup } from "../authz/ports.ts";

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

/** One cluster's installations by metadata.uid, as its watch last reported them. */
class InstallationStore implements IndexStore<PluginInstallationObject> {
  readonly #byUid = new Map<string, Installation>();

  get size(): number {
    return this.#byUid.size;
  }

  get(uid: string): Installation | undefined {
    return this.#byUid.get(uid);
  }

  /** A scan: only `can-i` asks by name, once per question. */
  named(name: string): Installation | undefined {
    for (const installation of this.#byUid.values()) if (installation.name === name) return installation;
    return undefined;
  }

  put(obj: PluginInstallationObject): void {
    const installation = installationOf(obj);
    if (installation !== undefined) this.#byUid.set(installation.uid, installation);
  }

  remove(obj: PluginInstallationObject): void {
    if (obj.metadata?.uid !== undefined) this.#byUid.delete(obj.metadata.uid);
  }

  clear(): void {
    this.#byUid.clear();
  }
}

interface ClusterInstallationIndex {
  readonly store: InstallationStore;
  readonly watch: WatchedIndex<PluginInstallationObject>;
}

const NAMES = { index: "plugin installation", objects: "installations" } as const;

export class InstallationIndex implements InstallationLookup {
  readonly #clusters: ReadonlyMap<string, ClusterInstallationIndex>;
  /** Clusters whose first list has been attempted, synced or not. */
  readonly #attempted = new Set<string>();

  constructor(clusters: readonly Cluster[], options: WatchedIndexOptions) {
    const resolved = resolveWatchOptions(options);
    this.#clusters = new Map(
      clusters.map((c) => {
        const store = new InstallationStore();
        return [c.id, { store, watch: new WatchedIndex(c, PLUGIN_INSTALLATIONS, store, NAMES, resolved) }];
      }),
    );
  }

  /** Starts every cluster's watch; resolves once each has made its first attempt (synced or not). */
  async start(): Promise<void> {
    await Promise.all(
      [...this.#clusters].map(async ([clusterId, index]) => {
        await index.watch.start();
        this.#attempted.add(clusterId);
      }),
    );
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
   * alike. With one cluster, or none synced, the replica stays not ready until one syncs.
   */
  get ready(): boolean {
    const clusters = [...this.#clusters];
    if (clusters.length === 0) return true;
    return clusters.every(([id, index]) => index.watch.hasSynced || this.#attempted.has(id)) && clusters.some(([, index]) => index.watch.hasSynced);
  }

  /** Installations per cluster, for metrics and /readyz?verbose. */
  sizes(): Array<{ clusterId: string; size: number; synced: boolean; hasSynced: boolean; attempted: boolean; lastSyncedAt: Date | undefined }> {
    return [...this.#clusters].map(([clusterId, index]) => ({
      clusterId,
      size: index.store.size,
      synced: index.watch.synced,
      hasSynced: index.watch.hasSynced,
      attempted: this.#attempted.has(clusterId),
      lastSyncedAt: index.watch.lastSyncedAt,
    }));
  }

  byUid(clusterId: string, uid: string): Installation | undefined {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return undefined;
    if (!index.watch.synced) throw new DependencyUnavailable("plugin-installation-index", `cluster ${clusterId} not synced`);
    return index.store.get(uid);
  }

  /** The installation named `name` (metadata.name), for can-i; throws like byUid while unsynced. */
  byName(clusterId: string, name: string): Installation | undefined {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return undefined;
    if (!index.watch.synced) throw new DependencyUnavailable("plugin-installation-index", `cluster ${clusterId} not synced`);
    return index.store.named(name);
  }
}
