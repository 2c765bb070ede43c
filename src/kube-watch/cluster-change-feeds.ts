/**
 * Every cluster's change feeds (issue 45): RBAC (`kube-rbac`: Roles, RoleBindings, ClusterRoles,
 * ClusterRoleBindings) and ServiceAccounts (`kube-serviceaccounts`), each a ChangeFeedWatch, added
 * and removed with the cluster. `rbac` is the ChangeFeed SubjectAccessReviews serves past its short
 * TTLs by: a cluster is proven up to the least of its four RBAC watches' proofs, and not at all
 * while any of them has not listed; `serviceAccounts` is the one TokenRequests keeps tokens past
 * their short TTL by. A feed that cannot list or watch (a 403 because the credential
 * lacks the permission, an API server down) only keeps its cluster on the short TTLs: it is logged
 * once, shown by describe(), retried with backoff, and never fails the process or its readiness.
 * Grants the credential lacks are asked of the API server when a cluster is added, and named.
 *
 * Request cost per cluster and replica (change-feed-watch.ts): every ~3 s, per resource (five), a
 * quorum read of one etcd key and a watch served from the API server's watch cache; five lists at the
 * start and after a 410.
 */
import type { KubernetesObject } from "#kubernetes-client";
import type { Logger } from "pino";
import type { ChangeFeed, FeedState } from "../cache/freshness.ts";
import { ChangeFeedWatch, type WatchConnect } from "./change-feed-watch.ts";
import { rbacResource, SERVICE_ACCOUNTS } from "./feed-resources.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { missingFeedGrants, missingGrantsMessage } from "./feed-grants.ts";
import type { ListSlots } from "../kube-fleet/list-slots.ts";
import { RBAC_KINDS, RBAC_SOURCE, rbacHandlers, type ReviewInvalidation } from "./rbac-changes.ts";
import { SERVICE_ACCOUNT_SOURCE, serviceAccountHandlers, type TokenInvalidation } from "./service-account-changes.ts";

/** Where the feeds drop what changes invalidate. */
export interface ChangeTargets {
  readonly reviews: ReviewInvalidation;
  readonly tokens: TokenInvalidation;
}

export interface ClusterChangeFeedsOptions {
  readonly logger: Logger;
  /**
   * The caches, asked for when a change comes (never before add()): SubjectAccessReviews is built
   * with `rbac`, so it cannot exist when this is constructed.
   */
  readonly targets: () => ChangeTargets;
  /** Shared with the fleet's other lists (FLEET_LIST_SLOTS); unbounded when absent. */
  readonly listSlots?: ListSlots;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
  readonly now?: () => number;
  /** Opens watches (tests); client-node's Watch on the cluster's pool when absent. */
  readonly connect?: (cluster: Cluster) => WatchConnect;
  /** The feeds' grants the cluster's credential lacks (feed-grants.ts missingFeedGrants when absent). */
  readonly missingGrants?: (cluster: Cluster) => Promise<string[]>;
}

/** How long the API server has to say which grants the credential holds: off the request path, and said once. */
const GRANTS_CHECK_TIMEOUT_MS = 5_000;


interface Feeds {
  readonly rbac: ReadonlyArray<ChangeFeedWatch<KubernetesObject>>;
  readonly serviceAccounts: ChangeFeedWatch<KubernetesObject>;
  readonly cluster: Cluster;
  /** What the credential lacks, once the API server has said; dropped for a source once it syncs. */
  missingGrants?: readonly string[];
  /** The grants check: asked at add(), and again at a 403 when the API server did not answer it. */
  grantsCheck: "asking" | "answered" | "unanswered";
}

export class ClusterChangeFeeds {
  readonly #options: ClusterChangeFeedsOptions;
  readonly #clusters = new Map<string, Feeds>();
  /** Feeds of removed or replaced clusters still stopping. */
  readonly #stopping = new Set<Promise<void>>();
  readonly #now: () => number;

  /** The RBAC proof per cluster id, for SubjectAccessReviews' CachedLookup. */
  readonly rbac: ChangeFeed = {
    provenUntil: (clusterId) => {
      const feeds = this.#clusters.get(clusterId);
      if (feeds === undefined) return undefined;
      let least: number | undefined;
      for (const feed of feeds.rbac) {
        const proven = feed.provenUntil();
        if (proven === undefined) return undefined;
        least = least === undefined ? proven : Math.min(least, proven);
      }
      return least;
    },
  };

  /** The ServiceAccount proof per cluster id, for TokenRequests' CachedLookup. */
  readonly serviceAccounts: ChangeFeed = {
    provenUntil: (clusterId) => this.#clusters.get(clusterId)?.serviceAccounts.provenUntil(),
  };

