/**
 * `portcullis --config FILE`: run the server until SIGTERM or SIGINT, then shut down gracefully.
 * With `workers: N` (N > 1) this process is the primary and N forked workers serve (workers.ts).
 */
import { loadConfigForStart } from "../server/environment.ts";
import { startServer } from "../server/app.ts";
import { connectPorts } from "../server/ports.ts";
import { createLogging } from "../server/logging.ts";
import { startWatchdog } from "../server/watchdog.ts";
import { abandonStart, isWorker, reportListening, superviseWorkers } from "../server/workers.ts";

export async function serve(configPath: string): Promise<void> {
  // Every check validate-config runs, before any watch, timer or listener exists: a bad
  // configuration exits at once (CrashLoopBackOff), never a process that lingers without serving.
  const config = await loadConfigForStart(configPath);
  const logging = createLogging(config.logLevel);
  if (config.workers > 1 && !isWorker()) {
    // A worker drains for shutdown.drainMs, then answers its in-flight checks within twice the check deadline.
    const graceMs = config.shutdown.drainMs + config.check.timeoutMs * 2 + 5_000;
    const code = await superviseWorkers({
      count: config.workers,
      logger: logging.logger,
      graceMs,
      admin: { address: config.listen.admin, explain: config.admin.explain },
    });
    await logging.flush();
    process.exit(code);
  }
  // SIGHUP reloads the configuration (reload.ts); installed before the start so that one arriving
  // meanwhile is kept for later, never Node's default (exit).
  let reloadWhenStarted = false;
  let reload = () => {
    reloadWhenStarted = true;
  };
  process.on("SIGHUP", () => {
    logging.logger.info({ signal: "SIGHUP" }, "signal received: reloading the configuration");
    reload();
  });
  // Each serving process watches its own event loop, from its start on.
  if (config.watchdog.enabled) startWatchdog({ timeoutMs: config.watchdog.timeoutMs, logger: logging.logger });
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    const ports = await connectPorts(config, logging.logger);
    server = await startServer({ config, ports, runtime: ports, logger: logging.logger, audit: logging.audit, flushLogs: logging.flush });
  } catch (err) {
    // A port taken (EADDRINUSE), a secret missing: logged here, and main ends the process — the
    // watches and timers already started must not keep a server that never listened alive.
    logging.logger.error({ err }, "portcullis failed to start");
    await logging.flush();
    abandonStart();
    throw err;
  }
  reload = () => void server.reload(() => loadConfigForStart(configPath));
  if (reloadWhenStarted) reload();
  if (isWorker()) reportListening();

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logging.logger.info({ signal }, "signal received");
    server.shutdown().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  // A rejection nobody handled is a bug; every decision is still fail-closed, so log it and serve on.
  process.on("unhandledRejection", (reason) => logging.logger.error({ err: reason }, "unhandled rejection"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}
