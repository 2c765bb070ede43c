/**
 * What every benchmark server process shares: its arguments, how it tells the runner it is ready
 * (a JSON file written atomically, so the runner never reads half of it), and a memory report on
 * SIGUSR2 (the runner asks for it after a scenario; `--expose-gc` lets it collect first).
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { GCProfiler, getHeapSpaceStatistics, getHeapStatistics } from "node:v8";
import { parseArgs } from "node:util";
import { childPids } from "../../test/support/child-pids.ts";
import { freePort } from "../../test/harness/ports.ts";

export interface ServerArgs {
  readonly readyFile: string;
  readonly address: string;
  readonly scenario: string;
  /** Where the SIGUSR2 memory report goes. */
  readonly memoryFile: string;
  /** A JSON file with the scenario's workload description (users, installations, projects). */
  readonly world: string;
  /** The ready file of bench/servers/upstream-fakes.ts, for the real-ports scenario. */
  readonly upstream: string;
  /** Where a CPU profile goes: started on SIGHUP, written on SIGTERM (so warm-up and start-up stay out of it). */
  readonly profileFile: string;
  /** real-ports with the shipped cache sizes and TTLs, not the memory scenario's raised ones. */
  readonly shippedCaches: boolean;
}

export function serverArgs(): ServerArgs {
  const { values } = parseArgs({
    options: {
      "ready-file": { type: "string" },
      address: { type: "string", default: "127.0.0.1:0" },
      scenario: { type: "string", default: "" },
      "memory-file": { type: "string", default: "" },
      world: { type: "string", default: "" },
      upstream: { type: "string", default: "" },
      "profile-file": { type: "string", default: "" },
      "shipped-caches": { type: "boolean", default: false },
    },
    strict: true,
  });
  if (values["ready-file"] === undefined) throw new Error("--ready-file is required");
  return {
    readyFile: values["ready-file"],
    address: values.address,
    scenario: values.scenario,
    memoryFile: values["memory-file"],
    world: values.world,
    upstream: values.upstream,
    profileFile: values["profile-file"],
    shippedCaches: values["shipped-caches"],
  };
}

/** `address` with port 0 replaced by a free port: the configuration refuses port 0, so each listener is given one. */
export async function withFreePort(address: string): Promise<string> {
  return address.endsWith(":0") ? `${address.slice(0, -2)}:${await freePort()}` : address;
}

export function announceReady(file: string, info: Record<string, unknown>): void {
  writeFileSync(`${file}.tmp`, JSON.stringify({ pid: process.pid, ...info }));
  renameSync(`${file}.tmp`, file);
}

export interface MemoryReport {
  readonly rssBytes: number;
  /** VmRSS split as /proc reports it: anonymous memory (heap, malloc) and mapped files (the node binary's pages). */
  readonly rssAnonBytes: number;
  readonly rssFileBytes: number;
  readonly heapUsedBytes: number;
  readonly heapTotalBytes: number;
  readonly externalBytes: number;
  readonly arrayBuffersBytes: number;
  readonly spaces: Array<{ space: string; usedBytes: number; committedBytes: number }>;
  readonly gcRan: boolean;
}

/**
 * VmRSS, RssAnon and RssFile of a process and its children, in bytes (0 when /proc does not say):
 * a replica's memory is its container's, and the watchdog (src/server/watchdog.ts) runs beside the
 * server as a process of its own.
 */
export function rssOf(pid: number): { rssBytes: number; rssAnonBytes: number; rssFileBytes: number } {
  const total = { rssBytes: 0, rssAnonBytes: 0, rssFileBytes: 0 };
  for (const p of [pid, ...childPids(pid)]) {
    let status: string;
    try {
      status = readFileSync(`/proc/${p}/status`, "utf8");
    } catch {
      if (p === pid) throw new Error(`no process ${pid}`);
      continue;
    }
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status)?.[1] ?? 0) * 1024;
    total.rssBytes += kb("VmRSS");
    total.rssAnonBytes += kb("RssAnon");
    total.rssFileBytes += kb("RssFile");
  }
  return total;
}

