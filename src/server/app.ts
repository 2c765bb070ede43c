/**
 * Wiring: configuration → ports (OpenFGA, API servers, indexes) → policies → the three servers
 * (ext_authz gRPC, admin HTTP, internal gRPC). Shutdown turns health NOT_SERVING first, keeps
 * answering Checks for the drain period, then stops accepting, lets in-flight checks finish,
 * flushes logs and stops.
 */
import type { AddressInfo } from "node:net";
import type { Server as HttpServer } from "node:http";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import type { AuditSink } from "../audit/plugin-request.ts";
import { type AuditedCheck, createAuditedCheck } from "../authz/check.ts";
import { buildRouteTable } from "../authz/route-table.ts";
import type { Policy } from "../authz/policy.ts";
import { kubeApiProxy } from "../authz/policies/kube-api-proxy.ts";
import { pluginAssets } from "../authz/policies/plugin-assets.ts";
import { pluginProxy } from "../authz/policies/plugin-proxy.ts";
import { platformApi } from "../authz/policies/platform-api.ts";
import { publicRoutes } from "../authz/policies/public.ts";
import type {
  ClusterViewCheck,
  InstallationLookup,
  KnownClusters,
  ServiceAccountTokens,
  UserAccessReview,
} from "../authz/ports.ts";
import { readSecret } from "../config/load.ts";
import { type Config, ENVOY_IMAGE_CA_FILE } from "../config/schema.ts";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import { checkService, healthService } from "../envoy/protos.ts";
import { ClusterDiscovery, clusterDiscoveryService } from "../envoy/cluster-discovery.ts";
import { OpenFgaCanView } from "../fga/can-view.ts";
import { storeRef } from "../fga/store.ts";
import { Clusters } from "../kube/clusters.ts";
import { ClusterRegistry } from "../kube/cluster-registry.ts";
import { InstallationIndex } from "../kube/installation-index.ts";
import { clusterFleet } from "./cluster-fleet.ts";
import { startIdleGc } from "./idle-gc.ts";
import { RevocationIndex } from "../kube/revocation-index.ts";
import { NO_REVOCATIONS, type RevocationList } from "../authz/revocations.ts";
import type { KonfidencePorts } from "../konfidence/ports.ts";
import { connectKonfidence, konfidencePolicy } from "../konfidence/wiring.ts";
import { TokenRequests } from "../kube/service-account-tokens.ts";
import { SubjectAccessReviews } from "../kube/user-access-review.ts";
import { createMetrics, type FleetState, type IndexSizes } from "../metrics/prometheus.ts";
import { tokenVerifierFor } from "./token-verifier.ts";
import { type AdminOptions, createAdminServer } from "./admin.ts";
import { createExplainer, type Explainer } from "./explain.ts";
import { createCanI } from "./can-i.ts";
import { type RulesReviews, SelfSubjectRulesReviews } from "../kube/rules-review.ts";
import { Health } from "./health.ts";
import { withCallMetrics } from "../metrics/grpc-server.ts";
import { type DependencyState, processReadiness } from "./readiness.ts";
import { answerPrimary, isWorker } from "./workers.ts";
import { installationServiceConstructor, installationServiceHandlers } from "./installation-service.ts";
import { listenerCredentials } from "./tls.ts";
import { ConfigReloader, type ReloadOutcome } from "./reload.ts";
import { startTracing } from "../tracing/setup.ts";
import { tracedChecks } from "../tracing/spans.ts";

/** Everything the policies read from the outside world. */
export interface Ports {
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
  /** The registered clusters' Envoy upstreams, served by CDS (absent in fakes: an empty set is served). */
  clusterDiscovery?: ClusterDiscovery;
  stop(): Promise<void>;
}

