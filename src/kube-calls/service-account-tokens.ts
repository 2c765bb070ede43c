/**
 * TokenRequest for a ServiceAccount (the plugin's, or the user's own), cached until 80% of the
 * returned lifetime so a token is never handed out close to its expiry; concurrent misses share
 * one request. A plugin's token is cached per installation uid as well as per name: a token is
 * bound to the ServiceAccount object that was asked, so after a reinstall under the same name
 * (new installation, new ServiceAccount, same names) the old entry would be a token the API server
 * rejects with 401 until it expired. The ServiceAccount change feed (service-account-changes.ts)
 * drops an account's tokens, and a cached "no such ServiceAccount", as soon as it is deleted or
 * re-created. A token is kept past UNPROVEN_TOKEN_TTL_MS, up to its refresh time, only while that
 * feed proves its cluster's accounts within that TTL (issue 45's contract, cached-lookup.ts): with
 * the feed hung or failing, a deleted account's token is not served longer than without events.
 */
import { CoreV1Api } from "#kubernetes-client";
import { type Cluster, type Clusters, perCluster } from "../kube-fleet/clusters.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import type { MintedToken, ServiceAccountTokens } from "../ports/policy-ports.ts";
import { CachedLookup } from "../cache/cached-lookup.ts";
import type { ChangeFeed } from "../cache/freshness.ts";
import { KeyTags } from "../cache/key-tags.ts";
import { bearerCredential, safeHeaderValue, type SafeHeaderValue } from "../headers/mutations.ts";
import { SERVICE_ACCOUNT_SOURCE, type ServiceAccountCause, type TokenInvalidation } from "../kube-watch/service-account-changes.ts";

/** The dependency name in errors, logs and metrics. */
const TOKEN_REQUEST_DEPENDENCY = "kube-tokenrequest";
/** The cache's names: its hit/miss metric, the dependency and the question its errors name. */
const TOKEN_REQUEST_CACHE = { metric: "service_account_token", dependency: TOKEN_REQUEST_DEPENDENCY, question: "TokenRequest" } as const;

export interface ServiceAccountTokenOptions {
  /** At least 600: the API server's minimum. */
  readonly expirationSeconds: number;
  /** Audiences of the issued token; empty means the API server's own. */
  readonly audiences: readonly string[];
  readonly timeoutMs: number;
  readonly maxEntries: number;
  /** The ServiceAccount change feed (ClusterChangeFeeds.serviceAccounts); absent: tokens are kept UNPROVEN_TOKEN_TTL_MS only. */
  readonly serviceAccountFeed?: ChangeFeed;
  /** The cache's clock, the feed's (performance.now(); tests move it). */
  readonly now?: () => number;
}

/** Refresh at 80% of the lifetime (DESIGN.md, TokenRequest). */
const REFRESH_AT = 0.8;

interface Target {
  readonly clusterId: string;
  readonly namespace: string;
  readonly name: string;
}

/** A cached "no such ServiceAccount" is a short-lived answer, not an error. */
const MISSING: MintedToken = Object.freeze({ authorization: "" as SafeHeaderValue, envoyCluster: "" });
const MISSING_TTL_MS = 2_000;

function unlessMissing(token: MintedToken): MintedToken | undefined {
  return token === MISSING ? undefined : token;
}

/**
 * How long a token is served while the ServiceAccount feed does not prove its cluster (a hung or
 * failing watch): an account deleted meanwhile has its token minted again within this, as the
 * SubjectAccessReview allow TTL bounds a deleted RoleBinding.
 */
export const UNPROVEN_TOKEN_TTL_MS = 5_000;

export class TokenRequests implements ServiceAccountTokens, TokenInvalidation {
  readonly #cache: CachedLookup<MintedToken, Target, Cluster>;
  /** Each registration of a cluster keys its tokens with its own tag (forgetCluster retires it). */
  readonly #clusterTags: KeyTags;

