/**
 * The clusters portcullis reaches: the static ones, each through its own kubeconfig (a file or
 * in-cluster), and those the cluster registry adds and removes while it runs
 * (cluster-registry.ts), each from the credentials of its Secret. One bounded HTTP/1.1 connection
 * pool per API server carries every call to it: reviews, token requests, lists and watches; a
 * cluster replaced or removed has its pool closed, and nothing of it is shared with another cluster.
 */
import {
  type ConfigurationOptions,
  KubeConfig,
  Observable,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
} from "#kubernetes-client";
import { Agent, type Dispatcher } from "undici";
import type { KnownClusters } from "../ports/policy-ports.ts";
import { kubeApiEnvoyCluster, registeredEnvoyCluster } from "../envoy/kube-api-upstream.ts";

export interface ClusterConfig {
  readonly id: string;
  /** Path to a kubeconfig file; absent means in-cluster configuration. */
  readonly kubeconfig?: string;
  /** The kubeconfig context to use; the current context when absent. */
  readonly context?: string;
}

export interface Cluster {
  readonly id: string;
  /**
   * The Envoy cluster that reaches the API server this object talks to (kube-api-upstream.ts): an
   * allow carrying a token minted through this object names it, so the token goes where it is valid.
   */
  readonly envoyCluster: string;
  /** A registered cluster's `service-domain` (ClusterCredentials). */
  readonly serviceDomain?: string | undefined;
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
  /** Backstop for calls without their own deadline; reviews and lists abort far sooner. */
  headersTimeout: 30_000,
  /**
   * None: a watch body is silent for as long as the API server has nothing to say, and kube-apiserver
   * sends a bookmark only about once a minute, so undici's 60 s would end every quiet watch with an
   * error (unsynced, a 503 window and a fresh list, each minute, on every cluster). How long a watch
   * may be silent is watched-index.ts's bound (kube.watch.inactivityMs); every other call carries its
   * own deadline as an abort signal.
   */
  bodyTimeout: 0,
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

/** Where a cluster came from: the `clusters:` list of the file, or a Secret of the cluster registry. */
export type ClusterSource = "static" | "registry";

/** A cluster with the pool that carries its calls. */
export interface PooledCluster {
  readonly cluster: Cluster;
  readonly pool: Dispatcher;
}

/**
 * How long a replaced or removed cluster's pool lets the calls already on it finish (they all
 * carry deadlines far shorter) before its connections are destroyed.
 */
const RETIRED_POOL_GRACE_MS = 10_000;

export class Clusters implements KnownClusters {
  readonly #clusters = new Map<string, PooledCluster & { readonly source: ClusterSource }>();

