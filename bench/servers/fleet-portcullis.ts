/**
 * One portcullis replica of the fleet benchmark: the real configuration loader, the real ports
 * (connectPorts: OpenFGA SDK, client-node SubjectAccessReview and TokenRequest, the PluginInstallation
 * watches, the cluster registry when the file configures one) and the real server, exactly as
 * `portcullis --config FILE` runs them, plus what the runner needs: a ready file written once
 * `--expect-clusters` clusters' indexes have synced, and a memory report (after a full GC with
 * `--expose-gc`) on SIGUSR2.
 *
 *   node --expose-gc bench/servers/fleet-portcullis.ts --config C.yaml --ready-file F --memory-file M --expect-clusters N [--log-file L]
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import pino from "pino";
import { loadConfigForStart } from "../../src/server/environment.ts";
import { startServer } from "../../src/server/app.ts";
import { connectPorts } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { startWatchdog } from "../../src/server/watchdog.ts";
import { announceReady, reportMemoryOnSignal } from "./common.ts";

const { values } = parseArgs({
  options: {
    config: { type: "string" },
    "ready-file": { type: "string" },
    "memory-file": { type: "string", default: "" },
    "expect-clusters": { type: "string", default: "0" },
    /** Log lines (audit lines included) to this file rather than stdout, for diagnosis. */
    "log-file": { type: "string" },
  },
  strict: true,
});
if (values.config === undefined || values["ready-file"] === undefined) throw new Error("--config and --ready-file are required");

const started = performance.now();
const config = await loadConfigForStart(values.config);
const logFile = values["log-file"];
const logging = createLogging(config.logLevel, logFile === undefined ? undefined : pino.destination({ dest: logFile, sync: false }));
// As serve.ts starts it (on by default): its process is part of what a replica holds in memory (rssOf counts children).
if (config.watchdog.enabled) startWatchdog({ timeoutMs: config.watchdog.timeoutMs, logger: logging.logger });
const ports = await connectPorts(config, logging.logger);
const syncedClusters = () => ports.indexSizes().filter((s) => s.index === "plugininstallations" && s.synced).length;
const expected = Number(values["expect-clusters"]);
while (syncedClusters() < expected || !ports.ready()) await sleep(20);
const syncMs = performance.now() - started;
const server = await startServer({ config, ports, runtime: ports, logger: logging.logger, audit: logging.audit, flushLogs: logging.flush });
reportMemoryOnSignal(values["memory-file"], () => ({ syncedClusters: syncedClusters() }));
announceReady(values["ready-file"], { port: server.grpcPort, adminPort: server.adminPort, syncMs, syncedClusters: syncedClusters() });

process.on("SIGTERM", () => {
  server.shutdown().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
