/**
 * `npm run bench`: every scenario side by side on this machine, written to bench/RESULTS.md,
 * bench/results.json and bench/p99-vs-load.svg.
 *
 *   npm run bench                      the full run (about 15 minutes)
 *   npm run bench -- --quick           short runs, fewer users (about 5 minutes), for development
 *   npm run bench -- --only noop,plugin-token,opa   a subset (ids below); RESULTS.md is still written
 *                                      (noop-same-bytes runs right after each no-op unless --only leaves it out)
 *   npm run bench -- --render          re-render RESULTS.md and the chart from bench/results.json
 *   npm run bench -- --no-write        print the results, write nothing into bench/
 *
 * Servers under test run pinned to core 1 (`taskset -c 1`, Node with `workers: 1`, OPA with
 * GOMAXPROCS=1); ghz runs pinned to core 0. All traffic goes to 127.0.0.1.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { lineChart, memoryChart } from "./chart.ts";
import type { ColdResult } from "./cold.ts";
import { type LoadResult, runLoad, rssBytes } from "./ghz.ts";
import { startKonfidenceBench } from "./konfidence-world.ts";
import { runMemoryScenario, type MemoryScenario } from "./memory.ts";
import type { ModuleStep } from "./module-memory.ts";
import { coreCalibrationMs, startProcess, type ServerProcess } from "./processes.ts";
import { topSelfTime } from "./profile.ts";
import { headlineFigures, renderResults } from "./report.ts";
import { HOT_SCENARIOS, type HotId, type HotResult, type ProcessRun, type Results } from "./scenarios.ts";
import { constantServiceAccountToken } from "./warm-ports.ts";
import { configSchema } from "../src/config/schema.ts";
import { assetRequests, BENCH_CLUSTER, benchWorld, pluginTokenRequests, userTokenRequests, writeDataFile } from "./workload.ts";
import { runFleet, type FleetResult } from "./fleet.ts";
import { NODE_ENV, NODE_FLAGS } from "../src/cli/node-flags.ts";
import { SECRET } from "../test/support/tokens.ts";
import { freePort } from "../test/harness/ports.ts";

const ROOT = resolve(import.meta.dirname, "..");
const BENCH = import.meta.dirname;
const SERVER_CORE = "1";
const LOAD_CORE = "0";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    only: { type: "string" },
    render: { type: "boolean", default: false },
    "no-write": { type: "boolean", default: false },
    "no-profile": { type: "boolean", default: false },
  },
  strict: true,
});

if (flags.render) {
  const results = JSON.parse(readFileSync(join(BENCH, "results.json"), "utf8")) as Results;
  writeReport(results);
  process.exit(0);
}

const quick = flags.quick;
/** A minimal configuration, parsed for its defaults. */
const DEFAULTS = configSchema.parse({
  listen: { grpc: "127.0.0.1:9001", admin: "127.0.0.1:9090", internal: "127.0.0.1:9002" },
  tokens: { secrets: [{ env: "PORTCULLIS_JWT_SECRET" }] },
  openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01JBENCHST0RE0000000000000" },
  clusters: [{ id: BENCH_CLUSTER, kubeconfig: "/nonexistent" }],
});
const ALL = "noop,noop-same-bytes,plugin-assets,plugin-token,plugin-token-node-defaults,user-token,konfidence,opa,hot-path,profile,cold,memory,fleet";
const only = new Set((flags.only ?? ALL).split(","));
const unknown = [...only].filter((id) => !ALL.split(",").includes(id));
if (unknown.length > 0) throw new Error(`--only: unknown ${unknown.join(", ")}; the ids are ${ALL}`);
const settings = {
  tokens: 1_000,
  installations: 250,
  projects: 1_000,
  concurrency: 64,
  connections: 2,
  rateConcurrency: 8,
  // The primary CPU-per-check figure: every server at this one offered rate, below each one's
  // capacity (OPA-Envoy's is ~3,200-4,100 checks/s on these machines), so CPU per check is compared at
  // the same load rather than at each server's own saturation point (see report.ts, "Why").
  referenceRps: 3_000,
  referenceSeconds: quick ? 5 : 10,
  warmupSeconds: quick ? 3 : 5,
  saturationSeconds: quick ? 4 : 8,
  saturationRepeats: quick ? 1 : 2,
  processRepeats: quick ? 1 : 2,
  rateSeconds: quick ? 4 : 10,
  rateFractions: "0.25,0.5,0.75",
  coldSamples: quick ? 3 : 10,
  memoryUsers: quick ? 20_000 : 100_000,
  // The default cache sizes, for the manifests' sizing at defaults (report.ts "Sizing").
  defaultTokenCacheEntries: DEFAULTS.tokens!.cacheMaxEntries,
  defaultCanViewCacheEntries: DEFAULTS.openfga!.cacheMaxEntries,
  memoryInstallations: 10_000,
};

