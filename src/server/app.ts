/**
 * The servers' lifecycle: over ports (ports.ts) and the policies composed from them (policies.ts),
 * the three servers (ext_authz gRPC, admin HTTP, internal gRPC), reloads, and the stop. Shutdown
 * turns health NOT_SERVING first, keeps answering Checks for the drain period, then stops
 * accepting, lets in-flight checks finish, flushes logs and stops.
 */
import type { AddressInfo } from "node:net";
import type { Server as HttpServer } from "node:http";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import type { AuditSink } from "../audit/plugin-request.ts";
import { type AuditedCheck, createAuditedCheck } from "../authz/check.ts";
import { buildRouteTable } from "../config/route-table.ts";
import { type Config, ENVOY_IMAGE_CA_FILE } from "../config/schema.ts";
import { checkService, healthService } from "../envoy/protos.ts";
import { ClusterDiscovery, clusterDiscoveryService } from "../deploy/cluster-discovery.ts";
import { startIdleGc } from "./idle-gc.ts";
import { createMetrics } from "./prometheus.ts";
import { type AdminOptions, createAdminServer } from "./admin.ts";
import { createExplainer, type Explainer } from "./explain.ts";
import { createCanI } from "./can-i.ts";
import { Health } from "./health.ts";
import { withCallMetrics } from "../metrics/grpc-server.ts";
import { policiesFor, revocationListFor } from "./policies.ts";
import { OpenFgaCanView } from "../fga/can-view.ts";
import { openFgaCanView, type PolicyPorts, type PortsRuntime } from "./ports.ts";
import { type DependencyState, processReadiness } from "./readiness.ts";
import { answerPrimary, isWorker } from "./workers.ts";
import { installationServiceConstructor, installationServiceHandlers } from "./installation-service.ts";
import { listenerCredentials } from "./tls.ts";
import { ConfigReloader, type ReloadOutcome } from "./reload.ts";
import { startTracing } from "../tracing/setup.ts";
import { tracedChecks } from "../tracing/spans.ts";
import { type CheckActivity, checkHandler } from "./check-handler.ts";
import { GRPC_SERVER_OPTIONS } from "./grpc-server-options.ts";

/** The largest message the ext_authz port accepts; a larger one is refused RESOURCE_EXHAUSTED, unread. */
export const MAX_CHECK_MESSAGE_BYTES = 1024 * 1024;

export interface ServerOptions {
  readonly config: Config;
  /** What the policies read. */
  readonly ports: PolicyPorts;
  /** What this server manages of the ports (readiness, sizes, CDS, the stop); connectPorts' result is both. */
  readonly runtime: PortsRuntime;
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

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const { config, ports, runtime, logger } = options;
  if (config.plugins.allowUnpinned) {
    logger.warn(
      { setting: "plugins.allowUnpinned" },
      "UNPINNED PLUGIN INSTALLATIONS ARE ACCEPTED: a local-development escape hatch (FUN-19 §4) that must never be set in production",
    );
  }
  const tracing = await startTracing(config.tracing, logger);
  // Replaced whole by a reload (reloadable below): a Check runs under the old policies or the new.
  let livePorts = ports;
  // The OpenFGA store's state as a reload leaves it (/readyz?verbose).
  let liveDependencies = runtime.dependencies ?? ((): DependencyState[] => []);
  // One check for Envoy's requests and /explain's: the sink is chosen per request.
  let decide = checkerOver(config, ports, logger);
  const check = tracedChecks((message) => decide(message, options.audit));
  const health = new Health(() => runtime.ready());
  // The clusters' event sources, and the store's changes of the OpenFGA gate a reload leaves (/metrics, /readyz?verbose).
  const liveChangeFeeds = () => [...(runtime.changeFeeds?.() ?? []), ...(livePorts.canView instanceof OpenFgaCanView ? livePorts.canView.feedStates() : [])];
  const metrics = createMetrics({ indexSizes: runtime.indexSizes, fleet: runtime.fleet, changeFeeds: liveChangeFeeds });

