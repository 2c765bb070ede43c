/**
 * The ports' construction: configuration → the adapters the policies read (OpenFGA, each cluster's
 * API server, the PluginInstallation, revocation and Project indexes, Konfidence's verifiers), and
 * what the runtime manages of them (readiness, index sizes, the fleet, CDS, stop).
 */
import type { Logger } from "pino";
import type { FeedState } from "../cache/freshness.ts";
import type {
  ClusterViewCheck,
  InstallationLookup,
  KnownClusters,
  ServiceAccountTokens,
  UserAccessReview,
} from "../ports/policy-ports.ts";
import type { RevocationList } from "../kube-watch/revocations.ts";
import { readSecret } from "../config/load.ts";
import { type Config, ENVOY_IMAGE_CA_FILE } from "../config/schema.ts";
import { ClusterDiscovery } from "../deploy/cluster-discovery.ts";
import { OpenFgaCanView } from "../fga/can-view.ts";
import { storeRef } from "../fga/store.ts";
import type { KonfidencePorts } from "../konfidence/ports.ts";
import { Clusters } from "../kube-fleet/clusters.ts";
import { type ChangeTargets, ClusterChangeFeeds } from "../kube-watch/cluster-change-feeds.ts";
import { ClusterRegistry } from "../kube-watch/cluster-registry.ts";
import { InstallationIndex } from "../kube-watch/installation-index.ts";
import { FLEET_LIST_SLOTS } from "../kube-fleet/list-slots.ts";
import { RevocationIndex } from "../kube-watch/revocation-index.ts";
import { type RulesReviews, SelfSubjectRulesReviews } from "../kube-calls/rules-review.ts";
import { TokenRequests } from "../kube-calls/service-account-tokens.ts";
import { SubjectAccessReviews } from "../kube-calls/user-access-review.ts";
import type { FleetState, IndexSizes } from "./prometheus.ts";
import { clusterFleet } from "./cluster-fleet.ts";
import { connectKonfidence } from "./konfidence-ports.ts";
import type { DependencyState } from "./readiness.ts";

/** Everything the policies (and can-i) read from the outside world: what a test fake implements. */
export interface PolicyPorts {
  readonly clusters: KnownClusters;
  /** Absent without an `openfga` section (a Konfidence-only deployment): no Fundament policy is served. */
  readonly canView?: ClusterViewCheck;
  readonly userAccess: UserAccessReview;
  readonly serviceAccountTokens: ServiceAccountTokens;
  readonly installations: InstallationLookup;
  /** The deny-list; absent when `revocations` is not configured. */
  readonly revocations?: RevocationList;
  /** Present when `konfidence` is configured. */
  readonly konfidence?: KonfidencePorts;
  /** SelfSubjectRulesReviews made with a ServiceAccount's token, for `can-i` (absent in fakes). */
  readonly rulesReviews?: RulesReviews;
}

/** What the runtime manages of the ports: readiness, what metrics and /readyz show, CDS, the stop. */
export interface PortsRuntime {
  /**
   * True once every index has synced, save a cluster whose first list failed while another synced
   * (InstallationIndex.ready); a later outage of one is a 503 for its cluster only.
   */
  ready(): boolean;
  indexSizes: IndexSizes;
  /** Clusters by source and the registry's watch, for metrics (absent in fakes). */
  fleet?: FleetState;
  /** Dependencies whose state /readyz?verbose shows without gating readiness (the OpenFGA store's resolution). */
  dependencies?: () => DependencyState[];
  /** The clusters' event sources keeping the caches fresh, per source and scope (issue 45; absent in fakes). */
  changeFeeds?: () => readonly FeedState[];
  /** The registered clusters' Envoy upstreams, served by CDS (absent in fakes: an empty set is served). */
  clusterDiscovery?: ClusterDiscovery;
  stop(): Promise<void>;
}

/** The real ports: one object that the policies read and the runtime manages. */
export type ConnectedPorts = PolicyPorts & PortsRuntime;