const commands: string[] = [];
const tools = installTools();
const workDir = mkdtempSync(join(tmpdir(), "portcullis-bench-"));
const node = process.execPath;
log(`work dir ${workDir}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);

try {
  const previous = quick ? undefined : previousFullRun();
  const results: Results = { ...(await runAll()), ...(previous === undefined ? {} : { previous }) };
  if (flags["no-write"]) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  else {
    writeFileSync(join(BENCH, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
    writeReport(results);
  }
  if (results.fleetError !== undefined) process.exitCode = 1;
} finally {
  rmSync(workDir, { recursive: true, force: true });
}

async function runAll(): Promise<Results> {
  const machine = machineNotes("start");
  const world = benchWorld(settings.installations);
  const worldFile = join(workDir, "world.json");
  writeFileSync(worldFile, JSON.stringify(world));
  const data = {
    plugin: join(workDir, "plugin-token.json"),
    user: join(workDir, "user-token.json"),
    assets: join(workDir, "assets.json"),
    konfidence: join(workDir, "konfidence.json"),
  };
  writeDataFile(data.plugin, await pluginTokenRequests(world, settings.tokens));
  writeDataFile(data.user, await userTokenRequests(settings.tokens));
  writeDataFile(data.assets, assetRequests(settings.tokens));

  const hot: HotResult[] = [];
  const processes: ProcessRun[] = [];
  let noopSaturation: number | undefined;
  const rates = () => (noopSaturation === undefined ? [] : settings.rateFractions.split(",").map((f) => Math.round(Number(f) * noopSaturation!)));

  commands.push(
    `# servers under test (one at a time, pinned to core ${SERVER_CORE}; portcullis with the shipped flags, src/cli/node-flags.ts):`,
    `taskset -c ${SERVER_CORE} node bench/noop-server.ts --ready-file F`,
    `taskset -c ${SERVER_CORE} node bench/noop-server.ts --ready-file F --scenario same-bytes   # the same-bytes no-op, right after each no-op`,
    `${envPrefix(NODE_ENV)}taskset -c ${SERVER_CORE} node ${NODE_FLAGS.join(" ")} bench/servers/portcullis.ts --ready-file F --world $WORK/world.json   # scenarios 2-5 (konfidence: world-konfidence.json)`,
  );
  const portcullis = (name: string, file: string, shipped = true) =>
    startProcess({
      name,
      core: SERVER_CORE,
      command: [node, ...(shipped ? NODE_FLAGS : []), join(BENCH, "servers/portcullis.ts"), "--ready-file", "{READY}", "--world", file],
      ...(shipped ? { env: { ...NODE_ENV } } : {}),
      workDir,
    });

  // The no-op first, then between every two scenarios and after the last: each scenario is
  // compared with the no-op measured just before and just after it (whatever else the machine did
  // meanwhile touches both alike), and the no-op's repeats show how far one run moves by itself.
  // Each other scenario runs in `processRepeats` fresh processes: one Node (or OPA) process can
  // land ±10% off another on this VM, more than the runs within one process differ.
  // The same-bytes no-op (scenario 3's allow, encoded once) runs right after each no-op, so every
  // scenario has both floors measured just before and just after it.
  const noops = (["noop", "noop-same-bytes"] as const).filter((id) => only.has(id));
  const others = HOT_SCENARIOS.filter((s) => !(noops as readonly string[]).includes(s.id) && only.has(s.id)).map((s) => s.id);
  const plan: Array<{ id: HotId; rep: number }> = [];
  const addNoops = () => {
    for (const id of noops) plan.push({ id, rep: plan.filter((p) => p.id === id).length });
  };
  addNoops();
  for (const id of others) {
    for (let rep = 0; rep < settings.processRepeats; rep++) plan.push({ id, rep });
    addNoops();
  }
  for (const s of plan) {
    const calibrationMs = coreCalibrationMs(SERVER_CORE);
    let server: ServerProcess;
    let dataFile = data.plugin;
    let cleanup = async () => {};
    switch (s.id) {
      case "noop":
        server = await startProcess({ name: "noop", core: SERVER_CORE, command: [node, join(BENCH, "noop-server.ts"), "--ready-file", "{READY}"], workDir });
        break;
      case "noop-same-bytes":
        // Scenario 3's requests (the default data file), answered with scenario 3's allow.
        server = await startProcess({
          name: "noop-same-bytes",
          core: SERVER_CORE,
          command: [node, join(BENCH, "noop-server.ts"), "--ready-file", "{READY}", "--scenario", "same-bytes"],
          workDir,
        });
        break;
      case "plugin-assets":
        server = await portcullis("portcullis-assets", worldFile);
        dataFile = data.assets;
        break;
      case "plugin-token":
        server = await portcullis("portcullis-plugin", worldFile);
        break;
      case "plugin-token-node-defaults":
        server = await portcullis("portcullis-plugin-node-defaults", worldFile, false);
        break;
      case "user-token":
        server = await portcullis("portcullis-user", worldFile);
        dataFile = data.user;
        break;
      case "konfidence": {
        const bench = await startKonfidenceBench(settings.projects);
        cleanup = () => bench.stop();
        const file = join(workDir, "world-konfidence.json");
        writeFileSync(file, JSON.stringify({ ...world, konfidence: bench.world }));
        writeDataFile(data.konfidence, await bench.requests(settings.tokens));
        server = await portcullis("portcullis-konfidence", file);
        dataFile = data.konfidence;
        break;
      }
      case "opa":
        server = await startOpa();
        break;
    }
    try {
      const loadAtStart = loadavg()[0]!;
      log(`${s.id} (process ${s.rep + 1}): pid ${server.pid}, port ${server.port}, load average ${loadAtStart.toFixed(2)}, calibration ${calibrationMs.toFixed(0)} ms`);
      const rssIdle = rssBytes(server.pid);
      const load = (durationSeconds: number, rps?: number) =>
        runLoad({
          ghz: tools.ghz,
          target: `127.0.0.1:${server.port}`,
          dataFile,
          concurrency: rps === undefined ? settings.concurrency : settings.rateConcurrency,
          connections: settings.connections,
          durationSeconds,
          ...(rps === undefined ? {} : { rps }),
          core: LOAD_CORE,
          workDir,
          serverPids: [server.pid],
          serverCore: SERVER_CORE,
        });
      // Warm-up: every token verified and every gate cached once, and the JIT warm.
      const warm = await load(settings.warmupSeconds);
      assertHealthy(s.id, warm, "warm-up");
      const reference = await load(settings.referenceSeconds, settings.referenceRps);
      assertHealthy(s.id, reference, "reference rate");
      log(`${s.id}: ${settings.referenceRps} rps offered → ${reference.rps.toFixed(0)}, ${reference.cpuUsPerRequest.toFixed(1)} µs CPU/check, main thread asleep ${reference.switches.mainSleeps.toFixed(2)}×/check, ${machineNote(reference)}`);
      if (s.id === "plugin-token" && s.rep === 0) commands.push(`# the reference rate (CPU per check):\n${reference.command}`);
      const saturationRuns: LoadResult[] = [];
      for (let i = 0; i < settings.saturationRepeats; i++) {
        const r = await load(settings.saturationSeconds);
        assertHealthy(s.id, r, "saturation");
        saturationRuns.push(r);
        log(`${s.id}: saturation ${r.rps.toFixed(0)} rps, p99 ${r.p99Ms.toFixed(2)} ms, ${r.cpuUsPerRequest.toFixed(1)} µs CPU/check, server ${r.cpuCores.toFixed(2)} cores, ghz ${r.ghzCores.toFixed(2)}, ${machineNote(r)}`);
      }
      processes.push({ id: s.id, loadAtStart, calibrationMs, rssIdleBytes: rssIdle, reference, saturationRuns });
      const i = hot.findIndex((h) => h.id === s.id);
      if (i >= 0) {
        // A further process of a scenario already measured: its saturation runs join the first's.
        const first = hot[i]!;
        const all = [...first.saturationRuns, ...saturationRuns];
        hot[i] = { ...first, saturationRuns: all, saturation: all.toSorted((a, b) => b.rps - a.rps)[0]! };
        continue;
      }
      // Best of N: anything else running on the machine can only lower a run's throughput.
      const saturation = saturationRuns.toSorted((a, b) => b.rps - a.rps)[0]!;
      if (s.id === "noop") noopSaturation = saturation.rps;
      if (s.id === "plugin-token") commands.push(`# load at saturation (every scenario, each with its own data file):\n${saturation.command}`);
      const rateResults: LoadResult[] = [];
      for (const rps of rates()) {
        const r = await load(settings.rateSeconds, rps);
        rateResults.push(r);
        log(`${s.id}: ${rps} rps offered → ${r.rps.toFixed(0)} rps, p50 ${r.p50Ms.toFixed(2)} p99 ${r.p99Ms.toFixed(2)} p99.9 ${r.p999Ms.toFixed(2)} ms, ${machineNote(r)}`);
      }
      if (s.id === "plugin-token" && rateResults[0] !== undefined) commands.push(`# load at a fixed rate:\n${rateResults[0].command}`);
      hot.push({ id: s.id, saturation, saturationRuns, rates: rateResults, rssIdleBytes: rssIdle, loadAtStart });
    } finally {
      await server.stop();
      await cleanup();
    }
  }

  const hotPath: Array<{ scenario: string; cpuUsPerCheck: number; checks: number }> = [];
  if (only.has("hot-path")) {
    for (const scenario of ["noop", "noop-same-bytes", "plugin-assets", "plugin-token", "user-token"]) {
      const cmd = ["-c", SERVER_CORE, node, ...NODE_FLAGS, join(BENCH, "hot-path.ts"), "--scenario", scenario, "--checks", String(quick ? 100_000 : 300_000), "--json"];
      const r = spawnSync("taskset", cmd, { encoding: "utf8", timeout: 300_000, env: { ...process.env, ...NODE_ENV } });
      if (r.status !== 0) throw new Error(`bench/hot-path.ts failed: ${r.stderr}`);
      hotPath.push(JSON.parse(r.stdout.trim().split("\n").pop()!) as (typeof hotPath)[number]);
      log(`hot path ${scenario}: ${hotPath.at(-1)!.cpuUsPerCheck.toFixed(2)} µs CPU per check`);
    }
    commands.push(`# portcullis's own work per check, no gRPC (also noop, plugin-assets, user-token):\n${envPrefix(NODE_ENV)}taskset -c ${SERVER_CORE} node ${NODE_FLAGS.join(" ")} bench/hot-path.ts --scenario plugin-token --checks ${quick ? 100_000 : 300_000}`);
  }

  let profile: Results["profile"];
  if (only.has("profile") && !flags["no-profile"]) profile = await runProfile(worldFile, data.plugin);

  let cold: ColdResult | undefined;
  if (only.has("cold")) {
    log("cold: starting the real kube-apiserver and OpenFGA (startFundamentWorld)");
    const out = join(workDir, "cold.json");
    const cmd = [node, ...NODE_FLAGS, join(BENCH, "cold.ts"), "--out", out, "--samples", String(settings.coldSamples)];
    commands.push(`# cold paths:\n${envPrefix(NODE_ENV)}${cmd.join(" ").replace(out, "OUT.json")}`);
    const r = spawnSync(cmd[0]!, cmd.slice(1), { stdio: ["ignore", "inherit", "inherit"], timeout: 600_000, env: { ...process.env, ...NODE_ENV } });
    if (r.status !== 0) throw new Error(`bench/cold.ts failed (${r.status ?? r.signal})`);
    cold = JSON.parse(readFileSync(out, "utf8")) as ColdResult;
    log(`cold: first check ${cold.samples.map((x) => x.checkMs.toFixed(1)).join(", ")} ms; 100 concurrent → ${JSON.stringify(cold.concurrent.upstreamCalls)}`);
  }

  let memory: MemoryScenario | undefined;
  let moduleMemory: ModuleStep[] | undefined;
  if (only.has("memory")) {
    log(`memory: ${settings.memoryUsers} users, ${settings.memoryInstallations} installations`);
    // As the image's first start finds it: Node's compile cache filled (the Dockerfile warms it at build). One
    // untimed start and SIGTERM (the cache is written at exit) fills it for the real-ports server's modules, which
    // the load tests' servers do not load; otherwise its RSS would count Node's type stripper.
    const warmCache = await startProcess({
      name: "portcullis-compile-cache-warm-up",
      core: SERVER_CORE,
      env: { ...NODE_ENV },
      command: [node, ...NODE_FLAGS, join(BENCH, "servers/portcullis.ts"), "--ready-file", "{READY}", "--world", worldFile],
      workDir,
    });
    await warmCache.stop();
    memory = await runMemoryScenario({
      workDir,
      users: settings.memoryUsers,
      installations: settings.memoryInstallations,
      serverCore: SERVER_CORE,
      loadCore: LOAD_CORE,
      nodeFlags: NODE_FLAGS,
      env: { ...NODE_ENV },
    });
    commands.push(
      `# memory (bench/memory.ts, ${settings.memoryUsers} users, ${settings.memoryInstallations} installations):`,
      `taskset -c ${LOAD_CORE} node bench/servers/upstream-fakes.ts --ready-file U --world $WORK/world-memory.json`,
      `${envPrefix(NODE_ENV)}taskset -c ${SERVER_CORE} node ${NODE_FLAGS.join(" ")} bench/servers/portcullis.ts --ready-file F --world $WORK/world-memory.json --scenario real-ports --upstream U --memory-file M`,
    );
    const modules = spawnSync(node, [...NODE_FLAGS, join(BENCH, "module-memory.ts")], { encoding: "utf8", timeout: 300_000, env: { ...process.env, ...NODE_ENV } });
    if (modules.status === 0) moduleMemory = JSON.parse(modules.stdout) as ModuleStep[];
    commands.push(`# memory before any data:\n${envPrefix(NODE_ENV)}node ${NODE_FLAGS.join(" ")} bench/module-memory.ts`);
    log(`memory: RSS ${(memory.rssFilledBytes / 2 ** 20).toFixed(1)} MiB after ${memory.allowed} allowed checks`);
  }

  let fleet: FleetResult | undefined;
  let fleetError: string | undefined;
  if (only.has("fleet")) {
    log("fleet: bench/fleet.ts");
    const dir = join(workDir, "fleet");
    mkdirSync(dir);
    commands.push(`# fleet (issue 16):\nnode bench/fleet.ts --out F.json${quick ? " --quick" : ""}`);
    try {
      fleet = await runFleet({ workDir: dir, ghz: tools.ghz, quick, serverCore: SERVER_CORE, loadCore: LOAD_CORE, log });
    } catch (err) {
      // The other sections' measurements stand; the report says the fleet failed and the run exits 1.
      fleetError = err instanceof Error ? err.message : String(err);
      log(`fleet failed: ${fleetError}`);
    }
  }

  const end = machineNotes("end");
  return {
    date: new Date().toISOString(),
    mode: quick ? "quick" : "full",
    machine: { ...machine, ...end },
    settings,
    hot,
    processes,
    shippedFlags: { node: NODE_FLAGS, env: { ...NODE_ENV } },
    ...(fleet === undefined ? {} : { fleet }),
    ...(fleetError === undefined ? {} : { fleetError }),
    ...(cold === undefined ? {} : { cold }),
    ...(memory === undefined ? {} : { memory }),
    ...(moduleMemory === undefined ? {} : { moduleMemory }),
    ...(profile === undefined ? {} : { profile }),
    ...(hotPath.length === 0 ? {} : { hotPath }),
    commands: commands.map((c) =>
      c.replaceAll(workDir, "$WORK").replaceAll(`${ROOT}/`, "").replaceAll(process.env["HOME"] ?? "/root", "~").replaceAll(node, "node"),
    ),
  };
}

