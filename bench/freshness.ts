/**
 * How fast a change of rights takes effect (issue 45), measured: the world, the two replicas, the
 * steady load and the changes of test/e2e/freshness.test.ts (test/e2e/freshness-world.ts), with
 * ≥ 20 repetitions per change, printed as one Markdown table per replica — change | p50 | p99 | max,
 * and what bounds each row — with the event sources live and with them cut. Not a test: it asserts
 * nothing, and takes ~15 minutes.
 *
 *   npx node bench/freshness.ts [--repetitions 20] [--only id,id] [--modes live,cut] [--out FILE.md]
 *
 * With the sources cut every row has a short TTL (the ServiceAccount rows: the token's unproven TTL)
 * or kube.watch.freshnessBoundMs (a hung PluginInstallation or Revocation watch: issue 52) to fall
 * back to, so each is measured against its cap.
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import {
  type Change,
  CHANGES,
  DEFAULT_ALLOW_TTL_MS,
  type FreshnessWorld,
  markdownTable,
  measureChange,
  type Repetition,
  type Row,
  startFreshnessWorld,
} from "../test/e2e/freshness-world.ts";

const { values: args } = parseArgs({
  options: {
    repetitions: { type: "string", default: "20" },
    only: { type: "string" },
    modes: { type: "string", default: "live,cut" },
    out: { type: "string" },
  },
});
const repetitions = Number(args.repetitions);
const only = args.only?.split(",");
const changes = CHANGES.filter((c) => only === undefined || only.includes(c.id));

/** Live: the short TTLs are 30 s; past 10 s a row is TTL-bound, and its figure says "> 10000". */
const LIVE_CAP_MS = 10_000;
/** Cut, rows with a short TTL to fall back to: today's allow TTL and 3 s. */
const CUT_CAP_MS = DEFAULT_ALLOW_TTL_MS + 3_000;

const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");
const progress = (change: Change, i: number, r: Repetition) =>
  process.stderr.write(
    `  ${change.id} #${i + 1}: ${r.notSteady !== undefined ? `no steady state (${r.notSteady})` : r.ms.map((ms, k) => `${ms === undefined ? "over the cap" : `${ms.toFixed(0)} ms`} (${r.reasons[k] ?? "ok"})`).join(" | ")}\n`,
  );

async function run(world: FreshnessWorld, mode: "live" | "cut"): Promise<{ rows: Row[]; caps: Map<Row, number> }> {
  await world.startReplicas(mode);
  const rows: Row[] = [];
  const caps = new Map<Row, number>();
  for (const change of changes) {
    const capMs = mode === "live" ? LIVE_CAP_MS : change.cutBoundMs !== undefined ? change.cutBoundMs + 3_000 : CUT_CAP_MS;
    process.stderr.write(`${mode}: ${change.label} (load average ${load()})\n`);
    const measured = await measureChange(world, change, repetitions, { cut: mode === "cut", capMs, steadyCapMs: 40_000, onRepetition: progress });
    const row = { change, repetitions: measured };
    rows.push(row);
    caps.set(row, capMs);
  }
  return { rows, caps };
}

const started = new Date();
const loadBefore = load();
const world = await startFreshnessWorld();
let report: string;
try {
  const modes = args.modes.split(",");
  const live = modes.includes("live") ? await run(world, "live") : { rows: [], caps: new Map<Row, number>() };
  const cut = modes.includes("cut") ? await run(world, "cut") : { rows: [], caps: new Map<Row, number>() };
  const tables = (mode: "live" | "cut", result: { rows: Row[]; caps: Map<Row, number> }) =>
    [0, 1].map((replica) => `replica ${replica + 1}:\n\n${markdownTable(result.rows, replica, mode, (row) => result.caps.get(row)!)}`).join("\n\n");
  report = [
    `Measured ${started.toISOString()} by \`npx node bench/freshness.ts\` (${repetitions} repetitions per change), ${cpus().length} cores; load average (1, 5, 15 min) ${loadBefore} before, ${load()} after.`,
    `### Event sources live (short TTLs at 30 s: only an event explains a refusal within them)\n\n${tables("live", live)}`,
    `### Event sources cut (every watch open hung, OpenFGA's changes endpoint 500; today's TTLs: allow 5 s, deny 2 s)\n\n${tables("cut", cut)}`,
  ].join("\n\n");
} finally {
  await world.stop();
}
console.log(report);
if (args.out !== undefined) writeFileSync(args.out, `${report}\n`);
