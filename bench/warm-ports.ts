/**
 * In-memory ports with warm caches, for the hot-path scenarios: every remote gate answers through the
 * real ports' cache (src/cache/cached-lookup.ts) under the real port's key (CanViewKeys, reviewKey,
 * tokenKey, with their tags), with a fake question behind it, so a check pays what it pays in production once the
 * caches are warm (the key, the LRU lookup, the promise, the hit counted on `portcullis:cache`) and
 * nothing remote. A miss (the first request per key, before the warm-up pass) answers at once,
 * never over a network.
 */
import { kubeApiEnvoyCluster } from "../src/envoy/kube-api-upstream.ts";
import type { AccessAttributes, Installation, MintedToken } from "../src/ports/policy-ports.ts";
import { CachedLookup } from "../src/cache/cached-lookup.ts";
import { KeyTags } from "../src/cache/key-tags.ts";
import { CanViewKeys } from "../src/fga/can-view.ts";
import type { PolicyPorts, PortsRuntime } from "../src/server/ports.ts";
import { tokenKey } from "../src/kube-calls/service-account-tokens.ts";
import { reviewKey } from "../src/kube-calls/user-access-review.ts";
import { bearerCredential } from "../src/headers/mutations.ts";
import { constantServiceAccountToken } from "./scenario3-allow.ts";
import type { BenchWorld } from "./workload.ts";

export { constantServiceAccountToken };

/** Long enough that nothing expires during a run: the caches stay warm. */
const WARM_TTL_MS = 3_600_000;
/** The OpenFGA store the warm can_view answers are keyed under (bench/hot-path.ts's storeId). */
const BENCH_STORE_ID = "01HVMMBCMGZNT3SED4Z17ECXCA";

/** A warm cache answering every miss with `answer`, as the real port's cache of that name. */
function warmLookup<V extends {}, C>(metric: string, maxEntries: number, answer: (context: C) => V): CachedLookup<V, C> {
  return new CachedLookup<V, C>({ metric, dependency: "bench", question: metric, maxEntries, ttlMs: WARM_TTL_MS, ask: async (context) => ({ value: answer(context) }) });
}

export function warmPorts(world: BenchWorld): PolicyPorts & PortsRuntime {
  const saAuthorization = bearerCredential(constantServiceAccountToken());
  const clusterIds = new Set(world.clusterIds);
  const installations = new Map<string, Installation>(world.installations.map((i) => [i.uid, i]));
  const canView = warmLookup<boolean, undefined>("openfga_can_view", 50_000, () => true);
  const canViewKeys = new CanViewKeys(50_000);
  const sar = warmLookup<boolean, undefined>("subject_access_review", 50_000, () => true);
  const sarTags = new KeyTags(50_000);
  const tokenTags = new KeyTags(20_000);
  const tokens = warmLookup<MintedToken, { clusterId: string }>("service_account_token", 20_000, ({ clusterId }) => ({
    authorization: saAuthorization,
    envoyCluster: kubeApiEnvoyCluster(clusterId),
  }));

  return {
    clusters: { has: (clusterId) => clusterIds.has(clusterId) },
    canView: { canView: (userId, clusterId) => canView.lookup(canViewKeys.key(BENCH_STORE_ID, userId, clusterId), undefined) },
    userAccess: {
      allowed: (clusterId: string, userId: string, attributes: AccessAttributes) => sar.lookup(reviewKey(sarTags.tagOf(clusterId), userId, attributes), undefined),
    },
    serviceAccountTokens: {
      token: (clusterId, namespace, name, ownerUid = "") => tokens.lookup(tokenKey(tokenTags.tagOf(clusterId), namespace, name, ownerUid), { clusterId }),
    },
    installations: {
      byUid: (clusterId, uid) => (clusterIds.has(clusterId) ? installations.get(uid) : undefined),
    },
    ready: () => true,
    indexSizes: () => [],
    stop: async () => {},
  };
}
