/**
 * The fleet benchmark (issue 16): portcullis with 1,000 registered clusters, and 2 and 4 replicas
 * behind one load generator. What is real and what is a fake:
 *  - real: portcullis (bench/servers/fleet-portcullis.ts: the real config loader, connectPorts, the
 *    cluster registry or the static `clusters:` list, one undici pool, client and PluginInstallation
 *    watch per cluster, the gRPC server), ghz, the CPU and memory figures;
 *  - wire-level fakes (bench/servers/fleet-fakes.ts, one process): the management cluster's Secrets,
 *    OpenFGA, and ONE HTTPS API server standing in for every registered cluster (each cluster id has
 *    its own bearer token, so the fake can tell them apart; each cluster gets its own connection pool
 *    and watch in portcullis, exactly as with 1,000 real API servers).
 * Phases, each in fresh processes: the no-op, portcullis with 1 cluster and with N clusters (memory
 * after a full GC, watches, warm-path throughput and CPU per check on core 1, calls per unique key
 * during the cold warm-up, time from a Secret created to the first allowed check), then 2 and 4
 * replicas (all on core 1, each with its own caches) under the same load spread over them, and once
 * more with each cluster's checks sent to one replica (as a balancer hashing on the cluster would).
 *
 *   npx node bench/fleet.ts --out F.json [--quick] [--clusters 1000] [--replicas 2,4]
 */
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { NODE_ENV, NODE_FLAGS } from "../src/cli/node-flags.ts";
import { configSchema } from "../src/config/schema.ts";
import { authorizationClient } from "../src/envoy/protos.ts";
import { freePort } from "../test/harness/ports.ts";
import { pluginClaims, SECRET, sign } from "../test/support/tokens.ts";
import { type CdsBytes, cdsBytesPerChange } from "./cds-bytes.ts";
import { fleetSection } from "./fleet-report.ts";
import { cpuSeconds, type LoadResult, rssBytes, runLoad } from "./ghz.ts";
import { startProcess, type ServerProcess } from "./processes.ts";
import type { MemoryReport } from "./servers/common.ts";
import type { FleetCounts, FleetFakesInfo } from "./servers/fleet-fakes.ts";
import { clusterToken } from "./servers/fleet-fakes.ts";
import { BENCH_TOKEN_LIFETIMES, BENCH_TOKEN_SECONDS, benchUuid, envoyCheck, userId, writeDataFile } from "./workload.ts";

export interface FleetOptions {
  readonly workDir: string;
  readonly ghz: string;
  readonly quick: boolean;
  /** Where portcullis (every replica) and the no-op run. */
  readonly serverCore: string;
  /** Where ghz and the fakes run. */
  readonly loadCore: string;
  /** Registered clusters (1,000). */
  readonly clusters?: number;
  /** Replica counts besides 1 (2 and 4). */
  readonly replicas?: readonly number[];
  /**
   * Clusters each replica serves in the replica phase (100): calls per unique key do not depend on
   * it, and 4 replicas starting 1,000 clusters each on one shared core would take minutes.
   */
  readonly replicaClusters?: number;
  /** The fixed offered rate CPU per check is also measured at (the main report's reference rate, 3,000/s). */
  readonly referenceRps?: number;
  readonly log?: (message: string) => void;
  /** Write each portcullis's log lines to <name>.out in the work directory (diagnosis; the figures are taken with them off). */
  readonly keepLogs?: boolean;
}

/** Calls the fakes counted over a phase, and the unique keys the load held. */
export interface CallCounts {
  readonly counts: FleetCounts;
  /** Unique keys in the requests sent: (user, cluster) for OpenFGA, (cluster, user, request) for SubjectAccessReview, (cluster, ServiceAccount) for TokenRequest. */
  readonly unique: { readonly openfga: number; readonly subjectAccessReviews: number; readonly tokenRequests: number };
}

export interface ProcessMemory {
  readonly clusters: number;
  /** From process start to every cluster's index synced. */
  readonly syncMs: number;
  readonly rssIdleBytes: number;
  readonly afterGc: MemoryReport;
  /** CPU cores used while idle (watches open, bookmarks arriving, no checks). */
  readonly idleCores: number;
  /** PluginInstallation lists the fake answered while the process started: one per cluster, more when lists timed out and were retried. */
  readonly installationLists: number;
}

