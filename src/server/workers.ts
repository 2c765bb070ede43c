/**
 * `workers: N` with N > 1: the primary process forks N workers (node:cluster); each worker runs the
 * whole server exactly as a single process does, and they share the listening sockets (the primary
 * accepts connections and hands them to workers round-robin). Each worker has its own caches,
 * index watches, health, admin and internal servers: caches warm per worker, each worker opens its
 * own watches on every API server, and a /metrics scrape reports the worker that answered it.
 *
 * SIGTERM or SIGINT to the primary is passed on to every worker, which drains as a single process
 * does (NOT_SERVING, in-flight checks answered, logs flushed); the primary exits once every worker
 * has, 0 if they all exited cleanly. A worker that dies after it was listening is replaced; one that
 * dies before (a start-up failure: configuration, credentials) stops them all, and the primary exits 1,
 * as a single process would.
 */
import cluster, { type Worker } from "node:cluster";
import type { Logger } from "pino";

export interface WorkerOptions {
  readonly count: number;
  readonly logger: Logger;
  /** How long workers get to drain before they are killed. */
  readonly graceMs: number;
  /** Delay before a worker that died is replaced. */
  readonly restartDelayMs?: number;
}

const LISTENING = "portcullis:listening";

/** True in a worker forked by superviseWorkers: it runs the server. */
export function isWorker(): boolean {
  return cluster.isWorker;
}

/** Called by a worker once its servers listen. */
export function reportListening(): void {
  process.send?.(LISTENING);
}

/** Called by a worker whose start failed: without its IPC channel it can exit as a single process would. */
export function abandonStart(): void {
  if (cluster.isWorker) process.disconnect();
}

/** Runs in the primary: forks and supervises the workers; resolves with the exit code once they have all stopped. */
export function superviseWorkers(options: WorkerOptions): Promise<number> {
  const { logger } = options;
  const live = new Set<Worker>();
  let stopping = false;
  let failed = false;

  return new Promise<number>((resolveExit) => {
    const fork = () => {
      const worker = cluster.fork();
      let listening = false;
      live.add(worker);
      worker.on("message", (m: unknown) => {
        if (m === LISTENING) listening = true;
      });
      worker.once("exit", (code, signal) => {
        live.delete(worker);
        if (stopping) {
          if (code !== 0) failed = true;
          if (live.size === 0) resolveExit(failed ? 1 : 0);
          return;
        }
        if (!listening) {
          logger.error({ worker_pid: worker.process.pid, code, signal }, "a worker failed to start; stopping");
          failed = true;
          stop("worker start failed");
          return;
        }
        logger.error({ worker_pid: worker.process.pid, code, signal }, "worker died; starting a replacement");
        setTimeout(() => {
          if (!stopping) fork();
        }, options.restartDelayMs ?? 1_000).unref();
      });
    };

    function stop(reason: string): void {
      if (stopping) return;
      stopping = true;
      logger.info({ reason, workers: live.size }, "stopping workers");
      if (live.size === 0) {
        resolveExit(failed ? 1 : 0);
        return;
      }
      for (const worker of live) worker.process.kill("SIGTERM");
      setTimeout(() => {
        for (const worker of live) {
          logger.error({ worker_pid: worker.process.pid }, "worker did not stop in time; killing it");
          worker.process.kill("SIGKILL");
        }
      }, options.graceMs).unref();
    }
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));

    logger.info({ workers: options.count }, "starting workers");
    for (let i = 0; i < options.count; i++) fork();
  });
}
