/**
 * The watchdog: a worker thread that ends the process when the main thread's event loop stops
 * answering. A loop stuck in native code (issue 12: an HTTP/2 send loop that never returned, while
 * memory grew outside the V8 heap) runs no JavaScript at all — no timer, no signal handler, no
 * SIGTERM — so nothing on the main thread can notice it. A restart is better than a frozen replica
 * that eats the node's memory: the Pod is restarted and Envoy's health checking moves traffic away.
 *
 * The main thread bumps a shared counter from a timer; the worker reads it on its own timer and,
 * when it has not moved for `timeoutMs`, writes one line to stderr (the main thread's log stream
 * cannot be flushed) and kills the process with SIGKILL (exit status 137 in a container): a worker
 * cannot end the process any other way, and a stuck main thread handles no gentler signal.
 */
import { Worker } from "node:worker_threads";
import type { Logger } from "pino";

export interface WatchdogOptions {
  /** How long the event loop may go without answering. */
  readonly timeoutMs: number;
  readonly logger: Logger;
}

export interface WatchdogWorkerData {
  readonly beats: SharedArrayBuffer;
  readonly timeoutMs: number;
  readonly intervalMs: number;
}

export function startWatchdog(options: WatchdogOptions): void {
  const beats = new SharedArrayBuffer(4);
  const counter = new Int32Array(beats);
  // Ten heartbeats per timeout, so an ordinary slow tick never looks like a stall.
  const intervalMs = Math.max(50, Math.floor(options.timeoutMs / 10));
  setInterval(() => Atomics.add(counter, 0, 1), intervalMs).unref();
  const worker = new Worker(new URL("./watchdog-worker.ts", import.meta.url), {
    workerData: { beats, timeoutMs: options.timeoutMs, intervalMs } satisfies WatchdogWorkerData,
    resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 },
    stdout: false,
    stderr: false,
  });
  // The watchdog never keeps a process alive that is otherwise done.
  worker.unref();
  worker.on("error", (err) => options.logger.error({ err }, "watchdog worker failed; the event loop is no longer watched"));
}