  constructor(clusters: Clusters, options: ServiceAccountTokenOptions) {
    this.#clusterTags = new KeyTags(options.maxEntries);
    // Looked up per request: the registry adds, replaces and removes clusters while this runs.
    const apiOf = perCluster((c) => c.kubeConfig.makeApiClient(CoreV1Api));
    this.#cache = new CachedLookup({
      ...TOKEN_REQUEST_CACHE,
      maxEntries: options.maxEntries,
      ttlMs: MISSING_TTL_MS,
      ...(options.now === undefined ? {} : { now: options.now }),
      ...(options.serviceAccountFeed === undefined
        ? {}
        : { freshness: { feed: options.serviceAccountFeed, scopeOf: (context: Target) => context.clusterId, safetyNetTtlMs: options.expirationSeconds * 1_000 * REFRESH_AT } }),
      // Asked of a server the cluster no longer is (re-pointed or removed meanwhile): never cached,
      // not even as missing (a 404 from a replaced server says nothing of the new one).
      source: { name: "cluster", current: (context: Target) => clusters.get(context.clusterId) },
      ask: async (context: Target, cluster: Cluster) => {
        // On the wall clock, as the token's expirationTimestamp is.
        const requested = Date.now();
        // Undefined: the ServiceAccount does not exist (404).
        let response;
        try {
          response = await withDeadline(TOKEN_REQUEST_DEPENDENCY, options.timeoutMs, (signal) =>
            apiOf(cluster).createNamespacedServiceAccountToken(
              {
                name: context.name,
                namespace: context.namespace,
                body: {
                  apiVersion: "authentication.k8s.io/v1",
                  kind: "TokenRequest",
                  spec: { audiences: [...options.audiences], expirationSeconds: options.expirationSeconds },
                },
              },
              cluster.callOptions(signal),
            ),
            { "portcullis.cluster_id": context.clusterId, "kube.namespace": context.namespace, "kube.serviceaccount": context.name },
          );
        } catch (err) {
          if (httpStatusOf(err) !== 404) throw err;
        }
        if (response === undefined) return { value: MISSING, ttlMs: MISSING_TTL_MS, feedCovers: false };
        const token = response.status?.token;
        const expires = response.status?.expirationTimestamp;
        if (typeof token !== "string" || token === "" || expires === undefined) {
          throw new DependencyUnavailable(TOKEN_REQUEST_DEPENDENCY, "TokenRequest answered without a token");
        }
        // Checked once here, so that no response carrying it checks it again (it becomes a header value).
        const headerSafe = safeHeaderValue(token);
        if (headerSafe === undefined) throw new DependencyUnavailable(TOKEN_REQUEST_DEPENDENCY, "TokenRequest answered with a token that is not a header value");
        const lifetime = new Date(expires).getTime() - requested;
        if (!(lifetime > 0)) throw new DependencyUnavailable(TOKEN_REQUEST_DEPENDENCY, "TokenRequest returned an expired token");
        // The upstream of the cluster object asked, not of whatever is registered when a check reads it.
        const refreshMs = Math.floor(lifetime * REFRESH_AT);
        return { value: { authorization: bearerCredential(headerSafe), envoyCluster: cluster.envoyCluster }, ttlMs: Math.min(UNPROVEN_TOKEN_TTL_MS, refreshMs), safetyNetTtlMs: refreshMs };
      },
    });
  }

  /** Not an async function: a hit is the cache's settled promise and one step, without an async frame. */
  token(clusterId: string, namespace: string, name: string, ownerUid = ""): Promise<MintedToken | undefined> {
    return this.#cache.lookup(tokenKey(this.#clusterTags.tagOf(clusterId), namespace, name, ownerUid), { clusterId, namespace, name }).then(unlessMissing);
  }

  /**
   * The ServiceAccount was deleted or re-created: drops its tokens for every owner, and a cached
   * "missing"; a request in flight across this is answered but not kept.
   */
  invalidateServiceAccount(clusterId: string, namespace: string, name: string, cause: ServiceAccountCause): void {
    this.#cache.invalidate(serviceAccountKeyPrefix(this.#clusterTags.tagOf(clusterId), namespace, name), SERVICE_ACCOUNT_SOURCE, cause);
  }

  /**
   * Drops every token of a cluster that was replaced or removed: a token from another API server or
   * signing key would be refused upstream until it expired. A request in flight to it is not cached
   * when it returns (the fetch checks its cluster is still the one registered), and the cluster's
   * next registration keys its tokens with a new tag.
   */
  forgetCluster(clusterId: string): void {
    const tag = this.#clusterTags.retire(clusterId);
    if (tag !== undefined) this.#cache.forget(`${tag}/`);
  }
}

/**
 * The cache key of one ServiceAccount's token: the cluster's tag first (KeyTags: one registration of
 * the cluster, no "/" in it), so a replaced cluster's tokens can be dropped by prefix, then the
 * ServiceAccount, so its tokens for every owner can (serviceAccountKeyPrefix).
 */
export function tokenKey(clusterTag: string, namespace: string, name: string, ownerUid: string): string {
  return `${serviceAccountKeyPrefix(clusterTag, namespace, name)}${ownerUid}`;
}

/** What the keys of a ServiceAccount's tokens, for every owner, start with. */
function serviceAccountKeyPrefix(clusterTag: string, namespace: string, name: string): string {
  return `${clusterTag}/${namespace}/${name}/`;
}

/** The HTTP status of a client-node ApiException (wrapped by withDeadline), if any. */
function httpStatusOf(err: unknown): number | undefined {
  const cause = err instanceof DependencyUnavailable ? err.cause : err;
  const code = (cause as { code?: unknown } | undefined)?.code;
  return typeof code === "number" ? code : undefined;
}
