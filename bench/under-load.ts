/**
 * Side by side under load (issue 55): the same-bytes no-op and scenario 3's portcullis (and, with
 * `--before DIR`, scenario 3 on another checkout's code), each in a fresh process per round, the order
 * reversed every round, each at the reference rate (3,000/s, CPU per check) and at saturation.
 * With `--profile DIR`, the reference-rate window of every process is profiled in the server itself:
 * V8's CPU profile, its sampling heap profile and the bytes the V8 heap allocated
 * (bench/servers/common.ts profileOnSignal); those rounds' CPU figures carry the profiler's cost.
 *
 *   npx node bench/under-load.ts [--rounds 3] [--seconds 8] [--before ../base] [--variant name:VAR=value|name:--node-flag] [--profile DIR]
 *
 * Needs ghz (bench/install-tools.sh ghz). Not part of `npm run bench`, whose figures it does not replace.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { type LoadResult, runLoad } from "./ghz.ts";
import { startProcess } from "./processes.ts";
import { benchWorld, pluginTokenRequests, writeDataFile } from "./workload.ts";
import { NODE_ENV, NODE_FLAGS } from "../src/cli/node-flags.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "8" },
    rps: { type: "string", default: "3000" },
    before: { type: "string" },
    /** A further scenario-3 side on this checkout with extra environment, `name:VAR=value`, or an extra Node flag, `name:--flag=value` (repeatable). */
    variant: { type: "string", multiple: true, default: [] },
    profile: { type: "string" },
    "no-saturation": { type: "boolean", default: false },
  },
  strict: true,
});
const SERVER_CORE = "1";
const LOAD_CORE = "0";
const BENCH = import.meta.dirname;
const ghz = join(process.env["PORTCULLIS_CACHE"] ?? join(process.env["HOME"] ?? "/root", ".cache/portcullis"), "bin/ghz-v0.121.0");
const seconds = Number(values.seconds);
const rps = Number(values.rps);
const profileDir = values.profile === undefined ? undefined : resolve(values.profile);
if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true });

const workDir = mkdtempSync(join(tmpdir(), "portcullis-under-load-"));
const world = benchWorld(250);
const worldFile = join(workDir, "world.json");
writeFileSync(worldFile, JSON.stringify(world));
const dataFile = join(workDir, "plugin-token.json");
writeDataFile(dataFile, await pluginTokenRequests(world, 1_000));

interface Side {
  readonly id: string;
  readonly command: (profileFile: string | undefined) => string[];
  readonly env?: Record<string, string>;
}
const node = process.execPath;
const profileArgs = (f: string | undefined) => (f === undefined ? [] : ["--profile-file", f]);
// Extra Node flags come after the shipped ones: V8 takes a flag's last value.
const portcullisAt =
  (root: string, flags: readonly string[] = []) =>
  (f: string | undefined) => [node, ...NODE_FLAGS, ...flags, join(root, "bench/servers/portcullis.ts"), "--ready-file", "{READY}", "--world", worldFile, ...profileArgs(f)];
const sides: Side[] = [
  { id: "same-bytes", command: (f) => [node, join(BENCH, "noop-server.ts"), "--ready-file", "{READY}", "--scenario", "same-bytes", ...profileArgs(f)] },
  { id: "plugin-token", command: portcullisAt(resolve(BENCH, "..")), env: { ...NODE_ENV } },
  ...(values.before === undefined ? [] : [{ id: "before", command: portcullisAt(resolve(values.before)), env: { ...NODE_ENV } }]),
  ...values.variant.map((v) => {
    const [id, assignment] = v.split(":", 2) as [string, string];
    if (assignment.startsWith("--")) return { id, command: portcullisAt(resolve(BENCH, ".."), [assignment]), env: { ...NODE_ENV } };
    const eq = assignment.indexOf("=");
    return { id, command: portcullisAt(resolve(BENCH, "..")), env: { ...NODE_ENV, [assignment.slice(0, eq)]: assignment.slice(eq + 1) } };
  }),
];