export function memoryReport(): MemoryReport {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const usage = process.memoryUsage();
  void getHeapStatistics();
  const { rssBytes, rssAnonBytes, rssFileBytes } = rssOf(process.pid);
  return {
    rssBytes,
    rssAnonBytes,
    rssFileBytes,
    heapUsedBytes: usage.heapUsed,
    heapTotalBytes: usage.heapTotal,
    externalBytes: usage.external,
    arrayBuffersBytes: usage.arrayBuffers,
    spaces: getHeapSpaceStatistics().map((s) => ({ space: s.space_name, usedBytes: s.space_used_size, committedBytes: s.physical_space_size })),
    gcRan: gc !== undefined,
  };
}

/** On SIGUSR2, write a memory report to `file` (atomically). */
export function reportMemoryOnSignal(file: string, extra: () => Record<string, unknown> = () => ({})): void {
  if (file === "") return;
  process.on("SIGUSR2", () => {
    const report = { ...memoryReport(), ...extra() };
    writeFileSync(`${file}.tmp`, JSON.stringify(report));
    renameSync(`${file}.tmp`, file);
  });
}

/**
 * With a profile file: SIGHUP starts the V8 CPU profiler, V8's sampling heap profiler and a count of
 * the bytes the V8 heap allocated (v8.GCProfiler, as bench/hot-path.ts counts them); `stop()` (called
 * before exiting on SIGTERM) writes F (the CPU profile), F.heapprofile and F.alloc.json
 * (`{ allocatedBytes, gcCounts }`: the GCs by V8's type). Without one, both do nothing.
 */
export function profileOnSignal(file: string): { stop(): Promise<void> } {
  if (file === "") return { stop: async () => {} };
  const session = new Session();
  session.connect();
  const gc = new GCProfiler();
  let heapAtStart = 0;
  let running = false;
  process.on("SIGHUP", () => {
    if (running) return;
    running = true;
    gc.start();
    heapAtStart = getHeapStatistics().used_heap_size;
    void session
      .post("Profiler.enable")
      .then(() => session.post("Profiler.start"))
      .then(() => session.post("HeapProfiler.enable"))
      .then(() => session.post("HeapProfiler.startSampling", { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true }));
  });
  return {
    async stop() {
      if (!running) return;
      const gcs = gc.stop()?.statistics ?? [];
      const allocatedBytes = allocatedSince(heapAtStart, gcs, getHeapStatistics().used_heap_size);
      const gcCounts: Record<string, number> = {};
      for (const { gcType } of gcs) gcCounts[gcType] = (gcCounts[gcType] ?? 0) + 1;
      const { profile } = await session.post("Profiler.stop");
      writeFileSync(file, JSON.stringify(profile));
      const heap = await session.post("HeapProfiler.stopSampling");
      writeFileSync(`${file}.heapprofile`, JSON.stringify(heap.profile));
      writeFileSync(`${file}.alloc.json`, JSON.stringify({ allocatedBytes, gcCounts }));
    },
  };
}

/** Bytes allocated on the V8 heap: at each GC, what it found in use less what the previous one left; then the growth since the last. */
export function allocatedSince(
  usedAtStart: number,
  gcs: ReadonlyArray<{ beforeGC: { heapStatistics: { usedHeapSize: number } }; afterGC: { heapStatistics: { usedHeapSize: number } } }>,
  usedAtEnd: number,
): number {
  let left = usedAtStart;
  let allocated = 0;
  for (const { beforeGC, afterGC } of gcs) {
    allocated += beforeGC.heapStatistics.usedHeapSize - left;
    left = afterGC.heapStatistics.usedHeapSize;
  }
  return allocated + usedAtEnd - left;
}