/** Scenario 3 under `--cpu-prof` at saturation; the top self-time functions. */
async function runProfile(worldFile: string, dataFile: string): Promise<NonNullable<Results["profile"]>> {
  const file = join(workDir, "plugin-token.cpuprofile");
  const server = await startProcess({
    name: "portcullis-profile",
    core: SERVER_CORE,
    env: { ...NODE_ENV },
    command: [node, ...NODE_FLAGS, join(BENCH, "servers/portcullis.ts"), "--ready-file", "{READY}", "--world", worldFile, "--profile-file", file],
    workDir,
  });
  let requests = 0;
  try {
    const spec = {
      ghz: tools.ghz,
      target: `127.0.0.1:${server.port}`,
      dataFile,
      concurrency: settings.concurrency,
      connections: settings.connections,
      core: LOAD_CORE,
      workDir,
      serverPids: [server.pid],
      serverCore: SERVER_CORE,
    };
    await runLoad({ ...spec, durationSeconds: settings.warmupSeconds });
    // Only the measured run is profiled: start-up, token verification and JIT warm-up stay out.
    process.kill(server.pid, "SIGHUP");
    requests = (await runLoad({ ...spec, durationSeconds: settings.saturationSeconds })).count;
  } finally {
    await server.stop();
  }
  commands.push(
    `# profile: the plugin-token server with --profile-file P; after the warm-up, SIGHUP starts the V8 profiler and SIGTERM writes it:\ntaskset -c ${SERVER_CORE} node bench/servers/portcullis.ts --ready-file F --world $WORK/world.json --profile-file P`,
  );
  return { scenario: "plugin-token", requests, ...topSelfTime(file, ROOT, 25) };
}

