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
import { getHeapStatistics } from "node:v8";
import { kubeApiEnvoyCluster } from "../src/envoy/kube-api-upstream.ts";
import type { AccessAttributes, MintedToken } from "../src/ports/policy-ports.ts";
import { CachedLookup } from "../src/cache/cached-lookup.ts";
import { authorizationClient } from "../src/envoy/protos.ts";
import { KeyTags } from "../src/cache/key-tags.ts";
import { CanViewKeys } from "../src/fga/can-view.ts";
import type { SafeHeaderValue } from "../src/headers/mutations.ts";
import { tokenKey } from "../src/kube-calls/service-account-tokens.ts";
import { userServiceAccount } from "../src/kube-reading/service-accounts.ts";
import { reviewKey } from "../src/kube-calls/user-access-review.ts";
import { FUNDAMENT_ISSUER, TokenVerifier } from "../src/tokens/fundament.ts";
import { pluginClaims, SECRET, sign } from "../test/support/tokens.ts";
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

/** One cache's cost per entry: live V8 heap after a full GC, full against empty, divided by the entries. */
export interface CacheEntryCost {
  readonly cache: string;
  readonly entries: number;
  /** What the empty cache sized for `entries` holds (lru-cache preallocates its tables by `max`), per slot. */
  readonly tableBytesPerSlot: number;
  /** What each entry adds to the live heap, its share of strings shared between entries included. */
  readonly bytesPerEntry: number;
  readonly filled: string;
}

/** Live V8 heap after two full GCs (the second frees what the first's finalizers released). */
function liveHeap(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error("run with --expose-gc");
  gc();
  gc();
  return getHeapStatistics().used_heap_size;
}

/**
 * Each of the four caches on its real code, filled with `entries` distinct entries shaped as the
 * memory scenario's (users over a tenth as many installations, one cluster, one store): the
 * verified-token cache through TokenVerifier.verify() with HS256 PluginTokens; can_view,
 * SubjectAccessReview and TokenRequest through CachedLookup with their modules' own key functions
 * and the values their ports cache (a boolean; a boolean; a ~1 KB ServiceAccount token and its
 * Envoy cluster). Every string a real answer would bring is made fresh per entry (a token, a user
 * id), and what the caller holds is dropped before the reading, so only the cache's part counts.
 */
