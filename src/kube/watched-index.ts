/**
 * A list+watch of one cluster-scoped custom resource on one cluster, feeding an in-memory store.
 * Any watch error marks the index unsynced and restarts it with exponential backoff; the restart
 * clears the store before a fresh list, so objects deleted while disconnected disappear. Readers
 * must refuse to answer while `synced` is false: a view that may be stale is never served.
 * `hasSynced` (synced at least once) is what process readiness waits for: one cluster's later
 * outage answers 503 for that cluster only, rather than taking every replica out of service.
 */
import { CustomObjectsApi, type KubernetesObject, ListWatch, Watch } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { Cluster } from "./clusters.ts";
import { errorSummary } from "../authz/errors.ts";

/** The longest a list may take before it counts as failed and is retried with backoff. */
const LIST_TIMEOUT_MS = 10_000;

export interface WatchedResource {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
}

/** Where the watched objects go: each arrival, each deletion, and a reset before every fresh list. */
export interface IndexStore<T extends KubernetesObject> {
  put(obj: T): void;
  remove(obj: T): void;
  clear(): void;
  readonly size: number;
}

export interface WatchedIndexOptions {
  readonly logger: Logger;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
}

/** How the index names itself in log lines: `{index} index synced`, `{ objects: size }`. */
export interface IndexNames {
  readonly index: string;
  readonly objects: string;
}

export function resolveWatchOptions(options: WatchedIndexOptions): Required<WatchedIndexOptions> {
  return {
    logger: options.logger,
    initialBackoffMs: options.initialBackoffMs ?? 250,
    maxBackoffMs: options.maxBackoffMs ?? 30_000,
  };
}

export class WatchedIndex<T extends KubernetesObject> {
  readonly #cluster: Cluster;
  readonly #resource: WatchedResource;
  readonly #store: IndexStore<T>;
  readonly #names: IndexNames;
  readonly #options: Required<WatchedIndexOptions>;
  #listWatch: ListWatch<T> | undefined;
  #synced = false;
  #hasSynced = false;
  #stopped = false;
  #backoffMs: number;
  #restartTimer: NodeJS.Timeout | undefined;

  constructor(cluster: Cluster, resource: WatchedResource, store: IndexStore<T>, names: IndexNames, options: Required<WatchedIndexOptions>) {
    this.#cluster = cluster;
    this.#resource = resource;
    this.#store = store;
    this.#names = names;
    this.#options = options;
    this.#backoffMs = options.initialBackoffMs;
  }

  get synced(): boolean {
    return this.#synced;
  }

  get hasSynced(): boolean {
    return this.#hasSynced;
  }

  /** Resolves once the first list has been attempted, synced or not; failures restart in the background. */
  async start(): Promise<void> {
    if (this.#stopped) return;
    const api = this.#cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    const { group, version, plural } = this.#resource;
    const listWatch = new ListWatch<T>(
      `/apis/${group}/${version}/${plural}`,
      this.#guardedWatch(),
      // client-node sets no deadline on the list: a list the API server never answers would keep the
      // index unsynced for undici's 300 s default, long after the server is healthy again.
      () => api.listClusterCustomObject({ group, version, plural }, this.#cluster.callOptions(AbortSignal.timeout(LIST_TIMEOUT_MS))),
      false,
    );
    let failed = false;
    const put = (obj: T) => this.#store.put(obj);
    listWatch.on("add", put);
    listWatch.on("update", put);
    listWatch.on("delete", (obj) => this.#store.remove(obj));
    listWatch.on("error", (err) => {
      failed = true;
      this.#onError(err);
    });
    this.#listWatch = listWatch;
    try {
      await listWatch.start();
    } catch (err) {
      // e.g. a kubeconfig credential plugin failing: ListWatch rejects instead of emitting "error".
      failed = true;
      this.#onError(err);
    }
    if (!failed && !this.#stopped) {
      this.#synced = true;
      this.#hasSynced = true;
      this.#backoffMs = this.#options.initialBackoffMs;
      this.#options.logger.info({ cluster_id: this.#cluster.id, [this.#names.objects]: this.#store.size }, `${this.#names.index} index synced`);
    }
  }

  /**
   * A Watch whose failures to (re)connect go to #onError. ListWatch reconnects from a callback that
   * nobody awaits, so a rejection there would be unhandled: the index would freeze while still
   * calling itself synced, and Node would end the process.
   */
  #guardedWatch(): Watch {
    const watch = new Watch(this.#cluster.kubeConfig);
    const connect = watch.watch.bind(watch);
    watch.watch = async (...args: Parameters<Watch["watch"]>) => {
      try {
        return await connect(...args);
      } catch (err) {
        this.#onError(err);
        return new AbortController();
      }
    };
    return watch;
  }

  #onError(err: unknown): void {
    this.#synced = false;
    if (this.#stopped) return;
    const delay = this.#backoffMs;
    this.#backoffMs = Math.min(this.#backoffMs * 2, this.#options.maxBackoffMs);
    this.#options.logger.warn(
      { cluster_id: this.#cluster.id, err: errorSummary(err), retry_in_ms: delay },
      `${this.#names.index} watch failed; restarting`,
    );
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => {
      void this.#listWatch?.stop();
      // A fresh list replaces the whole view: objects deleted while disconnected disappear.
      this.#store.clear();
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