  constructor(clusters: readonly Cluster[], pools: readonly Dispatcher[] = []) {
    clusters.forEach((cluster, i) => this.#clusters.set(cluster.id, { cluster, pool: pools[i] ?? NO_POOL, source: "static" }));
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
    return this.#clusters.get(clusterId)?.cluster;
  }

  serviceDomainOf(clusterId: string): string | undefined {
    const held = this.#clusters.get(clusterId);
    return held?.source === "registry" ? held.cluster.serviceDomain : undefined;
  }

  all(): Cluster[] {
    return [...this.#clusters.values()].map((c) => c.cluster);
  }

  sourceOf(clusterId: string): ClusterSource | undefined {
    return this.#clusters.get(clusterId)?.source;
  }

  /** How many clusters each source holds, for metrics. */
  counts(): Record<ClusterSource, number> {
    const counts = { static: 0, registry: 0 };
    for (const c of this.#clusters.values()) counts[c.source]++;
    return counts;
  }

  /**
   * Adds a registered cluster, or replaces the one registered under its id (a rotated credential,
   * another CA or server): calls made from now on use the new pool; the old pool is retired.
   * A static cluster is never replaced (the registry refuses its id before this).
   */
  put(pooled: PooledCluster): void {
    const previous = this.#clusters.get(pooled.cluster.id);
    if (previous?.source === "static") throw new Error(`cluster ${pooled.cluster.id} is configured statically`);
    this.#clusters.set(pooled.cluster.id, { ...pooled, source: "registry" });
    if (previous !== undefined) retire(previous.pool);
  }

  /** Removes a registered cluster and retires its pool; a static cluster stays. */
  remove(clusterId: string): void {
    const previous = this.#clusters.get(clusterId);
    if (previous === undefined || previous.source === "static") return;
    this.#clusters.delete(clusterId);
    retire(previous.pool);
  }

  /** Closes every pool's connections, ending open watches. */
  async close(): Promise<void> {
    await Promise.all([...this.#clusters.values()].map((c) => c.pool.destroy()));
  }
}

/** Stands in for the pool of a cluster built without one (tests' literal clusters). */
const NO_POOL = { destroy: async () => {}, close: async () => {} } as unknown as Dispatcher;

/** New calls are refused; those in flight finish within the grace, then the connections are destroyed. */
function retire(pool: Dispatcher): void {
  pool.close().catch(() => {});
  setTimeout(() => void pool.destroy().catch(() => {}), RETIRED_POOL_GRACE_MS).unref();
}

/**
 * One client per cluster object, made on first use: a replaced cluster is a new object, so its
 * clients are made anew from its new credentials, and the old ones go with the old object.
 */
export function perCluster<T extends object>(make: (cluster: Cluster) => T): (cluster: Cluster) => T {
  const made = new WeakMap<Cluster, T>();
  return (cluster) => {
    let client = made.get(cluster);
    if (client === undefined) made.set(cluster, (client = make(cluster)));
    return client;
  };
}

/** A registered cluster's connection, read from its Secret (cluster-registry.ts). */
export interface ClusterCredentials {
  readonly id: string;
  /** https URL of the API server. */
  readonly server: string;
  /** PEM CA bundle; the system's CAs when absent. */
  readonly caPem?: string;
  readonly tlsServerName?: string;
  /** The DNS suffix under which Envoy reaches the cluster's Services (plugin-proxy); absent: plugin-proxy cannot route to it. */
  readonly serviceDomain?: string;
  readonly credential: { readonly token: string } | { readonly certPem: string; readonly keyPem: string };
}

/** The cluster and pool for registered credentials: no file and no network is touched. */
export function connectCluster(credentials: ClusterCredentials): PooledCluster {
  const kubeConfig = new PooledKubeConfig();
  const base64 = (pem: string) => Buffer.from(pem).toString("base64");
  const credential = credentials.credential;
  kubeConfig.loadFromOptions({
    clusters: [
      {
        name: credentials.id,
        server: credentials.server,
        skipTLSVerify: false,
        ...(credentials.caPem === undefined ? {} : { caData: base64(credentials.caPem) }),
        ...(credentials.tlsServerName === undefined ? {} : { tlsServerName: credentials.tlsServerName }),
      },
    ],
    users: [
      "token" in credential
        ? { name: credentials.id, token: credential.token }
        : { name: credentials.id, certData: base64(credential.certPem), keyData: base64(credential.keyPem) },
    ],
    contexts: [{ name: credentials.id, cluster: credentials.id, user: credentials.id }],
    currentContext: credentials.id,
  });
  return pooled(credentials.id, { envoyCluster: registeredEnvoyCluster(credentials), serviceDomain: credentials.serviceDomain }, kubeConfig, {
    ca: credentials.caPem,
    servername: credentials.tlsServerName,
    ...("token" in credential ? {} : { cert: credential.certPem, key: credential.keyPem }),
  });
}

async function loadCluster(config: ClusterConfig): Promise<PooledCluster> {
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
  return pooled(config.id, { envoyCluster: kubeApiEnvoyCluster(config.id) }, kubeConfig, {
    ca: tls["ca"] as Buffer | undefined,
    cert: tls["cert"] as Buffer | undefined,
    key: tls["key"] as Buffer | undefined,
    servername: tls["servername"] as string | undefined,
    rejectUnauthorized: tls["rejectUnauthorized"] as boolean | undefined,
  });
}

interface PoolTls {
  readonly ca?: Buffer | string | undefined;
  readonly cert?: Buffer | string | undefined;
  readonly key?: Buffer | string | undefined;
  readonly servername?: string | undefined;
  readonly rejectUnauthorized?: boolean | undefined;
}

/** The cluster's own pool, handed to every client-node call made through its kubeconfig. */
function pooled(id: string, upstreams: Pick<Cluster, "envoyCluster" | "serviceDomain">, kubeConfig: PooledKubeConfig, tls: PoolTls): PooledCluster {
  const pool = new Agent({
    ...API_SERVER_POOL,
    connect: { ...tls, keepAlive: true, keepAliveInitialDelay: 30_000 },
  });
  kubeConfig.usePool(pool);
  const cluster: Cluster = {
    id,
    ...upstreams,
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