export interface ReplicaRun {
  readonly replicas: number;
  /** From the first process started to the last one ready (all synced), starting together on one core. */
  readonly startMs: number;
  /** Every replica sent the whole request set (a round-robin balancer once traffic is steady). */
  readonly spread: CallCounts;
  /** Each cluster's requests to one replica only (a balancer hashing on the cluster id); a fresh request set. */
  readonly hashed: CallCounts;
  /** Saturation, the same load spread over the replicas: one ghz per replica, all on the load core. */
  readonly saturation: { readonly rps: number; readonly cpuUsPerCheck: number; readonly cpuCores: number; readonly p99Ms: number; readonly runs: LoadResult[] };
  readonly rssBytes: number[];
  readonly sockets: number[];
}

export interface FleetResult {
  readonly date: string;
  readonly mode: "quick" | "full";
  /** How clusters were registered: Secrets watched by the live registry, or the static `clusters:` list. */
  readonly registration: "secrets" | "static";
  readonly clusters: number;
  /** Clusters each replica served in the replica phase. */
  readonly replicaClusters: number;
  readonly installationsPerCluster: number;
  readonly requestsPerSet: number;
  readonly loadAverage: { readonly start: string; readonly end: string };
  readonly settings: Record<string, number>;
  readonly memory: { readonly one: ProcessMemory; readonly fleet: ProcessMemory };
  readonly watches: { readonly openWatches: number; readonly watchedClusters: number; readonly socketsToClusters: number; readonly registryWatches: number };
  readonly warm: {
    readonly noop: LoadResult;
    readonly one: LoadResult;
    readonly fleet: LoadResult;
    readonly runs: Record<"noop" | "one" | "fleet", LoadResult[]>;
    /** At the fixed reference rate, 8 in flight: CPU per check at the same load for all three (absent in results from before it was measured). */
    readonly reference?: Record<"noop" | "one" | "fleet", LoadResult>;
  };
  /** Calls during the cold warm-up of the 1-replica fleet: the baseline for the replicas. */
  readonly oneReplica: CallCounts;
  /** Secret created → first allowed PluginToken check, in a running fleet (ms); empty with static registration. */
  readonly registrationMs: number[];
  /** Secret deleted → first 404 unknown-cluster (ms). */
  readonly removalMs: number[];
  readonly replicaRuns: ReplicaRun[];
  /** Bytes CDS sends per change, SotW against Delta, at 100 clusters and at the fleet's (absent in results from before Delta). */
  readonly cdsBytes?: CdsBytes[];
  readonly commands: string[];
}

