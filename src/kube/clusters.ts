/**
 * The clusters portcullis reaches, each through its own kubeconfig (a file or in-cluster). One
 * bounded HTTP/1.1 connection pool per API server carries every call to it: reviews, token
 * requests, lists and watches.
 */
import {
  type ConfigurationOptions,
  KubeConfig,
  Observable,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
} from "@kubernetes/client-node";
import { Agent, type Dispatcher } from "undici";
import type { KnownClusters } from "../authz/ports.ts";

export interface ClusterConfig {
  readonly id: string;
  /** Path to a kubeconfig file; absent means in-cluster configuration. */
  readonly kubeconfig?: string;
  /** The kubeconfig context to use; the current context when absent. */
  readonly context?: string;
}

export interface Cluster {
  readonly id: string;
  /** Hands the cluster's pool to every client-node call made through it, watches included. */
  readonly kubeConfig: KubeConfig;
  /** Per-call options for @kubernetes/client-node APIs: an abort signal. */
  callOptions(signal: AbortSignal): ConfigurationOptions;
}

/**
 * The pool settings for one API server.
 *
 * HTTP/1.1 only: undici negotiates HTTP/2 by default, and on Node 24 a request aborted while its
 * body is still queued on a shared HTTP/2 session (a 300 ms review deadline against a starting API
 * server) leaves nghttp2 sending empty DATA frames for a stream Node has already forgotten, forever,
 * on the main thread (docs/upstream/undici-h2-abort-freeze.md). Over HTTP/1.1 an abort closes one
 * connection and nothing else.
 */
export const API_SERVER_POOL = {
  allowH2: false,
  /** Bounds sockets and TLS handshakes per API server when every review is being aborted. */
  connections: 32,
  pipelining: 1,
  /** Below kube-apiserver's idle close, so a reused connection is rarely one the server is closing. */
  keepAliveTimeout: 30_000,
  keepAliveMaxTimeout: 60_000,
  /** Backstops for calls without their own deadline; reviews and lists abort far sooner. */
  headersTimeout: 30_000,
  /** Longer than client-node's 30 s watch inactivity abort, which decides when a silent watch is dead. */
  bodyTimeout: 60_000,
} as const satisfies Agent.Options;

/**
 * A KubeConfig whose client-node calls all go through one pool: client-node's Watch and generated
 * APIs take their dispatcher from applySecurityAuthentication, which otherwise builds a fresh
 * HTTP/2-capable Agent per call (per watch reconnect).
 */
class PooledKubeConfig extends KubeConfig {
  #pool: Dispatcher | undefined;

  usePool(pool: Dispatcher): void {
    this.#pool = pool;
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    // Never fall back to client-node's own dispatcher: it would speak HTTP/2.
    if (this.#pool === undefined) throw new Error("API server pool not set");
    context.setDispatcher(this.#pool);
  }
}

export class Clusters implements KnownClusters {
  readonly #clusters: ReadonlyMap<string, Cluster>;
  readonly #pools: readonly Dispatcher[];

  constructor(clusters: readonly Cluster[], pools: readonly Dispatcher[] = []) {
    this.#clusters = new Map(clusters.map((c) => [c.id, c]));
    this.#pools = pools;
  }

  static async load(configs: readonly ClusterConfig[]): Promise<Clusters> {
    const loaded = await Promise.all(configs.map(loadCluster));
    return new Clusters(
      loaded.map((l) => l.cluster),
      loaded.map((l) => l.pool),
    );
  }

  has(clusterId: string): boolean {
    return this.#clusters.has(clusterId);
  }

  get(clusterId: string): Cluster | undefined {
    return this.#clusters.get(clusterId);
  }

  all(): Cluster[] {
    return [...this.#clusters.values()];
  }

  /** Closes every pool's connections, ending open watches. */
  async close(): Promise<void> {
    await Promise.all(this.#pools.map((pool) => pool.destroy()));
  }
}

async function loadCluster(config: ClusterConfig): Promise<{ cluster: Cluster; pool: Dispatcher }> {
  const kubeConfig = new PooledKubeConfig();
  if (config.kubeconfig === undefined) kubeConfig.loadFromCluster();
  else kubeConfig.loadFromFile(config.kubeconfig);
  if (config.context !== undefined) kubeConfig.setCurrentContext(config.context);
  const current = kubeConfig.getCurrentCluster();
  if (current === null) throw new Error(`cluster ${config.id}: kubeconfig has no current cluster`);
  // The pool connects directly; silently bypassing a configured proxy would be worse than refusing it.
  if (current.proxyUrl !== undefined) throw new Error(`cluster ${config.id}: kubeconfig proxy-url is not supported`);

  const tls: Record<string, unknown> = {};
  await kubeConfig.applyToHTTPSOptions(tls);
  const pool = new Agent({
    ...API_SERVER_POOL,
    connect: {
      ca: tls["ca"] as Buffer | undefined,
      cert: tls["cert"] as Buffer | undefined,
      key: tls["key"] as Buffer | undefined,
      servername: tls["servername"] as string | undefined,
      rejectUnauthorized: tls["rejectUnauthorized"] as boolean | undefined,
      keepAlive: true,
      keepAliveInitialDelay: 30_000,
    },
  });
  kubeConfig.usePool(pool);
  const cluster: Cluster = {
    id: config.id,
    kubeConfig,
    callOptions(signal) {
      // The object-parameter APIs hand these options straight to the observable API, which calls
      // `.toPromise()` on what pre/post return: promise middleware fails every call with a TypeError.
      const middleware: ObservableMiddleware = {
        pre: (context: RequestContext) => {
          context.setSignal(signal);
          return new Observable(Promise.resolve(context));
        },
        post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
      };
      return { middleware: [middleware], middlewareMergeStrategy: "append" };
    },
  };
  return { cluster, pool };
}