/** The real ports: OpenFGA, each cluster's API server, and the PluginInstallation watches. */
export async function connectPorts(config: Config, logger: Logger): Promise<Ports> {
  const clusters = await Clusters.load(config.clusters);
  const openfga = config.openfga;
  const canView = openfga === undefined ? undefined : openFgaCanView(openfga, logger);
  const userAccess = new SubjectAccessReviews(clusters, {
    timeoutMs: config.kube.sar.timeoutMs,
    allowTtlMs: config.kube.sar.allowTtlMs,
    denyTtlMs: config.kube.sar.denyTtlMs,
    maxEntries: config.kube.sar.cacheMaxEntries,
  });
  const serviceAccountTokens = new TokenRequests(clusters, {
    expirationSeconds: config.kube.tokenRequest.expirationSeconds,
    audiences: config.kube.tokenRequest.audiences,
    timeoutMs: config.kube.tokenRequest.timeoutMs,
    maxEntries: config.kube.tokenRequest.cacheMaxEntries,
  });
  // PluginInstallations are watched only where the Fundament policies are served: the cluster of a
  // Konfidence-only deployment need not have their CRD, and readiness would wait for it forever.
  const installations = new InstallationIndex(canView === undefined ? [] : clusters.all(), { logger, inactivityMs: config.kube.watch.inactivityMs });
  installations.start().catch((err: unknown) => logger.error({ err }, "plugin installation index failed to start"));
  const rulesReviews = new SelfSubjectRulesReviews(clusters, { timeoutMs: config.kube.sar.timeoutMs });
  const clusterDiscovery = new ClusterDiscovery({ envoyCaFile: config.clusterRegistry?.envoyCaFile ?? ENVOY_IMAGE_CA_FILE, logger });
  // Connected before the registry lists: Konfidence's cluster may be one it registers.
  const konfidence =
    config.konfidence === undefined ? undefined : await connectKonfidence(config.konfidence, clusters, logger, config.kube.watch.inactivityMs, config.clusterRegistry !== undefined);
  const registry = await clusterRegistry(config, logger, {
    clusters,
    installations: canView === undefined ? undefined : installations,
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
      await registry?.registry.stop();
      await registry?.cluster.close();
      await installations.stop();
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
  const index = new RevocationIndex(cluster.get("revocations")!, { logger, inactivityMs: config.kube.watch.inactivityMs });
  index.start().catch((err: unknown) => logger.error({ err }, "revocation index failed to start"));
  return { index, cluster };
}

export interface ServerOptions {
  readonly config: Config;
  readonly ports: Ports;
  readonly logger: Logger;
  readonly audit: AuditSink;
  /** Flushes buffered log lines; awaited during shutdown. */
  readonly flushLogs: () => Promise<void>;
}

export interface RunningServer {
  readonly grpcPort: number;
  readonly adminPort: number;
  readonly internalPort: number;
  readonly health: Health;
  /** Graceful stop: NOT_SERVING, answer Checks for the drain period, stop accepting, answer those in flight (bounded), flush logs, close everything. */
  shutdown(): Promise<void>;
  /** Reads the configuration again (`read`: the start's validator) and applies its live keys (reload.ts). */
  reload(read: () => Promise<Config>): Promise<ReloadOutcome>;
}

/**
 * The policies this configuration serves. Without the Fundament sections (tokens, openfga: a
 * Konfidence-only deployment) only konfidence-api is registered, and a route naming a Fundament
 * policy is denied 403 `no-policy`: a routing mistake that no retry fixes, never an allow.
 */
export function policiesFor(config: Config, ports: Ports): Policy[] {
  const fundament = config.tokens === undefined || ports.canView === undefined ? [] : fundamentPolicies(config, config.tokens, ports.canView, ports);
  return [...fundament, ...(config.konfidence === undefined ? [] : [konfidencePolicy(config.konfidence, ports.konfidence)])];
}

function fundamentPolicies(config: Config, tokenConfig: NonNullable<Config["tokens"]>, canView: ClusterViewCheck, ports: Ports): Policy[] {
  const tokens = tokenVerifierFor(tokenConfig);
  const cookieOrigins = new Set(tokenConfig.cookieOrigins.map((origin) => new URL(origin).origin));
  const platform = config.platform.services;
  return [
    kubeApiProxy({
      tokens,
      clusters: ports.clusters,
      canView,
      userAccess: ports.userAccess,
      installations: ports.installations,
      serviceAccountTokens: ports.serviceAccountTokens,
      revocations: revocationListFor(config, ports),
      cookieOrigins,
      allowUnpinned: config.plugins.allowUnpinned,
    }),
    pluginProxy({
      tokens,
      clusters: ports.clusters,
      canView,
      installations: ports.installations,
      revocations: revocationListFor(config, ports),
      allowUnpinned: config.plugins.allowUnpinned,
      controller: config.plugins.controller,
    }),
    pluginAssets(),
    platformApi({ tokens, cookieOrigins, services: new Set(platform.map((s) => s.name)) }),
    publicRoutes({ publicPaths: new Map(platform.map((s) => [s.name, new Set(s.public)])), issuer: tokenConfig.issuer }),
  ];
}

/**
 * The deny-list the policies and GetInstallationManifest consult. None only when the operator
 * configured none (documented, and warned about at start); a configured list that is not connected
 * is a wiring mistake that would silently allow revoked plugins, so it is refused at start.
 */
export function revocationListFor(config: Config, ports: Ports): RevocationList {
  if (ports.revocations !== undefined) return ports.revocations;
  if (config.revocations !== undefined) throw new Error("revocations is configured but no revocation list is connected");
  return NO_REVOCATIONS;
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const { config, ports, logger } = options;
  if (config.plugins.allowUnpinned) {
    logger.warn(
      { setting: "plugins.allowUnpinned" },
      "UNPINNED PLUGIN INSTALLATIONS ARE ACCEPTED: a local-development escape hatch (FUN-19 §4) that must never be set in production",
    );
  }
  const tracing = await startTracing(config.tracing, logger);
  // Replaced whole by a reload (reloadable below): a Check runs under the old policies or the new.
  let livePorts = ports;
  // One check for Envoy's requests and /explain's: the sink is chosen per request.
  let decide = checkerOver(config, ports, logger);
  const check = tracedChecks((message) => decide(message, options.audit));
  const health = new Health(() => ports.ready());
  const metrics = createMetrics(ports.indexSizes, ports.fleet);

  let inFlight = 0;
  let checksStarted = 0;
  const grpcServer = withCallMetrics(new grpc.Server());
  grpcServer.addService(checkService(), {
    Check(call: grpc.ServerUnaryCall<CheckRequestMessage, unknown>, callback: grpc.sendUnaryData<unknown>) {
      inFlight++;
      checksStarted++;
      check(call.request, call.metadata).then(
        (response) => callback(null, response),
        // check() never rejects; this is the last line of fail-closed.
        () => callback({ code: grpc.status.INTERNAL, details: "internal error" }),
      ).finally(() => inFlight--);
    },
  });
  grpcServer.addService(healthService(), health.handlers());
  // On the ext_authz port: Envoy's cds_config uses the connection it already has to portcullis (envoy/cluster-discovery.ts).
  const clusterDiscovery = ports.clusterDiscovery ?? new ClusterDiscovery({ envoyCaFile: ENVOY_IMAGE_CA_FILE, logger });
  grpcServer.addService(clusterDiscoveryService(), clusterDiscovery.handlers());
  const tls = await listenerCredentials(config.listen.tls, logger);
  const grpcPort = await bind(grpcServer, config.listen.grpc, tls.credentials);

  const internalServer = withCallMetrics(new grpc.Server());
  internalServer.addService(installationServiceConstructor().service, installationServiceHandlers(ports.installations, revocationListFor(config, ports)));
  const internalPort = await bind(internalServer, config.listen.internal, tls.credentials);

  const explainer = explainerFor(options, (message, audit) => decide(message, audit));
  const reloader = new ConfigReloader({
    config,
    logger,
    registry: metrics,
    apply: (next, plan) => {
      // Everything is built before anything is swapped: a secret file that cannot be read throws here.
      const storeChanged = plan.live.some((key) => key.startsWith("openfga."));
      const canView = storeChanged && next.openfga !== undefined ? openFgaCanView(next.openfga, logger) : undefined;
      const nextPorts: Ports = canView === undefined ? livePorts : { ...livePorts, canView, dependencies: () => [canView.storeState()] };
      const nextDecide = checkerOver(next, nextPorts, logger);
      livePorts = nextPorts;
      decide = nextDecide;
    },
  });
  const adminOptions: AdminOptions = {
    readiness: () =>
      processReadiness({ shuttingDown: health.shuttingDown, serving: health.serving, indexes: ports.indexSizes(), dependencies: livePorts.dependencies?.() ?? [] }),
    metrics,
    // Whether /explain is served is fixed at start; which policies it runs follows reloads (decide).
    explain: explainer,
    // The OpenFGA gate as a reload leaves it (can-i reads its ports per question).
    canI: config.admin.explain ? createCanI({ ...ports, get canView() { return livePorts.canView; } }) : undefined,
  };
  const admin = createAdminServer(adminOptions);
  // With workers the primary serves the admin port for all of them (workers.ts); a worker answers it over IPC.
  if (isWorker()) answerPrimary(adminOptions, metrics);
  const adminPort = isWorker() ? splitAddress(config.listen.admin).port : await listen(admin, config.listen.admin);
  const stopIdleGc = config.idleGc.enabled ? startIdleGc({ quietMs: config.idleGc.quietMs, activity: { started: () => checksStarted, inFlight: () => inFlight }, logger }) : () => {};
  logger.info(
    { grpc: grpcPort, admin: adminPort, internal: internalPort, clusters: config.clusters.length, cluster_registry: config.clusterRegistry?.namespace, tls: tlsMode(config.listen.tls) },
    "portcullis listening",
  );

  return {
    grpcPort,
    adminPort,
    internalPort,
    health,
    reload: (read) => reloader.reload(read),
    async shutdown() {
      health.beginShutdown();
      stopIdleGc();
      const drainMs = config.shutdown.drainMs;
      logger.info({ in_flight: inFlight, drain_ms: drainMs }, "shutting down: NOT_SERVING, still answering checks for the drain period");
      // Envoy's health checking needs a few intervals to see NOT_SERVING and move traffic away;
      // until then it still sends Checks here, and a closed listener would refuse them.
      if (drainMs > 0) await new Promise((resolveDrain) => setTimeout(resolveDrain, drainMs));
      logger.info({ in_flight: inFlight }, "drain period over: no longer accepting, answering checks in flight");
      // Before the gRPC stop: open health Watch streams would otherwise hold it until the forced stop.
      health.stop();
      clusterDiscovery.close();
      // A Check ends within its deadline; twice that bounds the wait for the ones in flight.
      const graceMs = config.check.timeoutMs * 2;
      await Promise.all([shutdownGrpc(grpcServer, graceMs), shutdownGrpc(internalServer, graceMs), closeHttp(admin)]);
      tls.stop();
      await ports.stop();
      await tracing.shutdown();
      await options.flushLogs();
    },
  };
}

/**
 * /explain runs the server's check, its audit lines marked as explained; undefined (not served)
 * unless `admin.explain` is set.
 */
function explainerFor(options: ServerOptions, check: AuditedCheck): Explainer | undefined {
  const { config, logger } = options;
  if (!config.admin.explain) return undefined;
  logger.warn({ setting: "admin.explain" }, "POST /explain is served on the admin port to loopback peers: it runs real checks");
  return createExplainer(check, options.audit);
}

/** The check over the policies this configuration serves. */
function checkerOver(config: Config, ports: Ports, logger: Logger): AuditedCheck {
  return createAuditedCheck({
    policies: policiesFor(config, ports),
    timeoutMs: config.check.timeoutMs,
    retryAfterSeconds: config.check.retryAfterSeconds,
    logger,
    // The schema refuses request mode without an envoy section (checkEnvoySection).
    routeTable: config.check.policyFrom === "request" && config.envoy !== undefined ? buildRouteTable({ envoy: config.envoy, platform: config.platform }) : undefined,
  });
}

function splitAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(":");
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(address.slice(i + 1)) };
}

function bind(server: grpc.Server, address: string, credentials: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolveBind, reject) => {
    server.bindAsync(address, credentials, (err, port) => (err ? reject(err) : resolveBind(port)));
  });
}

function tlsMode(tls: Config["listen"]["tls"]): "plaintext" | "tls" | "mtls" {
  if (tls === undefined) return "plaintext";
  return tls.requireClientCert ? "mtls" : "tls";
}

function listen(server: HttpServer, address: string): Promise<number> {
  const { host, port } = splitAddress(address);
  return new Promise((resolveListen, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolveListen((server.address() as AddressInfo).port));
  });
}

/** Stops accepting calls at once; calls in flight are answered, up to `graceMs`. */
function shutdownGrpc(server: grpc.Server, graceMs: number): Promise<void> {
  return new Promise((resolveShutdown) => {
    const force = setTimeout(() => server.forceShutdown(), graceMs);
    server.tryShutdown(() => {
      clearTimeout(force);
      resolveShutdown();
    });
  });
}

function closeHttp(server: HttpServer): Promise<void> {
  return new Promise((resolveClose) => {
    server.close(() => resolveClose());
    server.closeAllConnections();
  });
}