const ROOT = resolve(import.meta.dirname, "..");
const HOUR_MS = 3_600_000;
/** PluginInstallations every cluster's index holds (a cluster with a score of plugins installed); part of the per-cluster memory. */
const INSTALLATIONS = 20;
/** Installations the first request set uses; the hashed set uses the other half, so its TokenRequests are cold too. */
const HALF = INSTALLATIONS / 2;
const PATHS = [
  (ns: string) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificates/web`,
  (ns: string) => `/api/v1/namespaces/${ns}/pods?labelSelector=app%3Dweb`,
  (ns: string) => `/apis/apps/v1/namespaces/${ns}/deployments/web`,
  (ns: string) => `/api/v1/namespaces/${ns}/pods/web-0/log?container=app`,
];

/** Whether this tree's configuration has the live cluster registry. */
export function hasClusterRegistry(): boolean {
  return "clusterRegistry" in configSchema.shape;
}

export const fleetClusterId = (k: number) => benchUuid(6, k);
/** Clusters registered while the fleet runs (registration latency samples). */
const lateClusterId = (k: number) => benchUuid(7, k);

interface FleetRequest {
  readonly message: Record<string, unknown>;
  readonly user: string;
  readonly cluster: string;
  readonly installation: number;
  readonly path: string;
}

async function requestSet(users: { from: number; count: number }, clusterOf: (i: number) => string, installationOf: (i: number) => number, installations: FleetFakesInfo["installations"]): Promise<FleetRequest[]> {
  const exp = Math.floor(Date.now() / 1000) + BENCH_TOKEN_SECONDS;
  return Promise.all(
    Array.from({ length: users.count }, async (_, j) => {
      const i = users.from + j;
      const cluster = clusterOf(j);
      const k = installationOf(j);
      const inst = installations[k]!;
      const user = userId(i);
      const token = await sign(
        pluginClaims({ sub: user, cluster_id: cluster, installation_id: inst.uid, installation_name: inst.name, plugin_name: inst.pluginName, definition_hash: inst.definitionHash }),
        { exp },
      );
      const path = PATHS[j % PATHS.length]!(`team-${j % 20}`);
      return { message: envoyCheck("GET", `/clusters/${cluster}${path}`, { authorization: `Bearer ${token}` }, "kube-api-proxy"), user, cluster, installation: k, path };
    }),
  );
}

function uniqueKeys(requests: readonly FleetRequest[]): CallCounts["unique"] {
  return {
    openfga: new Set(requests.map((r) => `${r.user} ${r.cluster}`)).size,
    subjectAccessReviews: new Set(requests.map((r) => `${r.cluster} ${r.user} ${r.path}`)).size,
    tokenRequests: new Set(requests.map((r) => `${r.cluster} ${r.installation}`)).size,
  };
}

/** The replica a balancer hashing on the cluster id sends a request to. */
export function replicaForCluster(clusterId: string, replicas: number): number {
  return createHash("sha256").update(clusterId).digest().readUInt32BE(0) % replicas;
}

/** A message as proto-loader encodes it: Timestamps from {seconds, nanos}, not ghz's JSON string. */
function grpcMessage(message: Record<string, unknown>): Record<string, unknown> {
  const copy = structuredClone(message);
  delete ((copy["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
  return copy;
}

/** TCP connections from `pid` to 127.0.0.1:`port` (its /proc/<pid>/fd sockets matched in /proc/net/tcp). */
export function socketsTo(pid: number, port: number): number {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m !== null) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  let n = 0;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      // f[2] remote address:port, f[3] state (01 established), f[9] inode
      if (f.length > 9 && f[2]!.endsWith(`:${hexPort}`) && f[3] === "01" && inodes.has(f[9]!)) n++;
    }
  }
  return n;
}

export async function runFleet(options: FleetOptions): Promise<FleetResult> {
  const log = options.log ?? ((m: string) => process.stderr.write(`[fleet ${new Date().toISOString().slice(11, 19)}] ${m}\n`));
  const quick = options.quick;
  const clusterCount = options.clusters ?? 1_000;
  const replicaCounts = [1, ...(options.replicas ?? [2, 4])];
  const replicaClusters = Math.min(clusterCount, options.replicaClusters ?? 100);
  const settings = {
    requestsPerSet: 1_000,
    concurrency: 64,
    connections: 2,
    warmupSeconds: quick ? 3 : 5,
    saturationSeconds: quick ? 4 : 8,
    saturationRepeats: quick ? 1 : 2,
    registrationSamples: quick ? 3 : 8,
    idleSeconds: quick ? 2 : 3,
    bookmarkMs: 20_000,
    referenceRps: options.referenceRps ?? 3_000,
    referenceConcurrency: 8,
  };
  const loadStart = loadavg().map((l) => l.toFixed(2)).join(" ");
  const node = process.execPath;
  const dir = join(options.workDir, "fleet");
  mkdirSync(dir, { recursive: true });
  const registration = hasClusterRegistry() ? "secrets" : "static";
  const commands: string[] = [];
  log(`fleet: ${clusterCount} clusters, registration by ${registration}; load average ${loadStart}`);

  const fakes = await startProcess({
    name: "fleet-fakes",
    core: options.loadCore,
    command: [node, join(import.meta.dirname, "servers/fleet-fakes.ts"), "--ready-file", "{READY}", "--dir", dir, "--installations", String(INSTALLATIONS), "--bookmark-ms", String(settings.bookmarkMs)],
    workDir: dir,
  });
  commands.push(`taskset -c ${options.loadCore} node bench/servers/fleet-fakes.ts --ready-file F --dir DIR --installations ${INSTALLATIONS}`);
  const info = fakes.info as unknown as FleetFakesInfo;
  const control = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${info.controlUrl}${path}`, { method, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    if (!res.ok) throw new Error(`fleet fakes ${path}: ${res.status}`);
    return res.json() as Promise<unknown>;
  };
  const counts = () => control("GET", "/counts") as Promise<FleetCounts>;
  const started: ServerProcess[] = [];
  try {
    const fleetIds = Array.from({ length: clusterCount }, (_, k) => fleetClusterId(k));
    const oneId = fleetIds[0]!;
    const namespaces = { one: "fleet-one", fleet: info.namespace, replicas: "fleet-replicas" } as const;
    const idsOf = { one: [oneId], fleet: fleetIds, replicas: fleetIds.slice(0, replicaClusters) } as const;
    if (registration === "secrets") {
      for (const k of ["one", "fleet", "replicas"] as const) await control("POST", "/clusters", { namespace: namespaces[k], register: idsOf[k] });
    } else {
      await control("POST", "/tokens", fleetIds);
    }

    // Request sets: 1,000 users' PluginTokens, one request each. `one`: every request on one cluster;
    // `fleet`: request j on cluster j mod N; `hashed`: other users and installations, for cold caches.
    const n = settings.requestsPerSet;
    const setOne = await requestSet({ from: 0, count: n }, () => oneId, (j) => j % HALF, info.installations);
    const setFleet = await requestSet({ from: 0, count: n }, (j) => fleetIds[j % clusterCount]!, (j) => j % HALF, info.installations);
    const setReplicas = await requestSet({ from: 0, count: n }, (j) => fleetIds[j % replicaClusters]!, (j) => j % HALF, info.installations);
    const setHashed = await requestSet({ from: n, count: n }, (j) => fleetIds[j % replicaClusters]!, (j) => HALF + (j % HALF), info.installations);
    const dataFile = (name: string, requests: readonly FleetRequest[]) => {
      const file = join(dir, `${name}.json`);
      writeDataFile(file, requests.map((r) => r.message));
      return file;
    };
    const files = { one: dataFile("one", setOne), fleet: dataFile("fleet", setFleet), replicas: dataFile("replicas", setReplicas) };

    // The loader wants real ports (not 0): fresh ones per process.
    type Fleet = keyof typeof namespaces;
    const configFile = async (name: string, clusters: Fleet) => {
      const file = join(dir, `${name}.yaml`);
      const registry =
        registration === "secrets"
          ? { clusterRegistry: { namespace: namespaces[clusters], kubeconfig: info.managementKubeconfig } }
          : { clusters: idsOf[clusters].map((id) => ({ id, kubeconfig: kubeconfigFor(dir, id, info) })) };
      const config = {
        workers: 1,
        logLevel: "info",
        listen: { grpc: `127.0.0.1:${await freePort()}`, admin: `127.0.0.1:${await freePort()}`, internal: `127.0.0.1:${await freePort()}` },
        shutdown: { drainMs: 0 },
        // Deadlines far above a fake's answer: the cold pass counts calls, and on a loaded machine a
        // timed-out call would be a 503 and a second call, not a figure about the fleet.
        check: { timeoutMs: 10_000 },
        tokens: { secrets: [{ env: "PORTCULLIS_BENCH_SECRET" }], maxLifetimeSeconds: BENCH_TOKEN_LIFETIMES },
        // TTLs longer than the run: each key is fetched once per replica, so calls count keys.
        openfga: { apiUrl: info.openfgaUrl, storeId: info.storeId, timeoutMs: 8_000, allowTtlMs: HOUR_MS },
        kube: { sar: { timeoutMs: 8_000, allowTtlMs: HOUR_MS }, tokenRequest: { timeoutMs: 8_000 } },
        ...registry,
      };
      writeFileSync(file, JSON.stringify(config, null, 2));
      return file;
    };
    const startPortcullis = async (name: string, clusters: Fleet, expect: number): Promise<ServerProcess> => {
      const config = await configFile(name, clusters);
      const server = await startProcess({
        name,
        core: options.serverCore,
        command: [node, ...NODE_FLAGS, join(import.meta.dirname, "servers/fleet-portcullis.ts"), "--config", config, "--ready-file", "{READY}", "--memory-file", join(dir, `${name}.memory.json`), "--expect-clusters", String(expect), ...(options.keepLogs === true ? ["--log-file", join(dir, `${name}.out`)] : [])],
        // The shipped Node flags and environment (src/cli/node-flags.ts), as every other portcullis the bench starts.
        env: { ...NODE_ENV, PORTCULLIS_BENCH_SECRET: SECRET },
        workDir: dir,
        timeoutMs: 300_000,
      });
      started.push(server);
      return server;
    };
    commands.push(
      `${Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v} `).join("")}taskset -c ${options.serverCore} node ${NODE_FLAGS.join(" ")} bench/servers/fleet-portcullis.ts --config fleet.yaml --ready-file F --memory-file M --expect-clusters ${clusterCount}`,
    );
    const stop = async (server: ServerProcess) => {
      await server.stop();
      started.splice(started.indexOf(server), 1);
    };
    const memoryOf = async (server: ServerProcess): Promise<MemoryReport> => {
      const file = join(dir, `${server.name}.memory.json`);
      rmSync(file, { force: true });
      process.kill(server.pid, "SIGUSR2");
      for (let i = 0; i < 200; i++) {
        try {
          return JSON.parse(readFileSync(file, "utf8")) as MemoryReport;
        } catch {
          await sleep(50);
        }
      }
      throw new Error(`${server.name}: no memory report`);
    };
    const idleCores = async (pid: number) => {
      const before = cpuSeconds(pid);
      await sleep(settings.idleSeconds * 1000);
      return (cpuSeconds(pid) - before) / settings.idleSeconds;
    };
    const load = (server: ServerProcess, file: string, seconds: number, concurrency = settings.concurrency, connections = settings.connections, rps?: number) =>
      runLoad({ ghz: options.ghz, target: `127.0.0.1:${server.port}`, dataFile: file, concurrency, connections, durationSeconds: seconds, core: options.loadCore, workDir: dir, serverPids: [server.pid], ...(rps === undefined ? {} : { rps }) });
    const atReference = (server: ServerProcess, file: string) => load(server, file, settings.saturationSeconds, settings.referenceConcurrency, settings.connections, settings.referenceRps);
    /**
     * The cold pass the call counts come from: each request sent once to each replica `to` names, 64
     * in flight, from this process's own client (so every answer is read: ghz cannot tell an allow
     * from a denial). Every one must be allowed.
     */
    const coldPass = async (servers: readonly ServerProcess[], requests: readonly FleetRequest[], to: (q: FleetRequest) => number[]): Promise<FleetCounts> => {
      await control("POST", "/reset");
      const clients = servers.map((s) => authorizationClient(`127.0.0.1:${s.port}`));
      const work = requests.flatMap((q) => to(q).map((r) => ({ q, r })));
      let next = 0;
      const denied: string[] = [];
      try {
        const worker = async () => {
          for (let i = next++; i < work.length; i = next++) {
            const { q, r } = work[i]!;
            const res = (await clients[r]!.check(grpcMessage(q.message))) as { status?: { code?: number; message?: string } };
            if (res.status?.code !== 0) denied.push(`${q.path} on ${q.cluster}: ${res.status?.message}`);
          }
        };
        await Promise.all(Array.from({ length: 64 }, worker));
      } finally {
        for (const c of clients) c.close();
      }
      if (denied.length > 0) throw new Error(`cold pass: ${denied.length} of ${work.length} checks not allowed, e.g. ${denied[0]}`);
      return counts();
    };
    const saturate = async (server: ServerProcess, file: string) => {
      const runs: LoadResult[] = [];
      for (let i = 0; i < settings.saturationRepeats; i++) runs.push(await load(server, file, settings.saturationSeconds));
      return runs;
    };
    const best = (runs: LoadResult[]) => runs.toSorted((a, b) => b.rps - a.rps)[0]!;

    // 1. The no-op ceiling.
    const noop = await startProcess({ name: "fleet-noop", core: options.serverCore, command: [node, join(import.meta.dirname, "noop-server.ts"), "--ready-file", "{READY}"], workDir: dir });
    started.push(noop);
    await load(noop, files.fleet, settings.warmupSeconds);
    const noopRuns = await saturate(noop, files.fleet);
    const noopReference = await atReference(noop, files.fleet);
    await stop(noop);
    log(`fleet: no-op ${best(noopRuns).rps.toFixed(0)} checks/s, ${best(noopRuns).cpuUsPerRequest.toFixed(1)} µs CPU/check`);

    // 2. One cluster, then the whole fleet: memory idle after GC, then warm-path throughput.
    const measureProcess = async (name: string, config: Fleet, expect: number, requests: readonly FleetRequest[], file: string) => {
      const server = await startPortcullis(name, config, expect);
      await sleep(1_000);
      const rssIdleBytes = rssBytes(server.pid);
      const afterGc = await memoryOf(server);
      const idle = await idleCores(server.pid);
      const c = await counts();
      const memory: ProcessMemory = { clusters: expect, syncMs: server.info["syncMs"] as number, rssIdleBytes, afterGc, idleCores: idle, installationLists: c.installationLists };
      log(`fleet: ${name}: ${expect} clusters synced in ${(memory.syncMs / 1000).toFixed(1)} s; RSS ${(afterGc.rssBytes / 2 ** 20).toFixed(1)} MiB, heap ${(afterGc.heapUsedBytes / 2 ** 20).toFixed(1)} MiB after GC; idle ${idle.toFixed(3)} cores`);
      const watches = { openWatches: c.openWatches, watchedClusters: c.watchedClusters, socketsToClusters: socketsTo(server.pid, info.memberPort), registryWatches: c.registryWatches };
      const calls: CallCounts = { counts: await coldPass([server], requests, () => [0]), unique: uniqueKeys(requests) };
      await load(server, file, settings.warmupSeconds);
      const runs = await saturate(server, file);
      const reference = await atReference(server, file);
      log(`fleet: ${name}: ${best(runs).rps.toFixed(0)} checks/s, ${best(runs).cpuUsPerRequest.toFixed(1)} µs CPU/check; at ${settings.referenceRps}/s ${reference.cpuUsPerRequest.toFixed(1)} µs`);
      return { server, memory, watches, calls, runs, reference };
    };
    const one = await measureProcess("fleet-one", "one", 1, setOne, files.one);
    await stop(one.server);
    const fleet = await measureProcess("fleet-all", "fleet", clusterCount, setFleet, files.fleet);
    log(`fleet: watches ${JSON.stringify(fleet.watches)}`);

    // 3. Registration and removal while the fleet runs (the live registry only).
    const registrationMs: number[] = [];
    const removalMs: number[] = [];
    if (registration === "secrets") {
      const client = authorizationClient(`127.0.0.1:${fleet.server.port}`);
      try {
        for (let s = 0; s < settings.registrationSamples; s++) {
          const id = lateClusterId(s);
          const [request] = await requestSet({ from: 10_000 + s, count: 1 }, () => id, () => 0, info.installations);
          const message = grpcMessage(request!.message);
          const statusNow = async () => ((await client.check(message)) as { status?: { code?: number; message?: string } }).status;
          const t0 = performance.now();
          await control("POST", "/clusters", { register: [id] });
          while ((await statusNow())?.code !== 0) {
            if (performance.now() - t0 > 60_000) throw new Error(`cluster ${id} not allowed 60 s after its Secret was created`);
            await sleep(5);
          }
          registrationMs.push(performance.now() - t0);
          const t1 = performance.now();
          await control("POST", "/clusters", { unregister: [id] });
          while ((await statusNow())?.message !== "unknown-cluster") {
            if (performance.now() - t1 > 60_000) throw new Error(`cluster ${id} still known 60 s after its Secret was deleted`);
            await sleep(5);
          }
          removalMs.push(performance.now() - t1);
        }
      } finally {
        client.close();
      }
      log(`fleet: registration → first allowed check ${registrationMs.map((m) => m.toFixed(0)).join(", ")} ms; removal → unknown-cluster ${removalMs.map((m) => m.toFixed(0)).join(", ")} ms`);
    }
    await stop(fleet.server);

    // 4. Replicas: each its own process and caches, all on the server core.
    const replicaRuns: ReplicaRun[] = [];
    for (const replicas of replicaCounts) {
      const t0 = performance.now();
      const servers = await Promise.all(Array.from({ length: replicas }, (_, r) => startPortcullis(`fleet-r${replicas}-${r}`, "replicas", replicaClusters)));
      const startMs = performance.now() - t0;
      const sockets = servers.map((s) => socketsTo(s.pid, info.memberPort));
      const every = servers.map((_, r) => r);
      const spread: CallCounts = { counts: await coldPass(servers, setReplicas, () => every), unique: uniqueKeys(setReplicas) };
      const hashed: CallCounts = { counts: await coldPass(servers, setHashed, (q) => [replicaForCluster(q.cluster, replicas)]), unique: uniqueKeys(setHashed) };
      // Saturation: one ghz per replica, in-flight requests split between them, the whole (now warm) set to each.
      const perReplica = (seconds: number) =>
        Promise.all(servers.map((s) => load(s, files.replicas, seconds, Math.max(8, Math.round(settings.concurrency / replicas)), 1)));
      // The cold pass filled the caches: this warm-up is for ghz's connections and the JIT only.
      await perReplica(Math.min(3, settings.warmupSeconds));
      const runs = await perReplica(settings.saturationSeconds);
      const total = runs.reduce((s, r) => s + r.count, 0);
      const cpu = runs.reduce((s, r) => s + (r.cpuUsPerRequest * r.count) / 1e6, 0);
      const saturation = {
        rps: runs.reduce((s, r) => s + r.rps, 0),
        cpuUsPerCheck: (cpu / total) * 1e6,
        cpuCores: runs.reduce((s, r) => s + r.cpuCores, 0),
        p99Ms: Math.max(...runs.map((r) => r.p99Ms)),
        runs,
      };
      const rss = servers.map((s) => rssBytes(s.pid));
      log(
        `fleet: ${replicas} replicas started in ${(startMs / 1000).toFixed(1)} s; ${saturation.rps.toFixed(0)} checks/s combined, ${saturation.cpuUsPerCheck.toFixed(1)} µs CPU/check; spread ${JSON.stringify(spread.counts)}; hashed ${JSON.stringify(hashed.counts)}`,
      );
      replicaRuns.push({ replicas, startMs, spread, hashed, saturation, rssBytes: rss, sockets });
      for (const s of servers) await stop(s);
    }

    return {
      date: new Date().toISOString(),
      mode: quick ? "quick" : "full",
      registration,
      clusters: clusterCount,
      replicaClusters,
      installationsPerCluster: INSTALLATIONS,
      requestsPerSet: n,
      loadAverage: { start: loadStart, end: loadavg().map((l) => l.toFixed(2)).join(" ") },
      settings,
      memory: { one: one.memory, fleet: fleet.memory },
      watches: fleet.watches,
      warm: { noop: best(noopRuns), one: best(one.runs), fleet: best(fleet.runs), runs: { noop: noopRuns, one: one.runs, fleet: fleet.runs }, reference: { noop: noopReference, one: one.reference, fleet: fleet.reference } },
      oneReplica: fleet.calls,
      registrationMs,
      removalMs,
      replicaRuns,
      // In-process and byte counts only: no timing, so the load of the phases above does not matter.
      cdsBytes: await cdsBytesPerChange([...new Set([100, clusterCount])]),
      commands: commands.map((c) => c.replaceAll(`${ROOT}/`, "")),
    };
  } finally {
    for (const s of [...started]) await s.stop();
    await fakes.stop();
  }
}

/** A kubeconfig for one static `clusters:` entry: the shared fake, the cluster's own token. */
function kubeconfigFor(dir: string, clusterId: string, info: FleetFakesInfo): string {
  const path = join(dir, "kubeconfigs", `${clusterId}.yaml`);
  mkdirSync(join(dir, "kubeconfigs"), { recursive: true });
  writeFileSync(
    path,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      `- name: ${clusterId}`,
      "  cluster:",
      `    server: ${info.memberUrl}`,
      `    certificate-authority-data: ${Buffer.from(info.caPem).toString("base64")}`,
      "users:",
      "- name: portcullis",
      "  user:",
      `    token: ${clusterToken(clusterId)}`,
      "contexts:",
      `- name: ${clusterId}`,
      `  context: {cluster: ${clusterId}, user: portcullis}`,
      `current-context: ${clusterId}`,
      "",
    ].join("\n"),
  );
  return path;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      out: { type: "string" },
      quick: { type: "boolean", default: false },
      clusters: { type: "string", default: "1000" },
      replicas: { type: "string", default: "2,4" },
      /** Keep the work directory (configs, the servers' logs) in this directory. */
      keep: { type: "string" },
    },
    strict: true,
  });
  const tools = Object.fromEntries(
    execFileSync("bash", [join(import.meta.dirname, "install-tools.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
      .trim()
      .split("\n")
      .map((l) => l.split("=", 2) as [string, string]),
  );
  const workDir = values.keep ?? mkdtempSync(join(tmpdir(), "portcullis-fleet-"));
  mkdirSync(workDir, { recursive: true });
  try {
    const result = await runFleet({
      workDir,
      ghz: tools["PORTCULLIS_GHZ_BIN"]!,
      quick: values.quick,
      serverCore: "1",
      loadCore: "0",
      clusters: Number(values.clusters),
      replicas: values.replicas.split(",").filter((r) => r !== "").map(Number),
      keepLogs: values.keep !== undefined,
    });
    if (values.out !== undefined) writeFileSync(values.out, `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(`${fleetSection(result)}\n`);
  } finally {
    if (values.keep === undefined) rmSync(workDir, { recursive: true, force: true });
  }
}
