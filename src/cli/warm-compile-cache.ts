/**
 * Fills Node's compile cache (NODE_COMPILE_CACHE, src/cli/node-flags.ts) at image build: imports
 * every module under src/ once and exits, so Node writes each one's stripped source and code cache.
 * The pod's root filesystem is read-only, so the cache a pod reads is the one the image holds. Run
 * with the shipped flags and as the uid the server runs as (both name the cache's subdirectory),
 * after `src/cli/main.ts --help`, which caches the entry point itself (importing it here would run
 * the command line). A thread's entry point is cached under its own key when it is loaded as one,
 * and it runs on load, so the watchdog's is started as a thread, with a timeout it never reaches.
 * src/kube/kubernetes-client.ts is left out: the server never loads it (it loads the bundle built
 * from it, which the modules importing `#kubernetes-client` cache), and it would load the whole
 * unbundled client-node into the cache.
 */
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import type { WatchdogWorkerData } from "../server/watchdog.ts";

const SRC = resolve(import.meta.dirname, "..");
const ENTRY_POINT = join(SRC, "cli", "main.ts");
const THREAD_ENTRY_POINT = join(SRC, "server", "watchdog-worker.ts");
const BUNDLE_ENTRY = join(SRC, "kube", "kubernetes-client.ts");

const modules = readdirSync(SRC, { recursive: true, encoding: "utf8" })
  .filter((path) => path.endsWith(".ts"))
  .map((path) => join(SRC, path))
  .filter((path) => path !== ENTRY_POINT && path !== THREAD_ENTRY_POINT && path !== BUNDLE_ENTRY && path !== import.meta.filename)
  .sort();
for (const path of modules) await import(pathToFileURL(path).href);

const idle = 2 ** 30;
const thread = new Worker(pathToFileURL(THREAD_ENTRY_POINT), {
  workerData: { beats: new SharedArrayBuffer(4), timeoutMs: idle, intervalMs: idle } satisfies WatchdogWorkerData,
});
// A thread's event loop starts once its entry point has been loaded and run.
const deadline = performance.now() + 30_000;
while (thread.performance.eventLoopUtilization().idle === 0) {
  if (performance.now() > deadline) throw new Error(`${THREAD_ENTRY_POINT} did not load within 30 s`);
  await sleep(10);
}
process.stdout.write(`compile cache: ${modules.length + 1} modules loaded\n`);
// Node writes the cache as the process exits; the thread would keep it running.
process.exit(0);
