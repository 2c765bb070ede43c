/**
 * Whether a cluster's API server says it is ready (`GET /readyz` answers 200). A starting
 * kube-apiserver serves SubjectAccessReviews before its RBAC informers have synced, and its RBAC
 * authorizer then finds no binding and answers "not allowed" with no evaluationError: a denial
 * that looks real. /readyz stays failing until those informers have synced (its `informer-sync`
 * and `poststarthook/rbac/bootstrap-roles` checks), so a denial is only believed from a server
 * that is ready. A "ready" answer is cached briefly per cluster, "not ready" never (the next
 * denial asks again, so recovery is not delayed); concurrent probes share one request; a probe
 * that fails or times out counts as not ready.
 */
import { Health } from "#kubernetes-client";
import { LRUCache } from "lru-cache";
import { type Clusters, perCluster } from "./clusters.ts";
import { withDeadline } from "../dependencies/deadline.ts";

/** The dependency name in errors, logs and metrics. */
const READYZ_DEPENDENCY = "kube-readyz";

export interface ApiServerReadinessOptions {
  readonly timeoutMs: number;
  /** How long a "ready" answer is trusted: far shorter than any API server restart. */
  readonly readyTtlMs?: number;
}

/** Ready answers held at once: one per cluster (they live 500 ms). */
const READY_ANSWERS_MAX = 4_096;

/** Thrown inside the cache so that "not ready" is never stored. */
class NotReady extends Error {}

export class ApiServerReadiness {
  readonly #cache: LRUCache<string, boolean>;

  constructor(clusters: Clusters, options: ApiServerReadinessOptions) {
    const readyTtlMs = options.readyTtlMs ?? 500;
    // Looked up per probe: the registry adds, replaces and removes clusters while this runs.
    const probeOf = perCluster((c) => new Health(c.kubeConfig));
    this.#cache = new LRUCache<string, boolean>({
      // A cluster whose answer is evicted is probed again on its next denial: that is all a small bound costs.
      max: READY_ANSWERS_MAX,
      ttl: readyTtlMs,
      fetchMethod: async (clusterId) => {
        const cluster = clusters.get(clusterId);
        if (cluster === undefined) throw new NotReady("cluster not configured");
        const ready = await withDeadline(READYZ_DEPENDENCY, options.timeoutMs, (signal) => probeOf(cluster).readyz({ signal }));
        if (!ready) throw new NotReady("/readyz did not answer 200");
        return true;
      },
    });
  }

  /** A replaced or removed cluster is asked again: the answer was the old API server's. */
  forgetCluster(clusterId: string): void {
    this.#cache.delete(clusterId);
  }

  async ready(clusterId: string): Promise<boolean> {
    try {
      return (await this.#cache.fetch(clusterId)) === true;
    } catch {
      return false;
    }
  }
}