  constructor(options: ClusterChangeFeedsOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Starts following `cluster`, replacing the feeds of the cluster registered under its id before. */
  add(cluster: Cluster): void {
    this.remove(cluster.id);
    const { logger, listSlots, initialBackoffMs, maxBackoffMs, now, targets } = this.#options;
    const connect = this.#options.connect?.(cluster);
    const watchOptions = (source: string) => ({
      logger,
      source,
      ...(listSlots === undefined ? {} : { listSlots }),
      ...(initialBackoffMs === undefined ? {} : { initialBackoffMs }),
      ...(maxBackoffMs === undefined ? {} : { maxBackoffMs }),
      ...(now === undefined ? {} : { now }),
      ...(connect === undefined ? {} : { connect }),
    });
    const feeds: Feeds = {
      cluster,
      grantsCheck: "asking",
      rbac: RBAC_KINDS.map((kind) => new ChangeFeedWatch(cluster, rbacResource(kind), rbacHandlers(cluster.id, kind, () => targets().reviews), watchOptions(RBAC_SOURCE))),
      serviceAccounts: new ChangeFeedWatch(cluster, SERVICE_ACCOUNTS, serviceAccountHandlers(cluster.id, () => targets().tokens), watchOptions(SERVICE_ACCOUNT_SOURCE)),
    };
    this.#clusters.set(cluster.id, feeds);
    for (const feed of [...feeds.rbac, feeds.serviceAccounts]) feed.start();
    void this.#checkGrants(cluster, feeds);
  }

  /**
   * Says loudly, once per cluster added, which grants its feeds lack: without them the feeds only
   * fail and retry, and the cluster runs on the short TTLs for good. Not a failed start: the short
   * TTLs are safe, the freshness is an optimisation; the line, readiness's detail and the
   * PortcullisEventSourceUnsynced alert (portcullis_event_source_synced) say it.
   */
  async #checkGrants(cluster: Cluster, feeds: Feeds): Promise<void> {
    let missing: string[];
    try {
      missing = await (this.#options.missingGrants ?? ((c: Cluster) => missingFeedGrants(c, GRANTS_CHECK_TIMEOUT_MS)))(cluster);
    } catch {
      feeds.grantsCheck = "unanswered"; // the feeds' own errors say so; a 403 among them asks again
      return;
    }
    feeds.grantsCheck = "answered";
    if (missing.length === 0 || this.#clusters.get(cluster.id) !== feeds) return;
    feeds.missingGrants = missing;
    this.#options.logger.warn({ cluster_id: cluster.id, missing }, "the cluster's credential lacks the change feeds' grants: its answers stay on the short TTLs");
  }

  /** Stops following a cluster; its proof is gone at once (its answers go back to the short TTLs). */
  remove(clusterId: string): void {
    const feeds = this.#clusters.get(clusterId);
    if (feeds === undefined) return;
    this.#clusters.delete(clusterId);
    const stopped = Promise.all([...feeds.rbac, feeds.serviceAccounts].map((feed) => feed.stop())).then(() => undefined);
    this.#stopping.add(stopped);
    void stopped.finally(() => this.#stopping.delete(stopped));
  }

  async stop(): Promise<void> {
    for (const clusterId of [...this.#clusters.keys()]) this.remove(clusterId);
    await Promise.all([...this.#stopping]);
  }

  /** Per source and cluster, for metrics and /readyz?verbose: the RBAC source as its least proven watch. */
  describe(): FeedState[] {
    const states: FeedState[] = [];
    for (const [clusterId, feeds] of this.#clusters) {
      const rbac = feeds.rbac.map((feed, i) => ({ plural: RBAC_KINDS[i]!.plural, ...feed.state() }));
      const proven = this.rbac.provenUntil(clusterId);
      const unsynced = rbac.find((s) => !s.synced);
      const serviceAccounts = feeds.serviceAccounts.state();
      this.#reviseGrants(feeds, unsynced === undefined, serviceAccounts.synced, [...rbac, serviceAccounts]);
      states.push({
        source: RBAC_SOURCE,
        scope: clusterId,
        synced: unsynced === undefined,
        ...(proven === undefined ? {} : { lagSeconds: Math.max(0, this.#now() - proven) / 1_000 }),
        ...(unsynced === undefined ? {} : { detail: lacking(feeds, "rbac.authorization.k8s.io") ?? unsynced.detail ?? `${unsynced.plural}: not synced` }),
      });
      const detail = serviceAccounts.synced ? undefined : lacking(feeds, "serviceaccounts");
      states.push({ source: SERVICE_ACCOUNT_SOURCE, scope: clusterId, ...serviceAccounts, ...(detail === undefined ? {} : { detail }) });
    }
    return states;
  }

  /**
   * What the feeds' states say of the grants: a source that synced holds them now (granted since the
   * check), so they are no longer named; a 403 after a check the API server did not answer asks again.
   */
  #reviseGrants(feeds: Feeds, rbacSynced: boolean, serviceAccountsSynced: boolean, states: ReadonlyArray<{ detail?: string }>): void {
    if (feeds.missingGrants !== undefined && (rbacSynced || serviceAccountsSynced)) {
      const stillLacking = feeds.missingGrants.filter((g) => !(rbacSynced && g.includes("rbac.authorization.k8s.io")) && !(serviceAccountsSynced && g.includes("serviceaccounts")));
      feeds.missingGrants = stillLacking.length === 0 ? undefined : stillLacking;
    }
    if (feeds.grantsCheck === "unanswered" && states.some((s) => s.detail?.startsWith("forbidden:") === true)) {
      feeds.grantsCheck = "asking";
      void this.#checkGrants(feeds.cluster, feeds);
    }
  }
}

/** Readiness's detail for a source whose grants (`verb resource.group` names holding `part`) the credential lacks. */
function lacking(feeds: Feeds, part: string): string | undefined {
  const missing = (feeds.missingGrants ?? []).filter((grant) => grant.includes(part));
  return missing.length === 0 ? undefined : missingGrantsMessage(missing);
}