  const checks: CheckActivity = { inFlight: 0, started: 0 };
  // A CheckRequest is headers only (no shipped Envoy config sends the body: with_request_body), which
  // Envoy caps at 60 KiB by default; grpc-js would take 4 MiB. CDS requests are smaller still.
  const grpcServer = withCallMetrics(new grpc.Server({ ...GRPC_SERVER_OPTIONS, "grpc.max_receive_message_length": MAX_CHECK_MESSAGE_BYTES }));
  grpcServer.addService(checkService(), { Check: checkHandler(check, checks) });
  grpcServer.addService(healthService(), health.handlers());
  // On the ext_authz port: Envoy's cds_config uses the connection it already has to portcullis (deploy/cluster-discovery.ts).
  const clusterDiscovery = runtime.clusterDiscovery ?? new ClusterDiscovery({ envoyCaFile: ENVOY_IMAGE_CA_FILE, logger });
  grpcServer.addService(clusterDiscoveryService(), clusterDiscovery.handlers());
  const tls = await listenerCredentials(config.listen.tls, logger);
  const grpcPort = await bind(grpcServer, config.listen.grpc, tls.credentials);

  const internalServer = withCallMetrics(new grpc.Server(GRPC_SERVER_OPTIONS));
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
      const nextPorts: PolicyPorts = canView === undefined ? livePorts : { ...livePorts, canView };
      const nextDependencies = canView === undefined ? liveDependencies : () => [canView.storeState()];
      let nextDecide: AuditedCheck;
      try {
        nextDecide = checkerOver(next, nextPorts, logger);
      } catch (err) {
        void canView?.stop();
        throw err;
      }
      const replaced = canView === undefined ? undefined : livePorts.canView;
      livePorts = nextPorts;
      liveDependencies = nextDependencies;
      decide = nextDecide;
      // A replaced gate answers no new Check: its store's changes are no longer followed.
      if (replaced instanceof OpenFgaCanView) void replaced.stop();
    },
  });
  const adminOptions: AdminOptions = {
    readiness: () =>
      processReadiness({
        shuttingDown: health.shuttingDown,
        serving: health.serving,
        indexes: runtime.indexSizes(),
        dependencies: liveDependencies(),
        changeFeeds: liveChangeFeeds(),
      }),
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
  const stopIdleGc = config.idleGc.enabled ? startIdleGc({ quietMs: config.idleGc.quietMs, activity: { started: () => checks.started, inFlight: () => checks.inFlight }, logger }) : () => {};
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
      logger.info({ in_flight: checks.inFlight, drain_ms: drainMs }, "shutting down: NOT_SERVING, still answering checks for the drain period");
      // Envoy's health checking needs a few intervals to see NOT_SERVING and move traffic away;
      // until then it still sends Checks here, and a closed listener would refuse them.
      if (drainMs > 0) await new Promise((resolveDrain) => setTimeout(resolveDrain, drainMs));
      logger.info({ in_flight: checks.inFlight }, "drain period over: no longer accepting, answering checks in flight");
      // Before the gRPC stop: open health Watch streams would otherwise hold it until the forced stop.
      health.stop();
      clusterDiscovery.close();
      // A Check ends within its deadline; twice that bounds the wait for the ones in flight.
      const graceMs = config.check.timeoutMs * 2;
      await Promise.all([shutdownGrpc(grpcServer, graceMs), shutdownGrpc(internalServer, graceMs), closeHttp(admin)]);
      tls.stop();
      await runtime.stop();
      // A gate built by a reload is not the ports' (runtime.stop() stops that one).
      if (livePorts.canView instanceof OpenFgaCanView) await livePorts.canView.stop();
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
function checkerOver(config: Config, ports: PolicyPorts, logger: Logger): AuditedCheck {
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
