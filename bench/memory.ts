/**
 * The memory scenario: portcullis on its real ports (bench/servers/portcullis.ts --scenario
 * real-ports) against the wire fakes in another process, with N installations in the watched
 * index, then N users' PluginTokens checked once each on the plugin-proxy route (a verified-token
 * entry and a can_view entry per user). The server's RSS is read from /proc before, during (the
 * RSS curve: RSS and V8 heap used every users/CURVE_POINTS checks, heap from the admin port's
 * /metrics so no GC is forced), after, after a full GC (SIGUSR2 report), and once more a minute
 * after that, idle (what V8 and malloc give back on their own). The raised caches preallocate their
 * tables (lru-cache sizes them by `max`), so the idle server as shipped is read first, in a process
 * of its own with the configuration's default cache sizes.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { authorizationClient } from "../src/envoy/protos.ts";
import { pluginClaims, sign } from "../test/support/tokens.ts";
import { rssBytes } from "./ghz.ts";
import { type MemoryReport, rssOf } from "./servers/common.ts";
import { startProcess } from "./processes.ts";
import { BENCH_CLUSTER, BENCH_TOKEN_SECONDS, benchWorld, envoyCheck, userId } from "./workload.ts";

/** How many points the RSS curve has over the fill (plus the idle point at 0 users). */
const CURVE_POINTS = 20;
/** How long after the GC report the server sits idle before the last reading. */
export const LATER_SECONDS = 60;
/**
 * How long the idle server as shipped sits without a Check before its quiet reading: the idle GC's
 * default quiet period (idleGc.quietMs, 30 s), a quarter of it for the timer that looks, and margin.
 */
export const QUIET_SECONDS = 40;

export interface CurvePoint {
  readonly users: number;
  readonly rssMiB: number;
  readonly heapUsedMiB: number;
}

export interface MemoryScenario {
  /** The server's Node flags and the environment added to it (the shipped defaults unless a run overrides them). */
  readonly nodeFlags: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly users: number;
  readonly installations: number;
  readonly allowed: number;
  readonly failed: number;
  readonly fillSeconds: number;
  /** The server's CPU time (user + system) over the fill: what the GC settings cost. */
  readonly fillCpuSeconds: number;
  /** The idle server as shipped (default cache sizes, its own process), index synced, after a full GC; absent in runs before 2026-12-02. */
  readonly idleShipped?: MemoryReport;
  /** The same process QUIET_SECONDS later, no Check in between (its idle GC has run), after a full GC; absent in runs before 2026-12-03. */
  readonly idleShippedQuiet?: MemoryReport & { readonly seconds: number };
  /** VmRSS of the idle server once its index has synced. */
  readonly rssIdleBytes: number;
  /** VmRSS right after the last check. */
  readonly rssFilledBytes: number;
  /** After a full GC. */
  readonly afterGc: MemoryReport;
  readonly idleAfterGc: MemoryReport;
  /** RSS and V8 heap used (not collected first) as the users are checked, from 0 to `users`. */
  readonly rssCurve: readonly CurvePoint[];
  /** LATER_SECONDS after the GC report, idle, nothing forced: VmRSS (with its anonymous part) and the V8 heap. */
  readonly later: { readonly seconds: number; readonly rssBytes: number; readonly rssAnonBytes: number; readonly heapUsedBytes: number; readonly heapTotalBytes: number };
}

const MiB = 2 ** 20;