/** The real ports: OpenFGA, each cluster's API server, and the PluginInstallation watches. */
export async function connectPorts(config: Config, logger: Logger): Promise<ConnectedPorts> {
  const clusters = await Clusters.load(config.clusters);
  const openfga = config.openfga;
  const canView = openfga === undefined ? undefined : openFgaCanView(openfga, logger);
  // Each cluster's RBAC and ServiceAccount events drop the reviews and tokens they change (issue 45);
  // followed only where the Fundament policies, which alone ask those, are served.
  const changeFeeds = new ClusterChangeFeeds({ logger, listSlots: FLEET_LIST_SLOTS, targets: (): ChangeTargets => ({ reviews: userAccess, tokens: serviceAccountTokens }) });
  const userAccess = new SubjectAccessReviews(clusters, {
    timeoutMs: config.kube.sar.timeoutMs,
    allowTtlMs: config.kube.sar.allowTtlMs,
    denyTtlMs: config.kube.sar.denyTtlMs,
    maxEntries: config.kube.sar.cacheMaxEntries,
    rbac: { feed: changeFeeds.rbac, safetyNetTtlMs: config.kube.sar.safetyNetTtlMs, extendAllows: config.kube.sar.extendRbacAllows },
  });
  const serviceAccountTokens = new TokenRequests(clusters, {
    expirationSeconds: config.kube.tokenRequest.expirationSeconds,
    audiences: config.kube.tokenRequest.audiences,
    timeoutMs: config.kube.tokenRequest.timeoutMs,
    maxEntries: config.kube.tokenRequest.cacheMaxEntries,
    serviceAccountFeed: changeFeeds.serviceAccounts,
  });
  // PluginInstallations are watched only where the Fundament policies are served: the cluster of a
  // Konfidence-only deployment need not have their CRD, and readiness would wait for it forever.
  const installations = new InstallationIndex(canView === undefined ? [] : clusters.all(), { logger, inactivityMs: config.kube.watch.inactivityMs, freshnessBoundMs: config.kube.watch.freshnessBoundMs });
  installations.start().catch((err: unknown) => logger.error({ err }, "plugin installation index failed to start"));
  if (canView !== undefined) for (const cluster of clusters.all()) changeFeeds.add(cluster);
  const rulesReviews = new SelfSubjectRulesReviews(clusters, { timeoutMs: config.kube.sar.timeoutMs });
  const clusterDiscovery = new ClusterDiscovery({ envoyCaFile: config.clusterRegistry?.envoyCaFile ?? ENVOY_IMAGE_CA_FILE, logger });
  // Connected before the registry lists: Konfidence's cluster may be one it registers.
  const konfidence =
    config.konfidence === undefined ? undefined : await connectKonfidence(config.konfidence, clusters, logger, config.kube.watch.inactivityMs, config.clusterRegistry !== undefined);
  const registry = await clusterRegistry(config, logger, {
    clusters,
    installations: canView === undefined ? undefined : installations,
    changeFeeds: canView === undefined ? undefined : changeFeeds,
    caches: [userAccess, serviceAccountTokens],
    upstreams: clusterDiscovery,
    projects: konfidence?.registered,
  });
  const revocations = await revocationIndex(config, logger);
  return {
    clusters,
    canView,
    userAccess,
    serviceAccountTokens,
    installations,
    rulesReviews,
    ...(revocations === undefined ? {} : { revocations: revocations.index }),
    konfidence: konfidence?.ports,
    dependencies: () => (canView === undefined ? [] : [canView.storeState()]),
    // The clusters' feeds; the OpenFGA gate's own follows reloads (app.ts).
    changeFeeds: () => changeFeeds.describe(),
    clusterDiscovery,
    // Until the registry has listed once the fleet is unknown; a later outage of it keeps the clusters it registered.
    ready: () => (registry?.registry.hasSynced ?? true) && installations.ready && (revocations?.index.hasSynced ?? true) && (konfidence?.projects.hasSynced ?? true),
    fleet: () => ({ registered: clusters.counts(), registrySynced: registry?.registry.synced, registryConflicts: registry?.registry.conflicts().length }),
    indexSizes: () => [
      ...(registry === undefined ? [] : [{ index: "clusterregistry", ...registry.registry.size(), outage: REGISTRY_OUTAGE }]),
      ...installations.sizes().map((s) => ({ index: "plugininstallations", ...s })),
      ...(revocations === undefined ? [] : [{ index: "revocations", ...revocations.index.size() }]),
      ...(konfidence?.projects.sizes() ?? []).map((s) => ({ index: "projects", ...s })),
    ],
    stop: async () => {
      await canView?.stop();
      await registry?.registry.stop();
      await registry?.cluster.close();
      await installations.stop();
      await changeFeeds.stop();
      await revocations?.index.stop();
      await revocations?.cluster.close();
      await konfidence?.stop();
      await clusters.close();
    },
  };
}

