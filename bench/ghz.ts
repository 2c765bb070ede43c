/**
 * Load from a separate process: ghz, pinned to its own core, against one server on 127.0.0.1, and
 * what the server spent meanwhile (/proc/<pid>/stat utime+stime) and held (VmRSS).
 */
import { execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { PROTO_ROOT } from "../src/envoy/protos.ts";
import { rssOf } from "./servers/common.ts";

export const CHECK_CALL = "envoy.service.auth.v3.Authorization.Check";
export const CHECK_PROTO = "envoy/service/auth/v3/external_auth.proto";

export interface LoadSpec {
  readonly ghz: string;
  /** host:port on 127.0.0.1 */
  readonly target: string;
  readonly dataFile: string;
  readonly concurrency: number;
  readonly connections: number;
  readonly durationSeconds: number;
  /** Fixed rate (requests per second); saturation when absent. */
  readonly rps?: number;
  /** The core ghz runs on. */
  readonly core: string;
  readonly workDir: string;
  /** The server's processes, whose CPU time the run is charged. */
  readonly serverPids: readonly number[];
  /** The core the server is pinned to, for the /proc/stat accounting of what else ran there. */
  readonly serverCore?: string;
}

export interface LoadResult {
  readonly offeredRps: number | "saturation";
  readonly count: number;
  readonly okCount: number;
  /** Failed requests by gRPC status, not counting those cut off when ghz stopped. */
  readonly errors: Record<string, number>;
  /** In flight when ghz closed its connections at the end of the run. */
  readonly cutAtEnd: number;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  readonly maxMs: number;
  /** Server CPU (user + system, all threads) per request sent, in microseconds. */
  readonly cpuUsPerRequest: number;
  /** Server CPU utilisation over the run, in cores. */
  readonly cpuCores: number;
  /** ghz's own CPU (user + system) over the run, in cores: near 1.0 means the load generator was the limit. */
  readonly ghzCores: number;
  /** What else the two cores did meanwhile (/proc/stat), as fractions of the run's wall time. */
  readonly machine: RunMachine;
  /** How often the server's threads slept and were woken, per request (see ThreadSwitches). */
  readonly switches: ThreadSwitches;
  readonly rssBytes: number;
  /** The exact ghz command line. */
  readonly command: string;
}

/** Per core: time stolen by the hypervisor, and time busy with work other than the server and ghz. */
export interface RunMachine {
  readonly serverCoreSteal: number;
  /** The server's core busy minus the server's own CPU: other processes sharing its core. */
  readonly serverCoreForeign: number;
  readonly loadCoreSteal: number;
  /** The load core busy minus ghz's own CPU. */
  readonly loadCoreForeign: number;
  /** The 1-minute load average at the end of the run. */
  readonly loadAvg1: number;
}

/**
 * Context switches of the server's threads over a run, per request (/proc/<pid>/task/<tid>/status).
 * A voluntary switch is a sleep: the thread had nothing to do (Node's main thread in epoll_wait) and
 * was woken later. On these VMs a sleep and wake-up costs the process far more CPU than a check's own
 * work, so CPU per check at a fixed rate depends on how often the server slept, which is why it is
 * recorded beside it.
 */
export interface ThreadSwitches {
  /** Sleeps of the main thread (the task whose id is the pid: Node's event loop). */
  readonly mainSleeps: number;
  /** Times the main thread was preempted while it had work (by its own other threads, on a one-core pin). */
  readonly mainPreempted: number;
  /** Sleeps of every other thread (V8's GC helpers, libuv's pool; for OPA, Go's threads). */
  readonly otherSleeps: number;
}

/** Voluntary and involuntary context switches so far, of each process's main thread and of its other threads. */
export function threadSwitchCounts(pids: readonly number[]): Record<keyof ThreadSwitches, number> {
  const out: Record<keyof ThreadSwitches, number> = { mainSleeps: 0, mainPreempted: 0, otherSleeps: 0 };
  for (const pid of pids) {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      let status: string;
      try {
        status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
      } catch {
        continue; // the thread ended meanwhile
      }
      const sleeps = Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? 0);
      const preempted = Number(/^nonvoluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? 0);
      if (Number(tid) === pid) {
        out.mainSleeps += sleeps;
        out.mainPreempted += preempted;
      } else out.otherSleeps += sleeps;
    }
  }
  return out;
}

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());

/** utime + stime of a process (every thread), in seconds. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** Per-core jiffies from /proc/stat: busy (user, nice, system, irq, softirq) and steal. */
export function coreTimes(): Map<string, { busy: number; steal: number }> {
  const out = new Map<string, { busy: number; steal: number }>();
  for (const line of readFileSync("/proc/stat", "utf8").split("\n")) {
    const m = /^cpu(\d+) (.*)$/.exec(line);
    if (m === null) continue;
    const [user, nice, system, , , irq, softirq, steal] = m[2]!.trim().split(/\s+/).map(Number);
    out.set(m[1]!, { busy: (user! + nice! + system! + irq! + softirq!) / CLK_TCK, steal: steal! / CLK_TCK });
  }
  return out;
}

/** VmRSS of a server and its children (the watchdog), in bytes. */
export function rssBytes(pid: number): number {
  return rssOf(pid).rssBytes;
}

interface GhzReport {
  count: number;
  /** The run's duration, in nanoseconds. */
  total: number;
  rps: number;
  errorDistribution?: Record<string, number>;
  statusCodeDistribution?: Record<string, number>;
  details?: Array<{ latency: number; status: string; error?: string }>;
}

