/**
 * In-memory ports with warm caches, for the hot-path scenarios: every remote gate answers from an
 * lru-cache `fetch()` keyed exactly as the real port keys it (src/fga/can-view.ts,
 * src/kube/user-access-review.ts, src/kube/service-account-tokens.ts), so a check pays what it pays
 * in production once the caches are warm (the key, the LRU lookup, the promise) and nothing remote.
 * A miss (the first request per key, before the warm-up pass) answers at once, never over a network.
 * Like the real ports, each lookup reports its outcome on the `portcullis:cache` channel (the
 * server's metrics count them).
 */
import { LRUCache } from "lru-cache";
import { kubeApiEnvoyCluster } from "../src/authz/kube-api-upstream.ts";
import type { AccessAttributes, Installation, MintedToken } from "../src/authz/ports.ts";
import type { Ports } from "../src/server/app.ts";
import { type SafeHeaderValue, safeHeaderValue } from "../src/headers/mutations.ts";
import { reviewKey } from "../src/kube/user-access-review.ts";
import { publishCacheLookup } from "../src/metrics/events.ts";
import type { BenchWorld } from "./workload.ts";

/** What a warm TokenRequest hands out: a ServiceAccount token of realistic size (kube-apiserver's are ~1 KB). */
export function constantServiceAccountToken(): SafeHeaderValue {
  const seg = (n: number) => "x".repeat(n);
  // Checked once, as the real port checks a token when it caches it.
  return safeHeaderValue(`eyJhbGciOiJSUzI1NiIsImtpZCI6ImJlbmNoIn0.${seg(700)}.${seg(342)}`)!;
}

/** Long enough that nothing expires during a run: the caches stay warm. */
const WARM_TTL_MS = 3_600_000;
const NO_DELETE = { noDeleteOnStaleGet: true };

export function warmPorts(world: BenchWorld): Ports {
  const saToken = constantServiceAccountToken();
  const clusterIds = new Set(world.clusterIds);
  const installations = new Map<string, Installation>(world.installations.map((i) => [i.uid, i]));

  const canView = new LRUCache<string, boolean, { userId: string; clusterId: string }>({
    max: 50_000,
    ttl: WARM_TTL_MS,
    fetchMethod: async () => true,
  });
  const sar = new LRUCache<string, boolean, { clusterId: string }>({ max: 50_000, ttl: WARM_TTL_MS, fetchMethod: async () => true });
  const tokens = new LRUCache<string, MintedToken, { clusterId: string }>({
    max: 20_000,
    ttl: WARM_TTL_MS,
    fetchMethod: async (_key, _stale, { context }) => ({ token: saToken, envoyCluster: kubeApiEnvoyCluster(context.clusterId) }),
  });

  return {
    clusters: { has: (clusterId) => clusterIds.has(clusterId) },
    canView: {
      async canView(userId, clusterId) {
        const key = `${userId} ${clusterId}`;
        const hit = canView.get(key, NO_DELETE);
        if (hit !== undefined) {
          publishCacheLookup("openfga_can_view", "hit");
          return hit;
        }
        const status: LRUCache.Status<string, boolean> = {};
        const answer = await canView.fetch(key, { context: { userId, clusterId }, status });
        publishCacheLookup("openfga_can_view", status.fetch);
        return answer === true;
      },
    },
    userAccess: {
      async allowed(clusterId: string, userId: string, attributes: AccessAttributes) {
        const key = reviewKey(clusterId, userId, attributes);
        const hit = sar.get(key, NO_DELETE);
        if (hit !== undefined) {
          publishCacheLookup("subject_access_review", "hit");
          return hit;
        }
        const status: LRUCache.Status<string, boolean> = {};
        const answer = await sar.fetch(key, { context: { clusterId }, status });
        publishCacheLookup("subject_access_review", status.fetch);
        return answer === true;
      },
    },
    serviceAccountTokens: {
      async token(clusterId, namespace, name) {
        const key = `${clusterId}/${namespace}/${name}`;
        const hit = tokens.get(key, NO_DELETE);
        if (hit !== undefined) {
          publishCacheLookup("service_account_token", "hit");
          return hit;
        }
        const status: LRUCache.Status<string, MintedToken> = {};
        const token = await tokens.fetch(key, { context: { clusterId }, status });
        publishCacheLookup("service_account_token", status.fetch);
        return token;
      },
    },
    installations: {
      byUid: (clusterId, uid) => (clusterIds.has(clusterId) ? installations.get(uid) : undefined),
    },
    ready: () => true,
    indexSizes: () => [],
    stop: async () => {},
  };
}