interface Row {
  id: string;
  round: number;
  cpuUs: number;
  checks: number;
  refRps: number;
  satRps?: number;
  satCpuUs?: number;
  allocBytes?: number;
  /** At the reference rate, per check: sleeps of the main thread and of the others (libuv's pool, GC helpers). */
  mainSleeps: number;
  otherSleeps: number;
  load: string;
}
const rows: Row[] = [];
const load1 = () => loadavg().map((l) => l.toFixed(1)).join(" ");
try {
  for (let round = 0; round < Number(values.rounds); round++) {
    const order = round % 2 === 0 ? sides : sides.toReversed();
    for (const side of order) {
      const profileFile = profileDir === undefined ? undefined : join(profileDir, `${side.id}-${round}.cpuprofile`);
      const server = await startProcess({ name: `${side.id}-${round}`, core: SERVER_CORE, command: side.command(profileFile), ...(side.env ? { env: side.env } : {}), workDir });
      try {
        const run = (durationSeconds: number, rate?: number): Promise<LoadResult> =>
          runLoad({
            ghz,
            target: `127.0.0.1:${server.port}`,
            dataFile,
            concurrency: rate === undefined ? 64 : 8,
            connections: 2,
            durationSeconds,
            ...(rate === undefined ? {} : { rps: rate }),
            core: LOAD_CORE,
            workDir,
            serverPids: [server.pid],
            serverCore: SERVER_CORE,
          });
        await run(4);
        if (profileFile !== undefined) process.kill(server.pid, "SIGHUP");
        const reference = await run(seconds, rps);
        const saturation = values["no-saturation"] || profileFile !== undefined ? undefined : await run(seconds);
        await server.stop();
        const alloc = profileFile === undefined ? undefined : (JSON.parse(readFileSync(`${profileFile}.alloc.json`, "utf8")) as { allocatedBytes: number }).allocatedBytes;
        const row: Row = {
          id: side.id,
          round,
          cpuUs: reference.cpuUsPerRequest,
          checks: reference.count,
          refRps: reference.rps,
          ...(saturation === undefined ? {} : { satRps: saturation.rps, satCpuUs: saturation.cpuUsPerRequest }),
          ...(alloc === undefined ? {} : { allocBytes: alloc / reference.count }),
          mainSleeps: reference.switches.mainSleeps,
          otherSleeps: reference.switches.otherSleeps,
          load: load1(),
        };
        rows.push(row);
        process.stderr.write(`${JSON.stringify(row)}\n`);
      } finally {
        await server.stop();
      }
    }
  }
} finally {
  rmSync(workDir, { recursive: true, force: true });
}

const median = (xs: number[]) => {
  const s = xs.toSorted((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (x: number, d = 1) => (Number.isNaN(x) ? "–" : x.toFixed(d));
const base = rows.filter((r) => r.id === "same-bytes");
process.stdout.write(`| side | CPU µs/check at ${rps}/s (median; runs) | ratio to same-bytes by CPU | best checks/s at saturation | ratio by throughput | KiB allocated per check |\n|---|--:|--:|--:|--:|--:|\n`);
for (const side of sides) {
  const mine = rows.filter((r) => r.id === side.id);
  const cpu = median(mine.map((r) => r.cpuUs));
  const bestSat = mine.some((r) => r.satRps !== undefined) ? Math.max(...mine.map((r) => r.satRps ?? 0)) : NaN;
  const baseSat = base.some((r) => r.satRps !== undefined) ? Math.max(...base.map((r) => r.satRps ?? 0)) : NaN;
  process.stdout.write(
    `| ${side.id} | ${fmt(cpu)} (${mine.map((r) => fmt(r.cpuUs, 0)).join(", ")}) | ${fmt(median(base.map((r) => r.cpuUs)) / cpu, 2)} | ${fmt(bestSat, 0)} | ${fmt(bestSat / baseSat, 2)} | ${fmt(median(mine.filter((r) => r.allocBytes !== undefined).map((r) => r.allocBytes! / 1024)))} |\n`,
  );
}
process.stdout.write(`load average at the end: ${load1()}\n`);
