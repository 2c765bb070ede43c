/**
 * What the decision code tells the metrics: published on diagnostics channels, so the gates and
 * ports know nothing of Prometheus and cost nothing when no one listens.
 */
import { channel } from "node:diagnostics_channel";

export interface CacheLookup {
  readonly cache: string;
  /** lru-cache's fetch status: hit, miss, inflight, stale, refresh … */
  readonly outcome: string;
}

export interface DependencyCall {
  readonly dependency: string;
  readonly seconds: number;
  readonly ok: boolean;
}

export interface CheckDecision {
  readonly policy: string;
  /** `allowed` or the denial's reason code. */
  readonly outcome: string;
  readonly seconds: number;
}

/** A Konfidence roleBindings entry that never matches, reported when its Project arrives. */
export interface InvalidSubject {
  /** A closed set (src/konfidence-model/role-bindings.ts BindingProblemCode). */
  readonly problem: string;
}

export const checkDecisions = channel("portcullis:decision");
export const cacheLookups = channel("portcullis:cache");
export const dependencyCalls = channel("portcullis:dependency");
export const invalidSubjects = channel("portcullis:konfidence-invalid-subject");

/** An OIDC provider's failure backoff changed: the pause now in force after a failed fetch, 0 when it recovered. */
export interface ProviderBackoffChange {
  /** The provider's discovery URL (configuration, never a credential). */
  readonly provider: string;
  readonly seconds: number;
}

/** A fetch to an OIDC provider refused because it is backing off. */
export interface ProviderFetchRefused {
  readonly provider: string;
}

export const providerBackoffs = channel("portcullis:oidc-provider-backoff");
export const providerFetchesRefused = channel("portcullis:oidc-provider-fetch-refused");

export function publishProviderBackoff(provider: string, seconds: number): void {
  if (providerBackoffs.hasSubscribers) providerBackoffs.publish({ provider, seconds } satisfies ProviderBackoffChange);
}

export function publishProviderFetchRefused(provider: string): void {
  if (providerFetchesRefused.hasSubscribers) providerFetchesRefused.publish({ provider } satisfies ProviderFetchRefused);
}

/** FUN-17 §3: a PluginToken refused by a platform API (a cross-service replay). */
export interface PluginTokenReplay {
  /** A configured service name (a closed set). */
  readonly service: string;
  /** The request's path: client-chosen, so bounded where it becomes a label. */
  readonly method: string;
}

export const pluginTokenReplays = channel("portcullis:plugin-token-replay");

export function publishPluginTokenReplay(service: string, method: string): void {
  if (pluginTokenReplays.hasSubscribers) pluginTokenReplays.publish({ service, method } satisfies PluginTokenReplay);
}

/** A PluginToken request or a mint refused by the deny-list (issue 17). */
export interface RevokedRequest {
  /** The policy, or `GetInstallationManifest` for a refused mint. */
  readonly policy: string;
  /** Which kind of entry matched: installation, plugin or user. */
  readonly scope: string;
}

export const revokedRequests = channel("portcullis:revoked");

export function publishRevoked(policy: string, scope: string): void {
  if (revokedRequests.hasSubscribers) revokedRequests.publish({ policy, scope } satisfies RevokedRequest);
}

/** An allowed request bounded so it ends in time (issue 54): a kube-api-proxy stream, any plugin-proxy request. */
export interface BoundedStream {
  readonly policy: string;
  /** `watch-timeout` (the watch's timeoutSeconds set) or `stream-duration` (Envoy ends the stream). */
  readonly kind: string;
}

export const boundedStreams = channel("portcullis:bounded-stream");

export function publishBoundedStream(policy: string, kind: string): void {
  if (boundedStreams.hasSubscribers) boundedStreams.publish({ policy, kind } satisfies BoundedStream);
}

/** A Fundament token accepted: which algorithm signed it (HS256 or authn-api's asymmetric key), per token type. */
export interface TokenVerified {
  readonly alg: string;
  /** user, plugin or other-audience. */
  readonly type: string;
}

export const tokensVerified = channel("portcullis:token-verified");

export function publishTokenVerified(alg: string, type: string): void {
  if (tokensVerified.hasSubscribers) tokensVerified.publish({ alg, type } satisfies TokenVerified);
}

export function publishCacheLookup(cache: string, outcome: string | undefined): void {
  if (cacheLookups.hasSubscribers) cacheLookups.publish({ cache, outcome: outcome ?? "unknown" } satisfies CacheLookup);
}

/** An event dropped a cache's answers it may have changed (issue 45). */
export interface CacheInvalidation {
  readonly cache: string;
  /** The event source: `kube-rbac`, `kube-serviceaccounts`, `openfga-changes`, … */
  readonly source: string;
  /** What changed, a closed set per source (`rolebinding`, `serviceaccount-deleted`, `tuple`, …). */
  readonly cause: string;
  readonly entries: number;
}

export const cacheInvalidations = channel("portcullis:cache-invalidation");

export function publishCacheInvalidation(cache: string, source: string, cause: string, entries: number): void {
  if (cacheInvalidations.hasSubscribers) cacheInvalidations.publish({ cache, source, cause, entries } satisfies CacheInvalidation);
}

export function publishDependencyCall(dependency: string, seconds: number, ok: boolean): void {
  if (dependencyCalls.hasSubscribers) dependencyCalls.publish({ dependency, seconds, ok } satisfies DependencyCall);
}

export function publishDecision(policy: string, outcome: string, seconds: number): void {
  if (checkDecisions.hasSubscribers) checkDecisions.publish({ policy, outcome, seconds } satisfies CheckDecision);
}

export function publishInvalidSubject(problem: string): void {
  if (invalidSubjects.hasSubscribers) invalidSubjects.publish({ problem } satisfies InvalidSubject);
}

/**
 * The cluster registry changed the fleet: added, changed, removed, or a Secret that registers nothing
 * (invalid); or a cluster id became claimed by more than one Secret (conflict: served by none) or
 * stopped being so (conflict-resolved).
 */
export interface ClusterRegistryEvent {
  readonly event: "added" | "changed" | "removed" | "invalid" | "conflict" | "conflict-resolved";
}

export const clusterRegistryEvents = channel("portcullis:cluster-registry");

export function publishClusterRegistryEvent(event: ClusterRegistryEvent["event"]): void {
  if (clusterRegistryEvents.hasSubscribers) clusterRegistryEvents.publish({ event } satisfies ClusterRegistryEvent);
}
