/**
 * The clusters portcullis reaches, each through its own kubeconfig (a file or in-cluster). One
 * keep-alive connection pool per API server is shared by every call to it.
 */
import {
  type ConfigurationOptions,
  KubeConfig,
  Observable,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
} from "@kubernetes/client-node";
import { Agent } from "undici";
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
  readonly kubeConfig: KubeConfig;
  /** Per-call options for @kubernetes/client-node APIs: the shared pool, and an abort signal. */
  callOptions(signal: AbortSignal): ConfigurationOptions;
}

export class Clusters implements KnownClusters {
  readonly #clusters: ReadonlyMap<string, Cluster>;

  constructor(clusters: readonly Cluster[]) {
    this.#clusters = new Map(clusters.map((c) => [c.id, c]));
  }

  static async load(configs: readonly ClusterConfig[]): Promise<Clusters> {
    return new Clusters(await Promise.all(configs.map(loadCluster)));
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
}

async function loadCluster(config: ClusterConfig): Promise<Cluster> {
  const kubeConfig = new KubeConfig();
  if (config.kubeconfig === undefined) kubeConfig.loadFromCluster();
  else kubeConfig.loadFromFile(config.kubeconfig);
  if (config.context !== undefined) kubeConfig.setCurrentContext(config.context);
  if (kubeConfig.getCurrentCluster() === null) throw new Error(`cluster ${config.id}: kubeconfig has no current cluster`);

  // client-node builds a new connection pool per request; one pool per API server keeps TLS connections warm.
  const tls: Record<string, unknown> = {};
  await kubeConfig.applyToHTTPSOptions(tls);
  const pool = new Agent({
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
  return {
    id: config.id,
    kubeConfig,
    callOptions(signal) {
      // The object-parameter APIs hand these options straight to the observable API, which calls
      // `.toPromise()` on what pre/post return: promise middleware fails every call with a TypeError.
      const middleware: ObservableMiddleware = {
        pre: (context: RequestContext) => {
          context.setDispatcher(pool);
          context.setSignal(signal);
          return new Observable(Promise.resolve(context));
        },
        post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
      };
      return { middleware: [middleware], middlewareMergeStrategy: "append" };
    },
  };
}
