/**
 * What a ServiceAccount change does to a cluster's cached tokens (source `kube-serviceaccounts`). A
 * token is bound to the ServiceAccount object it was requested for (its uid): once that object is
 * deleted, the API server refuses the token, and one re-created under the same name is another
 * object. So a DELETED account, or one ADDED with a uid other than the one known, has its tokens
 * dropped at once, a cached "no such ServiceAccount" among them (so a re-created account's first
 * request gets a token at once). A list after the watch's history was lost drops every account whose
 * uid changed, vanished or appeared meanwhile; the first list drops nothing (tokens keep their
 * 80 %-of-lifetime TTL, and are minted for the account that exists when asked).
 *
 * Only the namespaces whose accounts the token cache holds are followed: the per-user accounts'
 * (fundament-system) and the plugins' (`plugin-*`). A field selector cannot express a prefix
 * (metadata.namespace supports =, == and != only), nor name two namespaces, and no label marks both,
 * so the watch is cluster-wide and the rest is skipped here: an invalidation scans the whole cache,
 * and every new namespace's `default` account would otherwise cost one.
 */
import type { KubernetesObject } from "#kubernetes-client";
import type { FeedHandlers } from "./change-feed-watch.ts";
import { USER_SERVICE_ACCOUNT_NAMESPACE } from "../kube-reading/service-accounts.ts";

/** The source's name in metrics, logs and FeedStates. */
export const SERVICE_ACCOUNT_SOURCE = "kube-serviceaccounts";

export type ServiceAccountCause = "serviceaccount-deleted" | "serviceaccount-added" | "relist";

/** Where ServiceAccount changes drop cached tokens (TokenRequests). */
export interface TokenInvalidation {
  invalidateServiceAccount(clusterId: string, namespace: string, name: string, cause: ServiceAccountCause): void;
}

/** A namespace whose ServiceAccounts portcullis mints tokens for. */
export function holdsMintedAccounts(namespace: string): boolean {
  return namespace === USER_SERVICE_ACCOUNT_NAMESPACE || namespace.startsWith("plugin-");
}

/** The feed's handlers for one cluster, with the uid it knows of each followed account. */
export function serviceAccountHandlers(clusterId: string, tokens: () => TokenInvalidation): FeedHandlers<KubernetesObject> {
  /** `namespace/name` → uid, of the followed namespaces' accounts. */
  let known = new Map<string, string | undefined>();
  const keyOf = (object: KubernetesObject): string | undefined => {
    const namespace = object.metadata?.namespace ?? "";
    return holdsMintedAccounts(namespace) ? `${namespace}/${object.metadata?.name ?? ""}` : undefined;
  };
  const drop = (key: string, cause: ServiceAccountCause) => {
    const slash = key.indexOf("/");
    tokens().invalidateServiceAccount(clusterId, key.slice(0, slash), key.slice(slash + 1), cause);
  };
  return {
    listed: (objects, relist) => {
      const listed = new Map<string, string | undefined>();
      for (const object of objects) {
        const key = keyOf(object);
        if (key !== undefined) listed.set(key, object.metadata?.uid);
      }
      if (relist) {
        for (const [key, uid] of known) if (!listed.has(key) || listed.get(key) !== uid) drop(key, "relist");
        for (const key of listed.keys()) if (!known.has(key)) drop(key, "relist");
      }
      known = listed;
    },
    changed: (type, object) => {
      const key = keyOf(object);
      if (key === undefined) return;
      const uid = object.metadata?.uid;
      if (type === "DELETED") {
        known.delete(key);
        drop(key, "serviceaccount-deleted");
        return;
      }
      const had = known.has(key);
      const before = known.get(key);
      known.set(key, uid);
      // A MODIFIED account keeps its uid; one that does not is another object all the same.
      if ((type === "ADDED" && (!had || before !== uid)) || (had && before !== uid)) drop(key, "serviceaccount-added");
    },
  };
}
