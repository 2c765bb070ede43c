/**
 * Top self-time functions of a V8 .cpuprofile (as `node --cpu-prof` writes it), and a check's time
 * by what it is spent on (the policy, the wire, the plumbing around them).
 *
 *   node bench/profile.ts F.cpuprofile [µs per check]     # both tables, e.g. of `bench/hot-path.ts --profile-file F`
 *   node bench/profile.ts --above NOOP.cpuprofile:CHECKS F.cpuprofile:CHECKS   # by part against the same-bytes no-op, of `bench/under-load.ts --profile D`
 */
import { readFileSync } from "node:fs";
import { relative } from "node:path";

interface ProfileNode {
  id: number;
  children?: number[];
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  readonly fn: string;
  readonly where: string;
  readonly selfMs: number;
  readonly share: number;
}

/** Self time per function (summed over call sites), highest first; `idle` and `program` are kept visible. */
export function topSelfTime(file: string, root: string, limit = 20): { totalMs: number; rows: SelfTime[] } {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<string, { fn: string; where: string; us: number }>();
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!);
    // The delta before a sample is the time it stands for (V8's own convention in DevTools).
    const dt = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0;
    if (node === undefined) continue;
    total += dt;
    const { functionName, url, lineNumber } = node.callFrame;
    const fn = functionName === "" ? "(anonymous)" : functionName;
    const where = url === "" ? "" : `${shorten(url, root)}:${lineNumber + 1}`;
    const key = `${fn}@${where}`;
    const entry = selfUs.get(key) ?? { fn, where, us: 0 };
    entry.us += dt;
    selfUs.set(key, entry);
  }
  const rows = [...selfUs.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, limit)
    .map((e) => ({ fn: e.fn, where: e.where, selfMs: e.us / 1000, share: total === 0 ? 0 : e.us / total }));
  return { totalMs: total / 1000, rows };
}

function shorten(url: string, root: string): string {
  const path = url.startsWith("file://") ? new URL(url).pathname : url;
  if (path.startsWith("node:")) return path;
  const rel = relative(root, path);
  return rel.startsWith("node_modules/") ? rel.slice("node_modules/".length) : rel;
}

/**
 * Where each sample's time goes: the nearest frame of portcullis's own code, a dependency or the bench
 * above it (Node's internals, such as timers and diagnostics_channel, count for the code that called
 * them), by what that code does. protobufjs's generated (de)coders have no URL; GC and idle are V8's.
 */
const PARTS: ReadonlyArray<readonly [string, RegExp]> = [
  ["the bench's loop", /bench\/hot-path\.ts/],
  ["deadline", /src\/authz\/check-deadline\.ts/],
  ["metrics (publishes, prom-client)", /src\/metrics\/|prom-client/],
  ["tracing wrapper", /src\/tracing\//],
  ["audit line", /src\/audit\/|src\/server\/logging\.ts|pino|sonic-boom/],
  ["CheckResponse and header mutations", /src\/envoy\/check-response\.ts|src\/headers\//],
  ["CheckRequest read (check-request.ts)", /src\/envoy\/check-request\.ts/],
  ["check() itself", /src\/authz\/check\.ts/],
  ["the server's Check handler", /src\/server\/app\.ts/],
  ["policy and gates (caches, tokens, RequestInfo)", /src\/authz\/|src\/tokens\/|src\/kube-[a-z]+\/|src\/ports\/|src\/fga\/|src\/cache\/|src\/konfidence\/|lru-cache|jose/],
  ["protobuf decode and encode", /protobufjs|@grpc\//],
];

/** Under load (bench/under-load.ts --profile): gRPC and HTTP/2 apart from protobufjs, which both servers pay. */
const LOAD_PARTS: ReadonlyArray<readonly [string, RegExp]> = [["gRPC and HTTP/2 (grpc-js)", /@grpc\//], ...PARTS.filter(([part]) => part !== "the bench's loop")];

export function timeByPart(file: string, parts = PARTS): Array<{ part: string; share: number; us: number }> {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const us = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0;
    total += dt;
    let part: string | undefined;
    for (let id: number | undefined = profile.samples[i]; id !== undefined && part === undefined; id = parent.get(id)) {
      const { functionName, url } = byId.get(id)!.callFrame;
      if (/\$(decode|encode)$/.test(functionName)) part = "protobuf decode and encode";
      else if (functionName === "(garbage collector)") part = "GC";
      else if (functionName === "(program)" || functionName === "(idle)") part = parts === LOAD_PARTS ? functionName : "(program), (idle)";
      else if (url !== "" && !url.startsWith("node:")) part = parts.find(([, re]) => re.test(url))?.[0] ?? "other code";
    }
    part ??= "Node internals with no caller above";
    us.set(part, (us.get(part) ?? 0) + dt);
  }
  return [...us].map(([part, t]) => ({ part, share: total === 0 ? 0 : t / total, us: t })).sort((a, b) => b.share - a.share);
}

/**
 * `--above NOOP.cpuprofile:CHECKS F.cpuprofile:CHECKS`: the main thread's time per check by part in each
 * profile of bench/under-load.ts --profile (idle left out) and the difference, largest first.
 */
function above(noop: string, server: string): void {
  const read = (arg: string) => {
    const [file, checks] = arg.split(":") as [string, string];
    return new Map(timeByPart(file, LOAD_PARTS).filter((p) => p.part !== "(idle)").map((p) => [p.part, p.us / Number(checks)]));
  };
  const [a, b] = [read(noop), read(server)];
  const rows = [...new Set([...a.keys(), ...b.keys()])].map((part) => ({ part, noop: a.get(part) ?? 0, server: b.get(part) ?? 0 }));
  rows.sort((x, y) => y.server - y.noop - (x.server - x.noop));
  process.stdout.write("| part | no-op µs/check | portcullis µs/check | difference |\n|---|--:|--:|--:|\n");
  for (const r of rows) process.stdout.write(`| ${r.part} | ${r.noop.toFixed(1)} | ${r.server.toFixed(1)} | ${(r.server - r.noop).toFixed(1)} |\n`);
  const sum = (m: Map<string, number>) => [...m.values()].reduce((x, y) => x + y, 0);
  process.stdout.write(`| all but idle | ${sum(a).toFixed(1)} | ${sum(b).toFixed(1)} | ${(sum(b) - sum(a)).toFixed(1)} |\n`);
}

if (import.meta.main && process.argv[2] === "--above") above(process.argv[3]!, process.argv[4]!);
else if (import.meta.main) {
  const [file, perCheck] = process.argv.slice(2);
  if (file === undefined) throw new Error("usage: node bench/profile.ts F.cpuprofile [µs per check]");
  const us = Number(perCheck);
  const { totalMs, rows } = topSelfTime(file, process.cwd(), 25);
  process.stdout.write(`${totalMs.toFixed(0)} ms of samples\n\nself time:\n`);
  for (const r of rows) process.stdout.write(`${(r.share * 100).toFixed(1).padStart(5)}%  ${r.fn}  ${r.where}\n`);
  process.stdout.write("\nby part (Node's internals counted for their caller):\n");
  for (const p of timeByPart(file)) process.stdout.write(`${(p.share * 100).toFixed(1).padStart(5)}%${Number.isFinite(us) ? `  ${(p.share * us).toFixed(2).padStart(6)} µs/check` : ""}  ${p.part}\n`);
}