export async function cacheEntryCosts(entries: number): Promise<CacheEntryCost[]> {
  const world = benchWorld(Math.max(1, Math.floor(entries / 10)));
  const installationOf = (i: number) => world.installations[i % world.installations.length]!;
  /** A fresh copy of a string, as a parsed answer brings one (not the constant the bench built). */
  const fresh = (s: string) => JSON.parse(JSON.stringify(s)) as string;
  const costs: CacheEntryCost[] = [];
  /** Every cache measured stays alive to the end, so none is collected during another's reading. */
  const kept: unknown[] = [];
  const measure = async <T>(cache: string, filled: string, make: () => T, fill: (cache: T, i: number) => Promise<unknown>) => {
    // A first fill of another instance compiles and warms the code path, so the reading holds entries only.
    const warm = make();
    for (let i = entries; i < entries + WARM_UP_ENTRIES; i += 1) await fill(warm, i);
    kept.push(warm);
    // Timers (lru-cache's clock reuse) fire before each reading.
    await sleep(20);
    const before = liveHeap();
    const held = make();
    kept.push(held);
    await sleep(20);
    const empty = liveHeap();
    for (let i = 0; i < entries; i += 1) await fill(held, i);
    await sleep(20);
    const full = liveHeap();
    costs.push({ cache, entries, tableBytesPerSlot: (empty - before) / entries, bytesPerEntry: (full - empty) / entries, filled });
  };

  const exp = Math.floor(Date.now() / 1000) + BENCH_TOKEN_SECONDS;
  const secret = new TextEncoder().encode(SECRET);
  await measure(
    "verified_token",
    "TokenVerifier.verify() of HS256 PluginTokens",
    () =>
      new TokenVerifier({ mode: "hs256", secrets: [secret], issuer: FUNDAMENT_ISSUER, clockToleranceSeconds: 30, maxLifetimeSeconds: { user: 3600, plugin: BENCH_TOKEN_SECONDS }, cacheMaxEntries: entries }),
    async (verifier, i) => {
      const inst = installationOf(i);
      const token = await sign(pluginClaims({ sub: userId(i), cluster_id: BENCH_CLUSTER, installation_id: inst.uid, installation_name: inst.name, plugin_name: inst.pluginName }), { exp });
      const result = await verifier.verify(token);
      if (!result.ok) throw new Error(`bench token refused: ${result.detail}`);
    },
  );

  const lookup = <V extends {}>(metric: string, value: () => V, ttlMs: number) =>
    new CachedLookup<V, undefined>({ metric, dependency: metric, question: metric, maxEntries: entries, ttlMs, ask: async () => ({ value: value() }) });
  const STORE = "01JBENCHST0RE0000000000000";
  const canViewKeys = new CanViewKeys(entries);
  await measure("openfga_can_view", "CanViewKeys.key(store, user, cluster) → boolean", () => lookup("openfga_can_view", () => true, HOUR), (c, i) =>
    c.lookup(canViewKeys.key(STORE, fresh(userId(i)), BENCH_CLUSTER), undefined),
  );
  // The ports' cluster tags (KeyTags), one table per cache as each port holds.
  const sarTags = new KeyTags(entries);
  const tokenTags = new KeyTags(entries);
  const attributes = (i: number): AccessAttributes => ({ kind: "resource", verb: "get", group: "", version: "v1", resource: "pods", subresource: "", namespace: `ns-${i % 100}`, name: "" });
  await measure("subject_access_review", "reviewKey(cluster tag, user, get pods in one of 100 namespaces) → boolean", () => lookup("subject_access_review", () => true, HOUR), (c, i) =>
    c.lookup(reviewKey(sarTags.tagOf(BENCH_CLUSTER), fresh(userId(i)), attributes(i)), undefined),
  );
  // A ServiceAccount token of kube-apiserver's size (~1 KB), its own string per entry as each TokenRequest answers one.
  const token = `eyJhbGciOiJSUzI1NiIsImtpZCI6ImJlbmNoIn0.${"x".repeat(700)}.${"y".repeat(342)}`;
  const envoyCluster = kubeApiEnvoyCluster(BENCH_CLUSTER);
  await measure(
    "service_account_token",
    "tokenKey(cluster tag, a user's ServiceAccount) → {~1 KB token, Envoy cluster}",
    () => lookup<MintedToken>("service_account_token", () => ({ authorization: fresh(`Bearer ${token}`) as SafeHeaderValue, envoyCluster }), HOUR),
    (c, i) => {
      const sa = userServiceAccount(fresh(userId(i)));
      return c.lookup(tokenKey(tokenTags.tagOf(BENCH_CLUSTER), sa.namespace, sa.name, ""), undefined);
    },
  );
  return costs;
}

const HOUR = 3_600_000;
/** Entries filled into a throwaway instance of each cache before its reading. */
const WARM_UP_ENTRIES = 1_000;

if (import.meta.main) {
  // npx node --expose-gc bench/memory.ts --per-cache [ENTRIES]: each cache's bytes per entry (JSON on stdout, a table on stderr).
  const at = process.argv.indexOf("--per-cache");
  if (at < 0) throw new Error("usage: node --expose-gc bench/memory.ts --per-cache [ENTRIES] (the memory scenario itself runs from bench/run.ts)");
  const entries = Number(process.argv[at + 1] ?? 100_000);
  const costs = await cacheEntryCosts(entries);
  process.stdout.write(`${JSON.stringify(costs)}\n`);
  for (const c of costs) process.stderr.write(`${c.cache.padEnd(22)} ${c.bytesPerEntry.toFixed(1).padStart(8)} B/entry  table ${c.tableBytesPerSlot.toFixed(1).padStart(6)} B/slot  (${c.filled})\n`);
}