async function startOpa(): Promise<ServerProcess> {
  const port = await freePort();
  const httpPort = await freePort();
  const dataFile = join(workDir, "opa-data.json");
  writeFileSync(dataFile, JSON.stringify({ bench: { secret: SECRET, sa_token: constantServiceAccountToken() } }));
  const configFile = join(workDir, "opa-config.yaml");
  writeFileSync(
    configFile,
    [
      "plugins:",
      "  envoy_ext_authz_grpc:",
      `    addr: 127.0.0.1:${port}`,
      "    path: envoy/authz/result",
      "    skip-request-body-parse: true",
      "decision_logs:",
      "  console: false",
      "",
    ].join("\n"),
  );
  const command = [
    tools.opa,
    "run",
    "--server",
    "--disable-telemetry",
    "--addr",
    `127.0.0.1:${httpPort}`,
    "--config-file",
    configFile,
    "--log-level",
    "error",
    join(BENCH, "opa/policy.rego"),
    dataFile,
  ];
  commands.push(`GOMAXPROCS=1 taskset -c ${SERVER_CORE} ${command.join(" ")}`);
  return startProcess({
    name: "opa-envoy",
    core: SERVER_CORE,
    command,
    env: { GOMAXPROCS: "1" },
    workDir,
    ready: { probe: async () => ((await httpOk(`http://127.0.0.1:${httpPort}/health?plugins`)) ? port : undefined) },
  });
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(1_000) });
    return res.ok;
  } catch {
    return false;
  }
}

