/**
 * portcullis as the benchmark runs it: one process (`workers: 1`; the runner pins it to one core),
 * the real server (src/server/app.ts startServer: gRPC, health, admin, logging, the audit line; the
 * watchdog process, as serve.ts starts it) and the real policies. Logs and audit lines go to
 * stdout, as in production (the runner sends them to /dev/null).
 *  - default: warm in-memory ports (bench/warm-ports.ts), so remote gates are excluded;
 *  - `--scenario real-ports --upstream U.json`: the real ports (OpenFGA SDK, client-node SAR,
 *    TokenRequest, the PluginInstallation watch) against bench/servers/upstream-fakes.ts, caches
 *    sized for the memory scenario (with `--shipped-caches`, the configuration's defaults).
 *
 *   node bench/servers/portcullis.ts --ready-file F --world W.json [--address 127.0.0.1:0]
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { configSchema } from "../../src/config/schema.ts";
import { ProjectStore } from "../../src/konfidence/project-index.ts";
import { ProviderHttp } from "../../src/konfidence/provider-http.ts";
import { startServer } from "../../src/server/app.ts";
import { oidcProviders } from "../../src/server/konfidence-ports.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { startWatchdog } from "../../src/server/watchdog.ts";
import { konfidenceScenario } from "../../test/konfidence/scenario.ts";
import { SECRET } from "../../test/support/tokens.ts";
import type { KonfidenceBenchWorld } from "../konfidence-world.ts";
import { warmPorts } from "../warm-ports.ts";
import { BENCH_TOKEN_LIFETIMES, type BenchWorld } from "../workload.ts";
import { freePort } from "../../test/harness/ports.ts";
import { announceReady, profileOnSignal, reportMemoryOnSignal, serverArgs, withFreePort } from "./common.ts";

/** The memory scenario's cache sizes: every one of 100,000 users stays cached. */
export const MEMORY_CACHE_ENTRIES = 100_000;
/** Longer than any run: nothing expires, so every entry is counted. */
const HOUR_MS = 3_600_000;

const args = serverArgs();
const world = JSON.parse(readFileSync(args.world, "utf8")) as BenchWorld & { konfidence?: KonfidenceBenchWorld };
const konfidence = world.konfidence;
process.env["PORTCULLIS_BENCH_SECRET"] = SECRET;
const realPorts = args.scenario === "real-ports";
const upstream = realPorts ? (JSON.parse(readFileSync(args.upstream, "utf8")) as { openfgaUrl: string; storeId: string; kubeconfig: string }) : undefined;
const raisedCaches = realPorts && !args.shippedCaches;

const config = configSchema.parse({
  workers: 1,
  logLevel: "info",
  listen: { grpc: await withFreePort(args.address), admin: `127.0.0.1:${await freePort()}`, internal: `127.0.0.1:${await freePort()}` },
  tokens: { secrets: [{ env: "PORTCULLIS_BENCH_SECRET" }], maxLifetimeSeconds: BENCH_TOKEN_LIFETIMES, ...(raisedCaches ? { cacheMaxEntries: MEMORY_CACHE_ENTRIES } : {}) },
  openfga:
    upstream === undefined
      ? // Never contacted: the warm ports answer from memory.
        { apiUrl: "http://127.0.0.1:1", storeId: "01JBENCHST0RE0000000000000" }
      : raisedCaches
        ? { apiUrl: upstream.openfgaUrl, storeId: upstream.storeId, timeoutMs: 2_000, allowTtlMs: HOUR_MS, cacheMaxEntries: MEMORY_CACHE_ENTRIES }
        : { apiUrl: upstream.openfgaUrl, storeId: upstream.storeId },
  clusters: world.clusterIds.map((id) => ({ id, kubeconfig: upstream?.kubeconfig ?? "/nonexistent" })),
  ...(raisedCaches
    ? {
        check: { timeoutMs: 5_000 },
        kube: {
          sar: { timeoutMs: 2_000, allowTtlMs: HOUR_MS, cacheMaxEntries: MEMORY_CACHE_ENTRIES },
          tokenRequest: { timeoutMs: 2_000 },
        },
      }
    : {}),
  ...(konfidence === undefined ? {} : { konfidence: { providers: { allowList: konfidence.providers } } }),
});
const logging = createLogging(config.logLevel);
// As serve.ts starts it (on by default): its process is part of what a replica holds in memory (rssOf counts children).
if (config.watchdog.enabled) startWatchdog({ timeoutMs: config.watchdog.timeoutMs, logger: logging.logger });
let ports: ConnectedPorts;
if (realPorts) {
  ports = await connectPorts(config, logging.logger);
  while (!ports.ready()) await sleep(50);
} else {
  ports = warmPorts(world);
}
if (konfidence !== undefined) {
  // The real Project store and OIDC verification (discovery, JWKS, verified-token cache), against
  // the runner's local providers; only the Project watch is replaced by loading the store directly.
  const store = new ProjectStore(() => true);
  for (const p of konfidenceScenario({ projects: konfidence.projects, providers: konfidence.providers }).projects) store.put(p);
  const p = config.konfidence!.providers;
  const workloadTokens = oidcProviders(p, new ProviderHttp({ ca: konfidence.ca, timeoutMs: p.timeoutMs, maxResponseBytes: p.maxResponseBytes }));
  ports = { ...ports, konfidence: { projects: store, workloadTokens } };
}
const server = await startServer({ config, ports, runtime: ports, logger: logging.logger, audit: logging.audit, flushLogs: logging.flush });
reportMemoryOnSignal(args.memoryFile);
const profiler = profileOnSignal(args.profileFile);
announceReady(args.readyFile, { port: server.grpcPort, adminPort: server.adminPort });

process.on("SIGTERM", () => {
  profiler
    .stop()
    .then(() => server.shutdown())
    .then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
