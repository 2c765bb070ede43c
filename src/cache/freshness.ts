/**
 * Freshness by events (issue 45). A cache's answers are invalidated by the events that change them
 * (RBAC and ServiceAccount watches, OpenFGA's ReadChanges); a TTL only bounds what an event source
 * might have missed. What lets an answer outlive today's short TTL is a proof, per scope (a cluster,
 * a store), that every change up to a recent time has been applied: a source that is silent,
 * broken or not synced yet proves nothing, and its scope's answers fall back to the short TTLs.
 *
 * Every time here is on one clock, `performance.now()` (milliseconds), the clock lru-cache ages
 * entries on.
 */

/** What an event source proves about the scopes it follows. */
export interface ChangeFeed {
  /**
   * The latest time up to which every change in `scope` has been applied (its invalidations done);
   * undefined while the source is not synced for it.
   */
  provenUntil(scope: string): number | undefined;
}

/** An event source's state for one scope (what metrics and /readyz?verbose show; issue 45). */
export interface FeedState {
  /** The source: `kube-rbac`, `kube-serviceaccounts`, `openfga-changes`. */
  readonly source: string;
  /** The cluster id or the OpenFGA store id. */
  readonly scope: string;
  /** Whether it keeps its scope's answers fresh now (synced and caught up). */
  readonly synced: boolean;
  /** Seconds since the time up to which every change has been applied; absent while not synced. */
  readonly lagSeconds?: number;
  /** Why it is not synced (an error's message, never a credential). */
  readonly detail?: string;
}