export async function runMemoryScenario(options: {
  workDir: string;
  users: number;
  installations: number;
  serverCore: string;
  loadCore: string;
  /** Node flags and environment for the server; the shipped defaults when absent. */
  nodeFlags?: readonly string[];
  env?: Record<string, string>;
  /** Diagnostics: called with the server's pid once the checks are done, before the GC report. */
  onFilled?: (pid: number) => Promise<void>;
}): Promise<MemoryScenario> {
  const { workDir } = options;
  const world = benchWorld(options.installations);
  const worldFile = join(workDir, "world-memory.json");
  writeFileSync(worldFile, JSON.stringify(world));
  const node = process.execPath;
  const fakes = await startProcess({
    name: "upstream-fakes",
    core: options.loadCore,
    command: [node, join(import.meta.dirname, "servers/upstream-fakes.ts"), "--ready-file", "{READY}", "--world", worldFile],
    workDir,
  });
  const memoryFile = join(workDir, "memory-report.json");
  const nodeFlags = options.nodeFlags ?? [];
  const env = options.env ?? {};
  const startServer = (shippedCaches: boolean) =>
    startProcess({
      name: shippedCaches ? "portcullis-real-ports-shipped-caches" : "portcullis-real-ports",
      core: options.serverCore,
      env,
      command: [
        node,
        ...nodeFlags,
        "--expose-gc",
        join(import.meta.dirname, "servers/portcullis.ts"),
        "--ready-file",
        "{READY}",
        "--world",
        worldFile,
        "--scenario",
        "real-ports",
        "--upstream",
        join(workDir, "upstream-fakes.ready.json"),
        "--memory-file",
        memoryFile,
        ...(shippedCaches ? ["--shipped-caches"] : []),
      ],
      workDir,
      timeoutMs: 120_000,
    });
  const reportOf = async (pid: number): Promise<MemoryReport> => {
    rmSync(memoryFile, { force: true });
    process.kill(pid, "SIGUSR2");
    while (!existsSync(memoryFile)) await sleep(50);
    return JSON.parse(readFileSync(memoryFile, "utf8")) as MemoryReport;
  };
  /** The idle server as shipped, in a process of its own: its report after a full GC, again once quiet, then it is stopped. */
  const idleAsShipped = async (): Promise<{ started: MemoryReport; quiet: MemoryReport & { seconds: number } }> => {
    const shipped = await startServer(true);
    try {
      await sleep(1_000);
      const started = await reportOf(shipped.pid);
      await sleep(QUIET_SECONDS * 1000);
      return { started, quiet: { ...(await reportOf(shipped.pid)), seconds: QUIET_SECONDS } };
    } finally {
      await shipped.stop();
    }
  };
  const { started: idleShipped, quiet: idleShippedQuiet } = await idleAsShipped();
  const server = await startServer(false);
  const report = () => reportOf(server.pid);
  const heap = async (): Promise<{ heapUsedBytes: number; heapTotalBytes: number }> => {
    const text = await (await fetch(`http://127.0.0.1:${server.info["adminPort"] as number}/metrics`)).text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? Number.NaN);
    return { heapUsedBytes: metric("nodejs_heap_size_used_bytes"), heapTotalBytes: metric("nodejs_heap_size_total_bytes") };
  };
  const rssCurve: CurvePoint[] = [];
  const pending: Array<Promise<void>> = [];
  const sample = (users: number) => {
    const rss = rssBytes(server.pid);
    pending.push(heap().then((h) => void rssCurve.push({ users, rssMiB: rss / MiB, heapUsedMiB: h.heapUsedBytes / MiB })));
  };
  const curveStep = Math.max(1, Math.floor(options.users / CURVE_POINTS));
  try {
    await sleep(1_000);
    const rssIdleBytes = rssBytes(server.pid);
    sample(0);
    const idleAfterGc = await report();
    const client = authorizationClient(`127.0.0.1:${server.port}`);
    let next = 0;
    let done = 0;
    let allowed = 0;
    let failed = 0;
    const started = performance.now();
    const cpuAtStart = cpuSeconds(server.pid);
    const exp = Math.floor(Date.now() / 1000) + BENCH_TOKEN_SECONDS;
    const worker = async () => {
      for (;;) {
        const i = next++;
        if (i >= options.users) return;
        const inst = world.installations[i % world.installations.length]!;
        const token = await sign(
          pluginClaims({ sub: userId(i), cluster_id: BENCH_CLUSTER, installation_id: inst.uid, installation_name: inst.name, plugin_name: inst.pluginName }),
          { exp },
        );
        const request = envoyCheck("GET", `/installations/${inst.uid}/runtime/api/v1/status`, { authorization: `Bearer ${token}` }, "plugin-proxy");
        // proto-loader encodes Timestamps from {seconds, nanos}, not from ghz's JSON string form.
        delete ((request["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
        try {
          const res = (await client.check(request)) as { status?: { code?: number } };
          if (res.status?.code === 0) allowed++;
          else failed++;
        } catch {
          failed++;
        }
        if (++done % curveStep === 0) sample(done);
      }
    };
    await Promise.all(Array.from({ length: 128 }, worker));
    const fillSeconds = (performance.now() - started) / 1000;
    const fillCpuSeconds = cpuSeconds(server.pid) - cpuAtStart;
    client.close();
    const rssFilledBytes = rssBytes(server.pid);
    await options.onFilled?.(server.pid);
    const afterGc = await report();
    await Promise.all(pending);
    rssCurve.sort((a, b) => a.users - b.users);
    await sleep(LATER_SECONDS * 1000);
    const { rssBytes: laterRss, rssAnonBytes: laterAnon } = rssOf(server.pid);
    const later = { seconds: LATER_SECONDS, rssBytes: laterRss, rssAnonBytes: laterAnon, ...(await heap()) };
    return {
      nodeFlags,
      env,
      users: options.users,
      installations: options.installations,
      allowed,
      failed,
      fillSeconds,
      fillCpuSeconds,
      idleShipped,
      idleShippedQuiet,
      rssIdleBytes,
      rssFilledBytes,
      afterGc,
      idleAfterGc,
      rssCurve,
      later,
    };
  } finally {
    await server.stop();
    await fakes.stop();
  }
}

/** utime + stime of a process, from /proc/PID/stat (in clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