function assertHealthy(id: string, r: LoadResult, phase: string): void {
  const failed = Object.values(r.errors).reduce((a, b) => a + b, 0);
  if (r.okCount === 0 || failed > r.count * 0.001) {
    throw new Error(`${id} ${phase}: ${failed} failed of ${r.count} (${JSON.stringify(r.errors)}); is the server answering OK?`);
  }
}

function installTools(): { ghz: string; opa: string; ghzVersion: string; opaVersion: string } {
  const out = execFileSync("bash", [join(BENCH, "install-tools.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const env = Object.fromEntries(out.trim().split("\n").map((l) => l.split("=", 2) as [string, string]));
  return {
    ghz: env["PORTCULLIS_GHZ_BIN"]!,
    opa: env["PORTCULLIS_OPA_ENVOY_BIN"]!,
    ghzVersion: env["PORTCULLIS_GHZ_VERSION"]!,
    opaVersion: env["PORTCULLIS_OPA_ENVOY_VERSION"]!,
  };
}

function machineNotes(when: "start" | "end"): Record<string, string> {
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
  if (when === "end") return { loadAtEnd: load };
  const sh = (cmd: string, args: string[]) => {
    try {
      return execFileSync(cmd, args, { encoding: "utf8" }).trim();
    } catch {
      return "unknown";
    }
  };
  return {
    nproc: sh("nproc", []),
    cpu: cpus()[0]?.model ?? "unknown",
    // No cpufreq on these VMs: /proc/cpuinfo's MHz is the nominal figure. The per-process calibration
    // loop (the runs' table) is what shows a core running slower.
    cpuMHz: /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "unknown",
    memory: `${Math.round(Number(/MemTotal:\s+(\d+)/.exec(readFileSync("/proc/meminfo", "utf8"))?.[1] ?? 0) / 2 ** 20)} GiB`,
    kernel: sh("uname", ["-r"]),
    node: process.version,
    ghz: tools.ghzVersion,
    opaEnvoy: `opa-envoy-plugin ${tools.opaVersion} (${sh(tools.opa, ["version"]).split("\n")[0] ?? "unknown"})`,
    loadAtStart: load,
  };
}

/** The headline figures of the full run bench/results.json holds now, before this run replaces it. */
function previousFullRun(): Results["previous"] {
  let before: Results;
  try {
    before = JSON.parse(readFileSync(join(BENCH, "results.json"), "utf8")) as Results;
  } catch {
    return undefined;
  }
  return before.mode === "full" ? { date: before.date, figures: headlineFigures(before) } : undefined;
}

function writeReport(results: Results): void {
  const chart = lineChart({
    title: "p99 latency at fixed offered rates (ghz on one core, 8 requests in flight at most)",
    xLabel: "offered load, checks per second",
    yLabel: "p99 latency, ms (log scale)",
    series: results.hot.map((h) => ({
      label: HOT_SCENARIOS.find((s) => s.id === h.id)!.short,
      points: h.rates.map((r) => [r.offeredRps as number, r.p99Ms] as const),
    })),
  });
  const curve = results.memory?.rssCurve;
  const rss =
    curve === undefined || curve.length === 0
      ? undefined
      : memoryChart({
          title: `Memory scenario: RSS and V8 heap used over the fill (${results.memory!.installations.toLocaleString("en")} installations indexed)`,
          xLabel: "users checked (one cached token and can_view entry each)",
          yLabel: "MiB",
          series: [
            { label: "RSS", points: curve.map((p) => [p.users, p.rssMiB] as const) },
            { label: "V8 heap used", points: curve.map((p) => [p.users, p.heapUsedMiB] as const) },
          ],
        });
  if (flags["no-write"]) return;
  writeFileSync(join(BENCH, "p99-vs-load.svg"), chart);
  if (rss !== undefined) writeFileSync(join(BENCH, "rss-over-fill.svg"), rss);
  writeFileSync(join(BENCH, "RESULTS.md"), renderResults(results));
  log(`wrote bench/RESULTS.md, bench/results.json, bench/p99-vs-load.svg${rss === undefined ? "" : ", bench/rss-over-fill.svg"}`);
}

/** What else the machine did during a run, for the log. */
function machineNote(r: LoadResult): string {
  const pct = (x: number) => `${(x * 100).toFixed(0)}%`;
  return `core ${SERVER_CORE}: steal ${pct(r.machine.serverCoreSteal)}, other work ${pct(r.machine.serverCoreForeign)}; core ${LOAD_CORE}: other work ${pct(r.machine.loadCoreForeign)}; load ${r.machine.loadAvg1.toFixed(2)}`;
}

function envPrefix(env: Readonly<Record<string, string>>): string {
  return Object.entries(env)
    .map(([k, v]) => `${k}=${v} `)
    .join("");
}

function log(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}