export function ghzArgs(spec: LoadSpec, outFile: string): string[] {
  return [
    "--insecure",
    "--import-paths",
    PROTO_ROOT,
    "--proto",
    CHECK_PROTO,
    "--call",
    CHECK_CALL,
    "--data-file",
    spec.dataFile,
    "--disable-template-functions",
    "--disable-template-data",
    "--cpus",
    "1",
    "--concurrency",
    String(spec.concurrency),
    "--connections",
    String(spec.connections),
    "--duration",
    `${spec.durationSeconds}s`,
    "--timeout",
    "10s",
    // A fixed rate with at most `concurrency` requests in flight. ghz's --async open loop queues inside
    // ghz itself on one core (45 ms medians for a no-op server at a third of its capacity), and with
    // many workers its latencies include its own scheduling: against the no-op at half its capacity,
    // p99 was 24 ms with 32 workers, 10 ms with 16, 4 ms with 8. The runner uses 8.
    ...(spec.rps === undefined ? [] : ["--rps", String(spec.rps)]),
    "--format",
    "json",
    "--output",
    outFile,
    spec.target,
  ];
}

export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const outFile = join(spec.workDir, `ghz-${process.hrtime.bigint()}.json`);
  const args = ["-c", spec.core, spec.ghz, ...ghzArgs(spec, outFile)];
  const cpuBefore = spec.serverPids.reduce((s, pid) => s + cpuSeconds(pid), 0);
  const coresBefore = coreTimes();
  const switchesBefore = threadSwitchCounts(spec.serverPids);
  const started = process.hrtime.bigint();
  // Through bash so that `times` reports ghz's own CPU (the shell's children) once it has exited.
  const ghzCpuSeconds = await new Promise<number>((resolve, reject) => {
    const child = spawn("bash", ["-c", 'taskset "$@"; s=$?; times >&2; exit $s', "bash", ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`ghz exited ${code}: ${stderr.slice(-2000)}`));
      // `times`: the shell's user and system time, then its children's: "0m3.210s 0m0.450s".
      const children = stderr.trim().split("\n").at(-1)!.match(/(\d+)m([\d.]+)s/g) ?? [];
      resolve(children.reduce((s, t) => s + Number(/(\d+)m/.exec(t)![1]) * 60 + Number(/m([\d.]+)s/.exec(t)![1]), 0));
    });
  });
  const wallSeconds = Number(process.hrtime.bigint() - started) / 1e9;
  const cpuAfter = spec.serverPids.reduce((s, pid) => s + cpuSeconds(pid), 0);
  const coresAfter = coreTimes();
  const switchesAfter = threadSwitchCounts(spec.serverPids);
  const rss = spec.serverPids.reduce((s, pid) => s + rssBytes(pid), 0);
  const report = JSON.parse(readFileSync(outFile, "utf8")) as GhzReport;
  rmSync(outFile, { force: true });

  const details = report.details ?? [];
  const ok = details.filter((d) => d.status === "OK");
  const latencies = Float64Array.from(ok.map((d) => d.latency / 1e6)).sort();
  const errors: Record<string, number> = {};
  let cutAtEnd = 0;
  for (const d of details) {
    if (d.status === "OK") continue;
    // ghz closes its connections when the duration is up: the requests in flight then fail this way.
    if (d.error?.includes("use of closed network connection") || d.error?.includes("transport is closing")) cutAtEnd++;
    else errors[d.status] = (errors[d.status] ?? 0) + 1;
  }
  const cpu = cpuAfter - cpuBefore;
  const delta = (core: string, field: "busy" | "steal") => {
    const [a, b] = [coresBefore.get(core), coresAfter.get(core)];
    return a === undefined || b === undefined ? NaN : (b[field] - a[field]) / wallSeconds;
  };
  const serverCore = spec.serverCore ?? "none";
  const perRequest = (n: number) => (report.count === 0 ? NaN : n / report.count);
  return {
    offeredRps: spec.rps ?? "saturation",
    count: report.count,
    okCount: ok.length,
    errors,
    cutAtEnd,
    rps: ok.length / (report.total / 1e9),
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
    p999Ms: quantile(latencies, 0.999),
    maxMs: latencies.length === 0 ? NaN : latencies[latencies.length - 1]!,
    cpuUsPerRequest: report.count === 0 ? NaN : (cpu / report.count) * 1e6,
    cpuCores: cpu / wallSeconds,
    ghzCores: ghzCpuSeconds / wallSeconds,
    machine: {
      serverCoreSteal: delta(serverCore, "steal"),
      serverCoreForeign: Math.max(0, delta(serverCore, "busy") - cpu / wallSeconds),
      loadCoreSteal: delta(spec.core, "steal"),
      loadCoreForeign: Math.max(0, delta(spec.core, "busy") - ghzCpuSeconds / wallSeconds),
      loadAvg1: loadavg()[0]!,
    },
    switches: {
      mainSleeps: perRequest(switchesAfter.mainSleeps - switchesBefore.mainSleeps),
      mainPreempted: perRequest(switchesAfter.mainPreempted - switchesBefore.mainPreempted),
      otherSleeps: perRequest(switchesAfter.otherSleeps - switchesBefore.otherSleeps),
    },
    rssBytes: rss,
    command: ["taskset", ...args.map((a) => (a === outFile ? "OUT.json" : a))].join(" "),
  };
}

/** Nearest-rank quantile of sorted values. */
export function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}