/** What /readyz?verbose says of a registry whose watch broke after it had listed. */
const REGISTRY_OUTAGE = "the clusters it registered are kept and served; registrations, changes and removals apply when its watch lists again";

/**
 * The cluster registry's watch of cluster Secrets, on the management cluster `clusterRegistry`
 * names (its own connection pool, named `cluster-registry` in log lines); none without the section.
 */
async function clusterRegistry(
  config: Config,
  logger: Logger,
  fleet: Parameters<typeof clusterFleet>[0],
): Promise<{ registry: ClusterRegistry; cluster: Clusters } | undefined> {
  const source = config.clusterRegistry;
  if (source === undefined) return undefined;
  const { namespace, envoyCaFile: _, ...kubeconfig } = source;
  const cluster = await Clusters.load([{ id: "cluster-registry", ...kubeconfig }]);
  const registry = new ClusterRegistry(cluster.get("cluster-registry")!, clusterFleet(fleet), { logger, namespace, inactivityMs: config.kube.watch.inactivityMs });
  registry.start().catch((err: unknown) => logger.error({ err }, "cluster registry failed to start"));
  return { registry, cluster };
}

/** The OpenFGA gate of `openfga`; built again by a reload that names another store (reload.ts). */
export function openFgaCanView(openfga: NonNullable<Config["openfga"]>, logger: Logger): OpenFgaCanView {
  return new OpenFgaCanView({
    apiUrl: openfga.apiUrl,
    store: storeRef(openfga),
    ...(openfga.authorizationModelId === undefined ? {} : { authorizationModelId: openfga.authorizationModelId }),
    ...(openfga.apiToken === undefined ? {} : { apiToken: readSecret(openfga.apiToken, "openfga.apiToken") }),
    timeoutMs: openfga.timeoutMs,
    allowTtlMs: openfga.allowTtlMs,
    denyTtlMs: openfga.denyTtlMs,
    maxEntries: openfga.cacheMaxEntries,
    changesPollMs: openfga.changesPollMs,
    safetyNetTtlMs: openfga.safetyNetTtlMs,
    logger,
  });
}

/**
 * The deny-list's watch, on the cluster `revocations` names (its own connection pool, named
 * `revocations` in log lines). Without the section there is no deny-list, and a warning says so.
 */
async function revocationIndex(config: Config, logger: Logger): Promise<{ index: RevocationIndex; cluster: Clusters } | undefined> {
  const source = config.revocations;
  if (source === undefined) {
    logger.warn({ setting: "revocations" }, "no revocation list configured: a plugin can only be stopped by the 15-minute token TTL");
    return undefined;
  }
  const cluster = await Clusters.load([{ id: "revocations", ...source }]);
  const index = new RevocationIndex(cluster.get("revocations")!, { logger, inactivityMs: config.kube.watch.inactivityMs, freshnessBoundMs: config.kube.watch.freshnessBoundMs });
  index.start().catch((err: unknown) => logger.error({ err }, "revocation index failed to start"));
  return { index, cluster };
}

