/**
 * `portcullis --config FILE`: run the server until SIGTERM or SIGINT, then shut down gracefully.
 */
import { loadConfig } from "../config/load.ts";
import { connectPorts, startServer } from "../server/app.ts";
import { createLogging } from "../server/logging.ts";

export async function serve(configPath: string): Promise<void> {
  const config = loadConfig(configPath);
  const logging = createLogging(config.logLevel);
  const ports = await connectPorts(config, logging.logger);
  const server = await startServer({ config, ports, logger: logging.logger, audit: logging.audit, flushLogs: logging.flush });

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
