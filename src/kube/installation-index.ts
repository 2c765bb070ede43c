/**
 * The PluginInstallation index of every cluster (FUN-17 §11: "a local PluginInstallation informer"),
 * keyed by metadata.uid. Fed by a list+watch of plugins.fundament.io/v1 plugininstallations
 * (cluster-scoped), restarted with backoff after any error. Until a cluster's index has synced, and
 * whenever its watch is broken, lookups on it throw DependencyUnavailable: a deleted or re-pinned
 * installation must never be served from a view that may be stale.
 */
import { CustomObjectsApi, type KubernetesObject, ListWatch, Watch } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { Cluster } from "./clusters.ts";
import { DependencyUnavailable } from "../authz/errors.ts";
import type { Installation, InstallationLookup } from "../authz/ports.ts";

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

export interface WatchedIndexOptions {
  readonly logger: Logger;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
}

/** One cluster's index: a ListWatch whose errors mark it unsynced and restart it with backoff. */
class ClusterInstallationIndex {
  readonly #byUid = new Map<string, Installation>();
  readonly #cluster: Cluster;
  readonly #options: Required<WatchedIndexOptions>;
  #listWatch: ListWatch<PluginInstallationObject> | undefined;
  #synced = false;
  #stopped = false;
  #backoffMs: number;
  #restartTimer: NodeJS.Timeout | undefined;

  constructor(cluster: Cluster, options: Required<WatchedIndexOptions>) {
    this.#cluster = cluster;
    this.#options = options;
    this.#backoffMs = options.initialBackoffMs;
  }

  get synced(): boolean {
    return this.#synced;
  }

  get size(): number {
    return this.#byUid.size;
  }

  get(uid: string): Installation | undefined {
    return this.#byUid.get(uid);
  }

  async start(): Promise<void> {
    if (this.#stopped) return;
    const api = this.#cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    const path = `/apis/${PLUGIN_INSTALLATIONS.group}/${PLUGIN_INSTALLATIONS.version}/${PLUGIN_INSTALLATIONS.plural}`;
    const listWatch = new ListWatch<PluginInstallationObject>(
      path,
      new Watch(this.#cluster.kubeConfig),
      () => api.listClusterCustomObject({ ...PLUGIN_INSTALLATIONS }),
      false,
    );
    let failed = false;
    const put = (obj: PluginInstallationObject) => {
      const installation = installationOf(obj);
      if (installation !== undefined) this.#byUid.set(installation.uid, installation);
    };
    listWatch.on("add", put);
    listWatch.on("update", put);
    listWatch.on("delete", (obj) => {
      if (obj.metadata?.uid !== undefined) this.#byUid.delete(obj.metadata.uid);
    });
    listWatch.on("error", (err) => {
      failed = true;
      this.#onError(err);
    });
    this.#listWatch = listWatch;
    await listWatch.start();
    if (!failed && !this.#stopped) {
      this.#synced = true;
      this.#backoffMs = this.#options.initialBackoffMs;
      this.#options.logger.info({ cluster_id: this.#cluster.id, installations: this.#byUid.size }, "plugin installation index synced");
    }
  }

  #onError(err: unknown): void {
    this.#synced = false;
    if (this.#stopped) return;
    const delay = this.#backoffMs;
    this.#backoffMs = Math.min(this.#backoffMs * 2, this.#options.maxBackoffMs);
    this.#options.logger.warn(
      { cluster_id: this.#cluster.id, err: describe(err), retry_in_ms: delay },
      "plugin installation watch failed; restarting",
    );
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => {
      void this.#listWatch?.stop();
      // A fresh list replaces the whole view: objects deleted while disconnected disappear.
      this.#byUid.clear();
      void this.start();
    }, delay);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#synced = false;
    clearTimeout(this.#restartTimer);
    await this.#listWatch?.stop();
  }
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown; statusCode?: unknown }).code ?? (err as { statusCode?: unknown }).statusCode;
    return code === undefined ? err.message : `${err.name} ${String(code)}`;
  }
  return String(err);
}

export class InstallationIndex implements InstallationLookup {
  readonly #clusters: ReadonlyMap<string, ClusterInstallationIndex>;

  constructor(clusters: readonly Cluster[], options: WatchedIndexOptions) {
    const resolved: Required<WatchedIndexOptions> = {
      logger: options.logger,
      initialBackoffMs: options.initialBackoffMs ?? 250,
      maxBackoffMs: options.maxBackoffMs ?? 30_000,
    };
    this.#clusters = new Map(clusters.map((c) => [c.id, new ClusterInstallationIndex(c, resolved)]));
  }

  /** Starts every cluster's watch; resolves once each has made its first attempt (synced or not). */
  async start(): Promise<void> {
    await Promise.all([...this.#clusters.values()].map((index) => index.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#clusters.values()].map((index) => index.stop()));
  }

  /** True when every cluster's index has synced: the readiness of the plugin data path. */
  get synced(): boolean {
    return [...this.#clusters.values()].every((index) => index.synced);
  }

  /** Installations per cluster, for metrics. */
  sizes(): Array<{ clusterId: string; size: number; synced: boolean }> {
    return [...this.#clusters].map(([clusterId, index]) => ({ clusterId, size: index.size, synced: index.synced }));
  }

  byUid(clusterId: string, uid: string): Installation | undefined {
    const index = this.#clusters.get(clusterId);
    if (index === undefined) return undefined;
    if (!index.synced) throw new DependencyUnavailable("plugin-installation-index", `cluster ${clusterId} not synced`);
    return index.get(uid);
  }
}
