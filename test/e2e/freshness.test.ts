/**
 * Issue 45, end to end on the real kube-apiserver and the real OpenFGA, two portcullis replicas
 * (processes) each answering a steady load of the same request from cache (freshness-world.ts):
 *  - sources live, the short TTLs at 30 s: every change is refused (a re-created ServiceAccount's
 *    token accepted) at both replicas within 1.5 s of the API call's return — only an event explains that;
 *  - sources cut (every watch open through the kube proxy hung, OpenFGA's changes endpoint 500),
 *    today's default TTLs: no answer outlives them (refused within the allow TTL and a margin), and
 *    a hung Revocation or PluginInstallation watch closes the plugin path within
 *    kube.watch.freshnessBoundMs and a margin (issue 52; before it, its silence probe: up to 70 s).
 * A few repetitions per change; bench/freshness.ts runs the same with ≥ 20 and prints p50/p99/max.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type Change,
  CHANGES,
  DEFAULT_ALLOW_TTL_MS,
  type FreshnessWorld,
  markdownTable,
  measureChange,
  type Row,
  startFreshnessWorld,
} from "./freshness-world.ts";

/** Issue 45's goal is p99 below 1 s; a CI machine shared with other suites gets half a second more. */
const BOUND_MS = 1_500;
/** Refused within today's allow TTL and this: one refresh of the expired answer, on a noisy machine. */
const CUT_MARGIN_MS = 1_000;
const LIVE_REPETITIONS = 3;
const CUT_REPETITIONS = 2;

let world: FreshnessWorld;
beforeAll(async () => {
  world = await startFreshnessWorld();
}, 180_000);
afterAll(async () => world?.stop(), 60_000);

/** What went wrong in a row: a repetition not measured, a replica over `boundMs`, a refusal for another reason. */
function problems(row: Row, boundMs: number, reasonRequired: boolean): string[] {
  const out: string[] = [];
  row.repetitions.forEach((r, i) => {
    if (r.notSteady !== undefined) {
      out.push(`repetition ${i + 1}: no steady state before the change (${r.notSteady})`);
      return;
    }
    r.ms.forEach((ms, replica) => {
      const where = `repetition ${i + 1}, replica ${replica + 1}`;
      if (ms === undefined || ms > boundMs) out.push(`${where}: ${ms === undefined ? "not" : `${ms.toFixed(0)} ms, not`} within ${boundMs} ms (last: ${r.reasons[replica] ?? "ok"})`);
      else if (reasonRequired && row.change.reason !== undefined && r.reasons[replica] !== row.change.reason) out.push(`${where}: refused as ${r.reasons[replica]}, expected ${row.change.reason}`);
    });
  });
  if (row.repetitions.length === 0) out.push("nothing measured");
  return out;
}

describe("sources live: every change reaches both replicas within 1.5 s", () => {
  const rows: Row[] = [];
  beforeAll(() => world.startReplicas("live"), 90_000);
  afterAll(() => console.log(`sources live, replica 1:\n${markdownTable(rows, 0, "live", () => BOUND_MS * 2)}\n\nreplica 2:\n${markdownTable(rows, 1, "live", () => BOUND_MS * 2)}`));

  for (const change of CHANGES) {
    it(change.label, async () => {
      const repetitions = await measureChange(world, change, LIVE_REPETITIONS, { cut: false, capMs: BOUND_MS * 2, steadyCapMs: 10_000 });
      const row = { change, repetitions };
      rows.push(row);
      expect(problems(row, BOUND_MS, true)).toEqual([]);
    }, 60_000);
  }
});

describe("sources cut (watches hung, OpenFGA changes failing): no answer outlives today's TTLs", () => {
  const rows: Row[] = [];
  beforeAll(() => world.startReplicas("cut"), 90_000);
  afterAll(() => console.log(`sources cut, replica 1:\n${markdownTable(rows, 0, "cut", (row) => capOf(row.change))}\n\nreplica 2:\n${markdownTable(rows, 1, "cut", (row) => capOf(row.change))}`));

  // The rows whose cut source has a short TTL (the ServiceAccount rows: the token's unproven TTL,
  // as long as the allow TTL), or the freshness bound, to fall back to.
  const capOf = (change: Change) => (change.cutBoundMs ?? DEFAULT_ALLOW_TTL_MS) + CUT_MARGIN_MS;
  for (const change of CHANGES.filter((c) => c.cutWithinTtl || c.cutBoundMs !== undefined)) {
    it(change.label, async () => {
      const repetitions = await measureChange(world, change, CUT_REPETITIONS, { cut: true, capMs: capOf(change) + 1_000, steadyCapMs: 30_000 });
      const row = { change, repetitions };
      rows.push(row);
      expect(problems(row, capOf(change), false)).toEqual([]);
    }, 120_000);
  }

  it("the cut reached the event sources: watches were hung and OpenFGA's changes were asked and failed", () => {
    expect(world.kubeProxy.stayedHung()).toBeGreaterThan(0);
    expect(world.fgaProxy.failed()).toBeGreaterThan(0);
  });
});
