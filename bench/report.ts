/** bench/RESULTS.md from one run's results: every figure beside its ratio to the no-op server of the same run. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseAllDocuments } from "yaml";
import { fleetSection } from "./fleet-report.ts";
import type { LoadResult } from "./ghz.ts";
import { HOT_SCENARIOS, type HotResult, type ProcessRun, type Results } from "./scenarios.ts";

const MiB = 2 ** 20;
/** A figure whose repeats spread by more than this (max − min over median) is reported as unstable. */
const STABLE_SPREAD = 0.1;
/** Issue 15: the warm Fundament and Konfidence scenarios keep at least this share of the no-op's capacity. */
const CAPACITY_TARGET = 0.85;

const label = (id: string) => HOT_SCENARIOS.find((s) => s.id === id)?.label ?? id;
const ratio = (v: number, base: number | undefined) => (base === undefined || !Number.isFinite(v) || !Number.isFinite(base) || base === 0 ? "–" : `${(v / base).toFixed(2)}×`);
const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(v < 10 ? 2 : 1) : "–");
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(0)}%` : "–");

/** The no-ops: the empty OK, and the same-bytes one answering scenario 3's allow (bench/noop-server.ts). */
type NoopId = "noop" | "noop-same-bytes";
const NOOPS: readonly NoopId[] = ["noop", "noop-same-bytes"];
const isNoop = (id: string) => (NOOPS as readonly string[]).includes(id);

/** A no-op's best saturation run: the ceiling for the throughput ratios. */
function ceiling(r: Results, id: NoopId = "noop"): HotResult | undefined {
  const first = r.hot.find((h) => h.id === id);
  if (first === undefined) return undefined;
  return { ...first, saturation: first.saturationRuns.toSorted((a, b) => b.rps - a.rps)[0] ?? first.saturation };
}

/**
 * A scenario's CPU per check at the reference rate against a no-op's (`base`: the empty OK's by
 * default, or the same-bytes one's), process by process: each process against the mean of that
 * no-op's processes run just before and just after it.
 */
export function referenceRatios(r: Results, id: string, base: NoopId = "noop"): Array<{ cpuUs: number; noopCpuUs: number; capacityRatio: number }> {
  const out: Array<{ cpuUs: number; noopCpuUs: number; capacityRatio: number }> = [];
  r.processes.forEach((p, i) => {
    if (p.id !== id || id === base) return;
    const before = r.processes.slice(0, i).findLast((q) => q.id === base);
    const after = r.processes.slice(i + 1).find((q) => q.id === base);
    const around = [before, after].filter((q): q is ProcessRun => q !== undefined).map((q) => q.reference.cpuUsPerRequest);
    if (around.length === 0) return;
    const noopCpuUs = around.reduce((a, b) => a + b, 0) / around.length;
    out.push({ cpuUs: p.reference.cpuUsPerRequest, noopCpuUs, capacityRatio: noopCpuUs / p.reference.cpuUsPerRequest });
  });
  return out;
}

/**
 * What one sleep of the main thread costs in CPU, fitted over the no-op's runs of this run (every
 * reference, saturation and fixed-rate run): CPU per check = perCheckUs + perSleepUs × sleeps per
 * check, least squares. The no-op does the same work per check at every load, so what its CPU per
 * check gains at lower rates is, to first order, waking up (and the frames and syscalls fewer checks share).
 */
export function sleepCost(r: Results): { perSleepUs: number; perCheckUs: number; r2: number; points: number } | undefined {
  const noop = r.hot.find((h) => h.id === "noop");
  const runs = [...r.processes.filter((p) => p.id === "noop").flatMap((p) => [p.reference, ...p.saturationRuns]), ...(noop?.rates ?? [])];
  const pts = runs.map((x) => [x.switches.mainSleeps, x.cpuUsPerRequest] as const).filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b));
  if (pts.length < 3) return undefined;
  const mx = pts.reduce((t, [a]) => t + a, 0) / pts.length;
  const my = pts.reduce((t, [, b]) => t + b, 0) / pts.length;
  const sxx = pts.reduce((t, [a]) => t + (a - mx) ** 2, 0);
  const sxy = pts.reduce((t, [a, b]) => t + (a - mx) * (b - my), 0);
  const syy = pts.reduce((t, [, b]) => t + (b - my) ** 2, 0);
  if (sxx === 0 || syy === 0) return undefined;
  const perSleepUs = sxy / sxx;
  return { perSleepUs, perCheckUs: my - perSleepUs * mx, r2: (sxy * sxy) / (sxx * syy), points: pts.length };
}

/** A scenario's CPU per check at the reference rate, the median over its processes. */
function referenceCpu(r: Results, id: string): number {
  return median(r.processes.filter((p) => p.id === id).map((p) => p.reference.cpuUsPerRequest));
}

/** A scenario's main-thread sleeps per check at the reference rate, the median over its processes. */
function referenceSleeps(r: Results, id: string): number {
  return median(r.processes.filter((p) => p.id === id).map((p) => p.reference.switches.mainSleeps));
}

interface Spread {
  readonly n: number;
  readonly min: number;
  readonly median: number;
  readonly max: number;
  /** (max − min) / median */
  readonly spread: number;
}

function spreadOf(xs: number[]): Spread {
  const ok = xs.filter(Number.isFinite);
  const m = median(ok);
  return { n: ok.length, min: Math.min(...ok), median: m, max: Math.max(...ok), spread: ok.length < 2 ? NaN : (Math.max(...ok) - Math.min(...ok)) / m };
}

const range = (s: Spread, digits = 2) => (s.n < 2 ? `${s.median.toFixed(digits)}` : `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`);

export function renderResults(r: Results): string {
  const noop = ceiling(r);
  const sameBytes = ceiling(r, "noop-same-bytes");
  const out: string[] = [];
  const w = (...lines: string[]) => out.push(...lines);

  w(
    "# portcullis benchmark results",
    "",
    `Generated by \`npm run bench${r.mode === "quick" ? " -- --quick" : ""}\` on ${r.date} (${r.mode} run). Do not edit: rerun the command.`,
    "Every figure comes from this one run, on this machine, and is also given as a ratio to the no-op",
    "ext_authz server measured in the same run.",
    "",
    "## Machine",
    "",
    "| | |",
    "| --- | --- |",
    ...Object.entries(r.machine).map(([k, v]) => `| ${k} | ${v} |`),
    `| portcullis started with | \`node ${r.shippedFlags.node.join(" ")}\`${Object.keys(r.shippedFlags.env).length === 0 ? "" : ` and ${Object.entries(r.shippedFlags.env).map(([k, v]) => `\`${k}=${v}\``).join(", ")}`} (the shipped flags, src/cli/node-flags.ts) |`,
    "",
  );
  const startLoad = Number((r.machine["loadAtStart"] ?? "0").split(" ")[0]);
  if (startLoad >= 0.5) {
    w(
      `> The 1-minute load average was ${startLoad.toFixed(2)} when the run started (the target was below 0.5): other work was`,
      "> running on this machine, so absolute figures are noisier than they should be. The ratios compare",
      "> scenarios measured minutes apart under the same conditions; the runs' table shows how much other work each run met.",
      "",
    );
  }

  w(...targets(r), "");
  const compared = comparedWithPrevious(r);
  w(...findings(r, compared), "");
  w(...stability(r), "");
  const previous = againstPrevious(r, compared);
  if (previous.length > 0) w(...previous, "");
  w(...referenceSection(r), "");

  w(
    "## Throughput at saturation",
    "",
    `ghz on core 0, ${r.settings["concurrency"]} concurrent requests over ${r.settings["connections"]} connections, ${r.settings["saturationSeconds"]} s per run,`,
    `best by throughput of ${r.settings["saturationRepeats"]} run(s) in each of ${r.settings["processRepeats"] ?? 1} fresh server process(es) (the no-op: every one of its processes), each after a ${r.settings["warmupSeconds"]} s warm-up; the server alone on core 1.`,
    "(Rates and RSS idle come from the first process.)",
    "CPU per check = the server's utime+stime (/proc/<pid>/stat, every thread) over the run ÷ requests; ghz cores = ghz's own",
    "utime+stime over the run (bash `times`): near 1.00 means ghz, on its one core, was the limit, not the server.",
    "",
    "Secondary figures: at saturation each server runs at its own rate, and CPU per check falls as the rate rises (HTTP/2",
    "frames and syscalls are shared by more checks per event-loop turn; see the fixed-rate table's CPU column), so a server",
    "that ghz cannot saturate is charged more per check than one it can. Compare CPU per check at the reference rate above.",
    "",
    "× same-bytes: against the same-bytes no-op (bench/noop-server.ts `--scenario same-bytes`: scenario 3's requests decoded as",
    "portcullis's server decodes them, scenario 3's allow answered from bytes encoded once), the floor of this job on this stack.",
    "",
    "| scenario | checks/s | × no-op | × same-bytes | p50 ms | p99 ms | server cores | ghz cores | CPU µs/check | × no-op | × same-bytes | capacity/s on 1 core | × no-op | × same-bytes | RSS idle MiB | RSS after MiB | × no-op | load avg |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  );
  for (const h of r.hot) {
    const s = h.saturation;
    w(
      `| ${label(h.id)} | ${s.rps.toFixed(0)} | ${ratio(s.rps, noop?.saturation.rps)} | ${ratio(s.rps, sameBytes?.saturation.rps)} | ${ms(s.p50Ms)} | ${ms(s.p99Ms)} | ${s.cpuCores.toFixed(2)} | ${s.ghzCores.toFixed(2)} | ${s.cpuUsPerRequest.toFixed(1)} | ${ratio(s.cpuUsPerRequest, noop?.saturation.cpuUsPerRequest)} | ${ratio(s.cpuUsPerRequest, sameBytes?.saturation.cpuUsPerRequest)} | ${capacity(s).toFixed(0)} | ${ratio(capacity(s), noop === undefined ? undefined : capacity(noop.saturation))} | ${ratio(capacity(s), sameBytes === undefined ? undefined : capacity(sameBytes.saturation))} | ${(h.rssIdleBytes / MiB).toFixed(0)} | ${(s.rssBytes / MiB).toFixed(0)} | ${ratio(s.rssBytes, noop?.saturation.rssBytes)} | ${h.loadAtStart === undefined ? "–" : h.loadAtStart.toFixed(2)} |`,
    );
  }
  const repeats = r.hot.filter((h) => h.saturationRuns.length > 1);
  if (repeats.length > 0) {
    w(
      "",
      "Every saturation run, checks/s (CPU µs per check): " +
        repeats.map((h) => `${h.id} ${h.saturationRuns.map((x) => `${x.rps.toFixed(0)} (${x.cpuUsPerRequest.toFixed(0)})`).join(", ")}`).join("; ") +
        ".",
    );
  }
  w("");

  if (noop !== undefined && noop.rates.length > 0) {
    w(
      "## Latency at fixed rates",
      "",
      `Fixed rates (ghz \`--rps R\`, at most ${r.settings["rateConcurrency"]} requests in flight) at ${String(r.settings["rateFractions"]).split(",").map((f) => `${Number(f) * 100}%`).join(", ")} of the no-op server's`,
      `saturation throughput, ${r.settings["rateSeconds"]} s each, in each scenario's first process. Latency is ghz's, client side, per request; × no-op compares with the no-op server at the same rate.`,
      "ghz on one core adds its own scheduling to what it measures (bench/ghz.ts: against the no-op at half its capacity,",
      "p99 was 24 ms with 32 workers and 4 ms with 8): a p99 of ~4 ms is this setup's floor, the no-op's and OPA-Envoy's",
      "alike. Read the tail as a ratio to the no-op's. The last columns say what else ran meanwhile (/proc/stat, as a share",
      "of the run's wall time): steal on the server's core, and other processes' work on each core.",
      "",
      "| scenario | offered/s | achieved/s | p50 ms | p99 ms | × no-op | p99.9 ms | × no-op | max ms | CPU µs/check | errors | steal core 1 | other work core 1 / core 0 |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    );
    for (const h of r.hot) {
      h.rates.forEach((x, i) => {
        const base = noop.rates[i];
        const errors = Object.values(x.errors).reduce((a, b) => a + b, 0);
        w(
          `| ${label(h.id)} | ${x.offeredRps} | ${x.rps.toFixed(0)} | ${ms(x.p50Ms)} | ${ms(x.p99Ms)} | ${ratio(x.p99Ms, base?.p99Ms)} | ${ms(x.p999Ms)} | ${ratio(x.p999Ms, base?.p999Ms)} | ${ms(x.maxMs)} | ${x.cpuUsPerRequest.toFixed(1)} | ${errors} | ${pct(x.machine.serverCoreSteal)} | ${pct(x.machine.serverCoreForeign)} / ${pct(x.machine.loadCoreForeign)} |`,
        );
      });
    }
    w("", "![p99 latency against offered load](p99-vs-load.svg)", "", "Chart: [bench/p99-vs-load.svg](p99-vs-load.svg).", "");
  }

  w(...runsTable(r), "");
  if (r.cold !== undefined) w(...cold(r), "");
  if (r.memory !== undefined) w(...memory(r), "", ...sizing(r), "");
  w(...cpuSizing(r), "");
  w(...flagsSection(r), "");
  if (r.fleet !== undefined) w(fleetSection(r.fleet), "");
  if (r.fleetError !== undefined) w("## Fleet", "", `**The fleet benchmark failed in this run:** ${r.fleetError.split("\n")[0]}`, "");
  if (r.hotPath !== undefined) {
    const base = r.hotPath.find((x) => x.scenario === "noop")?.cpuUsPerCheck;
    const sameBytesBase = r.hotPath.find((x) => x.scenario === "noop-same-bytes")?.cpuUsPerCheck;
    const above = (x: { scenario: string; cpuUsPerCheck: number }, b: number | undefined) => (b === undefined || isNoop(x.scenario) ? "" : `+${(x.cpuUsPerCheck - b).toFixed(2)}`);
    w(
      "## portcullis's own work per check",
      "",
      "bench/hot-path.ts on core 1: the CheckRequest decoded and the CheckResponse encoded by the (de)serializers grpc-js",
      "uses, the real checker and policies over the warm ports, the audit line written (to /dev/null) — in a loop, 64 checks",
      "in flight, no gRPC or HTTP/2. `noop` decodes and encodes only, with proto-loader's conversions as the no-op server",
      "does; portcullis's scenarios with the server's own (src/envoy/protos.ts checkService, no conversion to plain objects).",
      "What a check costs above `noop` is portcullis's own work less that conversion; the rest of a check's cost in the",
      "load tests is the gRPC/HTTP/2 stack both servers share. `noop-same-bytes` decodes as portcullis's server does and",
      "answers scenario 3's allow from bytes encoded once, as the same-bytes no-op server does.",
      "",
      "| scenario | CPU µs per check | KiB allocated per check | above noop | above noop-same-bytes |",
      "| --- | ---: | ---: | ---: | ---: |",
      ...r.hotPath.map(
        (x) =>
          `| ${x.scenario} | ${x.cpuUsPerCheck.toFixed(2)} | ${x.bytesPerCheck === undefined ? "–" : (x.bytesPerCheck / 1024).toFixed(1)} | ${above(x, base)} | ${above(x, sameBytesBase)} |`,
      ),
      "",
    );
  }
  if (r.profile !== undefined) {
    w(
      "## Where the hot path's time goes",
      "",
      `The V8 CPU profiler on scenario 3 (${r.profile.scenario}, shipped flags) during one saturation run after the warm-up, ${r.profile.requests} checks,`,
      `${(r.profile.totalMs / 1000).toFixed(1)} s of samples. Top self time, by function:`,
      "",
      "| self ms | share | function | where |",
      "| ---: | ---: | --- | --- |",
      ...r.profile.rows.map((x) => `| ${x.selfMs.toFixed(0)} | ${(x.share * 100).toFixed(1)}% | \`${x.fn}\` | ${x.where === "" ? "(native)" : `\`${x.where}\``} |`),
      "",
    );
  }

  w("## Method and changes", "", "How the comparison is made fair, the tail's GC experiment and what was changed for speed and memory: [FINDINGS.md](FINDINGS.md).", "");
  w("## Commands", "", "```sh", "npm run bench            # this report (ghz and OPA-Envoy are built into ~/.cache/portcullis/bin if missing)", "npm run bench -- --quick # a shorter run", "npm run bench -- --only noop,plugin-token,opa   # a subset (the no-op still runs between scenarios)", ...r.commands, "```", "");
  return out.join("\n");
}

/** Checks per second one core sustains at the measured CPU cost per check. */
function capacity(s: LoadResult): number {
  return 1e6 / s.cpuUsPerRequest;
}

/** The row of the fixed-rate ladder at `fraction` of the no-op's saturation rate. */
function rateAt(r: Results, h: HotResult | undefined, fraction: number): LoadResult | undefined {
  const i = String(r.settings["rateFractions"]).split(",").findIndex((f) => Math.abs(Number(f) - fraction) < 1e-9);
  return i < 0 ? undefined : h?.rates[i];
}

function targets(r: Results): string[] {
  const noop = ceiling(r);
  const byId = (id: string) => r.hot.find((h) => h.id === id);
  const plugin = byId("plugin-token");
  const opa = byId("opa");
  const refRps = r.settings["referenceRps"];
  const rows: string[] = [];
  const row = (target: string, met: boolean | undefined, figure: string) =>
    rows.push(`| ${target} | ${met === undefined ? "not measured" : met ? "**met**" : "**missed**"} | ${figure} |`);
  const refTarget = (id: string, name: string, min: number, base: NoopId = "noop", extra = "") => {
    const ratios = referenceRatios(r, id, base);
    const noopName = base === "noop" ? "the no-op's" : "the same-bytes no-op's";
    if (ratios.length === 0) return row(`${name} ≥ ${min} × ${noopName} capacity by CPU per check at ${refRps}/s`, undefined, "");
    const c = spreadOf(ratios.map((x) => x.capacityRatio));
    row(
      `${name} ≥ ${min} × ${noopName} capacity by CPU per check at ${refRps}/s (primary)`,
      c.median >= min,
      `${range(c)}× — median over ${c.n} process(es) (range), each against the no-op processes run just before and after it: ${ratios.map((x) => `${x.cpuUs.toFixed(1)} vs ${x.noopCpuUs.toFixed(1)} µs`).join("; ")}` +
        sleepsNote(r, id) +
        extra,
    );
  };
  refTarget("plugin-token", "Scenario 3", CAPACITY_TARGET);
  // Issue 47: against the floor of this job, the same-bytes no-op, with the ratio at saturation beside it.
  const sameBytes = ceiling(r, "noop-same-bytes");
  if (sameBytes !== undefined) {
    for (const [id, name, min] of [["plugin-assets", "Scenario 2 (plugin-assets)", 0.95], ["plugin-token", "Scenario 3", CAPACITY_TARGET]] as const) {
      const h = byId(id);
      if (h === undefined) continue;
      const saturated = `; at saturation ${h.saturation.rps.toFixed(0)} vs ${sameBytes.saturation.rps.toFixed(0)} checks/s = ${(h.saturation.rps / sameBytes.saturation.rps).toFixed(2)}× (best run of each)`;
      refTarget(id, name, min, "noop-same-bytes", saturated);
    }
  }
  if (noop !== undefined && plugin !== undefined) {
    const x = plugin.saturation.rps / noop.saturation.rps;
    const limitedByGhz = noop.saturation.ghzCores >= 0.9 && noop.saturation.cpuCores < 0.9;
    row(
      `Scenario 3 ≥ ${CAPACITY_TARGET} × the no-op's measured throughput at saturation (best run of each)`,
      x >= CAPACITY_TARGET,
      `${plugin.saturation.rps.toFixed(0)} vs ${noop.saturation.rps.toFixed(0)} checks/s = ${x.toFixed(2)}×; the no-op used ${noop.saturation.cpuCores.toFixed(2)} cores with ghz at ${noop.saturation.ghzCores.toFixed(2)}, scenario 3 ${plugin.saturation.cpuCores.toFixed(2)} with ghz at ${plugin.saturation.ghzCores.toFixed(2)}` +
        (limitedByGhz ? " (the no-op's figure is ghz's ceiling, not the server's)" : ""),
    );
    const half = rateAt(r, plugin, 0.5);
    const noopHalf = rateAt(r, noop, 0.5);
    if (half !== undefined && noopHalf !== undefined) {
      const defaults = rateAt(r, byId("plugin-token-node-defaults"), 0.5);
      row(
        "Scenario 3 p99 ≤ 1.5 × the no-op's p99 at half the no-op's saturation rate, shipped flags",
        half.p99Ms <= 1.5 * noopHalf.p99Ms,
        `${half.p99Ms.toFixed(2)} vs ${noopHalf.p99Ms.toFixed(2)} ms = ${(half.p99Ms / noopHalf.p99Ms).toFixed(2)}× at ${half.offeredRps}/s offered (${half.rps.toFixed(0)} achieved), one ${r.settings["rateSeconds"]} s run each` +
          (defaults === undefined ? "" : `; with Node's default flags (3b): ${defaults.p99Ms.toFixed(2)} ms = ${(defaults.p99Ms / noopHalf.p99Ms).toFixed(2)}×`),
      );
    }
  } else row(`Scenario 3 throughput ≥ ${CAPACITY_TARGET} × no-op`, undefined, "");
  if (byId("plugin-assets") !== undefined) refTarget("plugin-assets", "Scenario 2 (plugin-assets)", 0.95);
  if (byId("user-token") !== undefined) refTarget("user-token", "Scenario 4 (UserToken)", CAPACITY_TARGET);
  if (byId("konfidence") !== undefined) refTarget("konfidence", "Scenario 5 (Konfidence)", CAPACITY_TARGET);
  if (opa !== undefined && plugin !== undefined) {
    const p = referenceRatios(r, "plugin-token");
    const o = referenceRatios(r, "opa");
    const pc = median(p.map((x) => x.cpuUs));
    const oc = median(o.map((x) => x.cpuUs));
    row(
      `Scenario 3 ≥ 2.5 × OPA-Envoy by CPU per check at ${refRps}/s, same core`,
      oc / pc >= 2.5,
      `${(oc / pc).toFixed(2)}× (${pc.toFixed(1)} vs ${oc.toFixed(1)} µs, medians over the processes); measured throughput at saturation ${plugin.saturation.rps.toFixed(0)} vs ${opa.saturation.rps.toFixed(0)} checks/s = ${(plugin.saturation.rps / opa.saturation.rps).toFixed(2)}×`,
    );
  } else row(`Scenario 3 ≥ 2.5 × OPA-Envoy, same CPU`, undefined, "");
  if (r.cold !== undefined) {
    const c = r.cold.concurrent.upstreamCalls;
    const ok = c["openfga"] === 1 && c["kube-subjectaccessreview"] === 1 && c["kube-tokenrequest"] === 1 && Object.keys(c).length === 3;
    row("100 concurrent identical cold checks → 1 OpenFGA, 1 SAR, 1 TokenRequest", ok, Object.entries(c).map(([k, v]) => `${k} ${v}`).join(", "));
    const med = coldSummary(r);
    row(
      "Cold latency ≈ slowest remote gate (+ TokenRequest), not the sum",
      med.checkMs < med.sumMs,
      `median first check ${med.checkMs.toFixed(1)} ms; median slowest call ${med.maxMs.toFixed(1)} ms; sum of calls ${med.sumMs.toFixed(1)} ms`,
    );
  }
  if (r.memory !== undefined) {
    const m = r.memory;
    const shipped = idleAsShipped(m);
    const later = m.later?.rssBytes;
    row(
      `RSS ≤ 150 MB with ${m.users.toLocaleString("en")} cached users and ${m.installations.toLocaleString("en")} installations, after a full GC and ${m.later?.seconds ?? 60} s later`,
      m.afterGc.rssBytes <= 150e6 && (later === undefined || later <= 150e6),
      `${(m.afterGc.rssBytes / 1e6).toFixed(0)} MB after a full GC${later === undefined ? "" : `, ${(later / 1e6).toFixed(0)} MB ${m.later!.seconds} s later`} (${(m.rssFilledBytes / 1e6).toFixed(0)} MB right after the last check)`,
    );
    const quiet = m.idleShippedQuiet;
    const idle = quiet ?? shipped;
    row(
      `RSS ≤ 100 MB idle with ${m.installations.toLocaleString("en")} installations indexed`,
      idle.rssBytes <= 100e6,
      (quiet === undefined ? "" : `${(quiet.rssBytes / 1e6).toFixed(0)} MB after ${quiet.seconds} s without a Check (the idle GC has run) and a full GC; `) +
        `${(shipped.rssBytes / 1e6).toFixed(0)} MB 1 s after start, after a full GC, at the shipped cache sizes; ${(idle.rssFileBytes / 1e6).toFixed(0)} MB of it the node binary's mapped pages (with the caches raised for the fill: ${(m.idleAfterGc.rssBytes / 1e6).toFixed(0)} MB)`,
    );
  }
  return [
    "## Targets",
    "",
    ...shortOfReferenceRate(r, Number(refRps)),
    `Capacity targets are judged on CPU per check at one fixed offered rate, ${refRps} checks/s (\`--rps ${refRps}\`, ${r.settings["rateConcurrency"]} in flight), below every`,
    "server's capacity, each scenario's process against the no-op processes run just before and after it (see \"Why the",
    "figures moved between machines\" below). Measured throughput at saturation is given too and labelled as such.",
    "",
    "| target | result | figures |",
    "| --- | --- | --- |",
    ...rows,
  ];
}

/** The main thread's sleeps per check at the reference rate, the scenario's against the no-op's, when they differ enough to move the ratio. */
function sleepsNote(r: Results, id: string): string {
  const [own, noop] = [referenceSleeps(r, id), referenceSleeps(r, "noop")];
  const cost = sleepCost(r);
  if (!Number.isFinite(own) || !Number.isFinite(noop) || cost === undefined || Math.abs(noop - own) * cost.perSleepUs < 10) return "";
  return `; main-thread sleeps per check ${own.toFixed(2)} vs the no-op's ${noop.toFixed(2)}, ~${(Math.abs(noop - own) * cost.perSleepUs).toFixed(0)} µs of ${noop > own ? "the no-op's" : "this scenario's"} figure (${noop > own ? "flatters the ratio" : "lowers the ratio"}; Findings: sleeping)`;
}

/** Other work on the server's core (steal, other processes) above which a run is called busy. */
const BUSY_CORE = 0.1;

/**
 * The warning over the targets when servers fell short of the reference rate, saying why: a busy
 * core (steal, other processes), or a core too slow for the rate (the server used all of it, so
 * the rate it did reach is its capacity here, and its CPU per check is taken at a lower rate than
 * the no-op's, which overstates it).
 */
function shortOfReferenceRate(r: Results, refRps: number): string[] {
  const short = r.processes.filter((p) => p.reference.rps < 0.97 * refRps);
  if (short.length === 0) return [];
  const busy = short.filter((p) => p.reference.machine.serverCoreSteal + p.reference.machine.serverCoreForeign > BUSY_CORE);
  const calibration = r.processes.map((p) => p.calibrationMs);
  return [
    `> **${short.length} of ${r.processes.length} server processes did not sustain the reference rate** (achieved below 97% of ${refRps}/s: ${short.map((p) => `${p.id} ${p.reference.rps.toFixed(0)}/s`).join(", ")}):`,
    busy.length > 0
      ? `> the machine was too busy for the capacity figures to be taken at the same load (${busy.map((p) => p.id).join(", ")}: steal and other work on the server's core above ${pct(BUSY_CORE)}). Rerun on a quiet machine.`
      : `> not a busy machine (steal and other work on the server's core ≤ ${pct(BUSY_CORE)} in each of them) but a slow one: the calibration loop ran ` +
        `${Math.min(...calibration).toFixed(0)}–${Math.max(...calibration).toFixed(0)} ms, and at the CPU per check they cost here ${refRps}/s needs more than the one core ` +
        `they run on (${short.map((p) => `${p.id} ${((p.reference.cpuUsPerRequest * refRps) / 1e6).toFixed(2)} cores`).join(", ")}). Their CPU per check is taken at the rate they reached, ` +
        `below the no-op's, which overstates it (CPU per check falls as the rate rises): their ratios to the no-op are lower bounds; compare runs by their ratios, not by their µs.`,
    "",
  ];
}

/** How far the same server moves from one process to the next, in this run. */
function stability(r: Results): string[] {
  const rows: string[] = [];
  const add = (what: string, xs: number[], digits = 1) => {
    const s = spreadOf(xs);
    if (s.n === 0) return;
    rows.push(
      `| ${what} | ${s.n} | ${s.min.toFixed(digits)} | ${s.median.toFixed(digits)} | ${s.max.toFixed(digits)} | ${pct(s.spread)} | ${s.n < 2 ? "–" : s.spread <= STABLE_SPREAD ? "stable" : "**unstable**"} |`,
    );
  };
  const runs = (id: string) => r.processes.filter((p) => p.id === id);
  const noopRuns = runs("noop");
  add(`no-op: CPU µs/check at ${r.settings["referenceRps"]}/s`, noopRuns.map((p) => p.reference.cpuUsPerRequest));
  add("no-op: checks/s at saturation (ghz's ceiling)", noopRuns.flatMap((p) => p.saturationRuns.map((x) => x.rps)), 0);
  add("no-op: CPU µs/check at saturation", noopRuns.flatMap((p) => p.saturationRuns.map((x) => x.cpuUsPerRequest)));
  for (const h of HOT_SCENARIOS) {
    if (h.id === "noop") continue;
    const ratios = referenceRatios(r, h.id);
    add(`${h.short}: × no-op capacity at ${r.settings["referenceRps"]}/s (bracketed)`, ratios.map((x) => x.capacityRatio), 2);
    add(`${h.short}: checks/s at saturation ÷ the best no-op run`, runs(h.id).flatMap((p) => p.saturationRuns.map((x) => x.rps / (ceiling(r)?.saturation.rps ?? NaN))), 2);
    if (!isNoop(h.id)) add(`${h.short}: × same-bytes no-op capacity at ${r.settings["referenceRps"]}/s (bracketed)`, referenceRatios(r, h.id, "noop-same-bytes").map((x) => x.capacityRatio), 2);
  }
  add("core 1 calibration loop, CPU ms", r.processes.map((p) => p.calibrationMs));
  return [
    "## Which figures are stable",
    "",
    "The no-op runs between every two scenarios, so it is measured several times in fresh processes; each other scenario",
    `runs in ${r.settings["processRepeats"]} process(es). Spread = (max − min) ÷ median over the repeats; above ${pct(STABLE_SPREAD)} a figure is marked unstable:`,
    "read it as a range, not a number. The calibration loop (a fixed integer loop on core 1 before every process) moves",
    "when the core itself runs slower (frequency, a neighbour on the host); CPU per check cannot be steadier than it.",
    "",
    "| figure | runs | min | median | max | spread | |",
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ...rows,
  ];
}

/**
 * The figures a full run is compared on with the one before it (bench/results.json as it stood): each
 * run's own ratios to its no-op, what portcullis adds above the no-op in µs, and the memory readings.
 */
const CALIBRATION = "core 1 calibration loop, CPU ms (median)";
const noopCpuAt = (refRps: unknown) => `no-op: CPU µs/check at ${refRps}/s (median)`;
const capacityAt = (short: string, refRps: unknown) => `${short}: × no-op capacity at ${refRps}/s`;
const saturationRatio = (short: string) => `${short}: checks/s at saturation ÷ the no-op's (best runs)`;
const P99_AT_HALF = "PluginToken: p99 ÷ the no-op's at half its saturation rate";

export function headlineFigures(r: Results): Record<string, number> {
  const out: Record<string, number> = {};
  const put = (name: string, v: number) => {
    if (Number.isFinite(v)) out[name] = v;
  };
  const refRps = r.settings["referenceRps"];
  const noop = ceiling(r);
  put(CALIBRATION, median(r.processes.map((p) => p.calibrationMs)));
  put(noopCpuAt(refRps), referenceCpu(r, "noop"));
  put("no-op: checks/s at saturation (best run)", noop?.saturation.rps ?? NaN);
  for (const h of HOT_SCENARIOS) {
    if (h.id === "noop") continue;
    const ratios = referenceRatios(r, h.id);
    if (ratios.length > 0) {
      put(capacityAt(h.short, refRps), median(ratios.map((x) => x.capacityRatio)));
      put(`${h.short}: CPU µs/check above the no-op at ${refRps}/s`, median(ratios.map((x) => x.cpuUs - x.noopCpuUs)));
    }
    const best = r.hot.find((x) => x.id === h.id)?.saturation.rps;
    if (best !== undefined && noop !== undefined) put(saturationRatio(h.short), best / noop.saturation.rps);
    const floor = referenceRatios(r, h.id, "noop-same-bytes");
    if (!isNoop(h.id) && floor.length > 0) put(`${h.short}: × same-bytes no-op capacity at ${refRps}/s`, median(floor.map((x) => x.capacityRatio)));
  }
  const half = rateAt(r, r.hot.find((h) => h.id === "plugin-token"), 0.5);
  const noopHalf = rateAt(r, noop, 0.5);
  if (half !== undefined && noopHalf !== undefined) put(P99_AT_HALF, half.p99Ms / noopHalf.p99Ms);
  const hotPathNoop = r.hotPath?.find((x) => x.scenario === "noop")?.cpuUsPerCheck;
  const hotPathPlugin = r.hotPath?.find((x) => x.scenario === "plugin-token")?.cpuUsPerCheck;
  if (hotPathNoop !== undefined && hotPathPlugin !== undefined) put("bench/hot-path.ts: plugin-token µs/check above noop", hotPathPlugin - hotPathNoop);
  const m = r.memory;
  if (m !== undefined) {
    put("memory: RSS MB after the fill and a full GC", m.afterGc.rssBytes / 1e6);
    if (m.later !== undefined) put(`memory: RSS MB ${m.later.seconds} s after the fill`, m.later.rssBytes / 1e6);
    put("memory: RSS MB idle as shipped (quiet, after a full GC)", (m.idleShippedQuiet ?? idleAsShipped(m)).rssBytes / 1e6);
  }
  return out;
}

/** Each headline figure both runs have: before (the previous full run), after (this one), and the relative change. */
function comparedWithPrevious(r: Results): Map<string, { before: number; after: number; change: number }> {
  const out = new Map<string, { before: number; after: number; change: number }>();
  if (r.previous === undefined) return out;
  for (const [name, after] of Object.entries(headlineFigures(r))) {
    const before = r.previous.figures[name];
    if (before !== undefined && before !== 0) out.set(name, { before, after, change: after / before - 1 });
  }
  return out;
}

function againstPrevious(r: Results, compared: ReturnType<typeof comparedWithPrevious>): string[] {
  const previous = r.previous;
  if (previous === undefined) return [];
  const rows = [...compared].map(([name, { before, after, change }]) => {
    const digits = Math.abs(after) < 10 ? 2 : 0;
    return `| ${name} | ${before.toFixed(digits)} | ${after.toFixed(digits)} | ${change >= 0 ? "+" : "−"}${pct(Math.abs(change))} | ${Math.abs(change) <= STABLE_SPREAD ? "" : "**moved**"} |`;
  });
  return [
    "## Against the previous full run",
    "",
    `The same figures from the full run before this one (bench/results.json as it stood, ${previous.date}; core 1 calibration`,
    `${previous.figures[CALIBRATION]?.toFixed(0) ?? "–"} ms there), which may have run on another machine of the same kind. "Which figures are stable" judges`,
    `repeats within one run; this table judges runs against each other. A figure that moved by more than ${pct(STABLE_SPREAD)} while the code`,
    "it measures did not change (the changes table below says what did) depends on the machine as much as on portcullis:",
    "compare such a figure only within one run.",
    "",
    "| figure | previous run | this run | change | |",
    "| --- | ---: | ---: | ---: | --- |",
    ...rows,
  ];
}

function referenceSection(r: Results): string[] {
  const rows = HOT_SCENARIOS.flatMap((h) => {
    const runs = r.processes.filter((p) => p.id === h.id);
    if (runs.length === 0) return [];
    const cpu = spreadOf(runs.map((p) => p.reference.cpuUsPerRequest));
    const against = (base: NoopId) => {
      const c = spreadOf(referenceRatios(r, h.id, base).map((x) => x.capacityRatio));
      return h.id === base ? "1.00×" : c.n === 0 ? "–" : `${range(c)}×`;
    };
    const achieved = Math.min(...runs.map((p) => p.reference.rps));
    return [
      `| ${label(h.id)} | ${runs.length} | ${achieved.toFixed(0)} | ${range(cpu, 1)} | ${(1e6 / cpu.median).toFixed(0)} | ${against("noop")} | ${against("noop-same-bytes")} | ${referenceSleeps(r, h.id).toFixed(2)} | ${median(runs.map((p) => p.reference.p99Ms)).toFixed(2)} |`,
    ];
  });
  return [
    `## CPU per check at ${r.settings["referenceRps"]} checks/s (the primary capacity figure)`,
    "",
    `Every server at the same offered rate, ${r.settings["referenceRps"]}/s for ${r.settings["referenceSeconds"]} s after its warm-up, ${r.settings["rateConcurrency"]} requests in flight at most: below every`,
    "server's capacity, so each one answers every check and ghz is far from its own ceiling. CPU per check = the server's",
    "utime+stime over the run ÷ requests; capacity = 1,000,000 ÷ that, the checks per second one core would sustain at",
    "this cost (an underestimate at higher rates, where checks share frames and syscalls, for every server alike).",
    "× no-op: each process against the mean of the no-op processes just before and after it; median (range). Sleeps: how",
    "often the server's main thread slept and was woken per check (voluntary context switches; for OPA-Envoy, Go's first",
    "thread), which this figure charges for (see \"Sleeping is charged to CPU per check\" below).",
    "",
    "× same-bytes no-op capacity: the same, against the same-bytes no-op's processes (it runs right after each no-op).",
    "",
    "| scenario | processes | achieved/s (lowest) | CPU µs/check, median (range) | capacity/s on 1 core | × no-op capacity | × same-bytes no-op capacity | main-thread sleeps/check | p99 ms |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows,
  ];
}

/** Every server process in run order, with what else the machine was doing. */
function runsTable(r: Results): string[] {
  return [
    "## Every server process, in run order",
    "",
    "What else the machine did during each process's reference-rate run (/proc/stat, as a share of the run's wall",
    "time): steal = time the hypervisor gave this VM's core to another; other work = the core busy with anything but",
    "the server (core 1) or ghz (core 0). The load average is the 1-minute figure when the process started (the",
    "runner's own load keeps it near 1-2). Sleeps and preemptions: voluntary and involuntary context switches; on one",
    "core a portcullis main thread is preempted mostly by its own other threads (V8's GC helpers, libuv's pool).",
    "",
    "| # | scenario | load avg | calibration ms | CPU µs/check at reference | sleeps / preemptions of the main thread, other threads' sleeps, per check | steal core 1 | other work core 1 | other work core 0 | best saturation checks/s | server / ghz cores |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...r.processes.map((p, i) => {
      const best = p.saturationRuns.toSorted((a, b) => b.rps - a.rps)[0];
      const m = p.reference.machine;
      const t = p.reference.switches;
      return `| ${i + 1} | ${HOT_SCENARIOS.find((s) => s.id === p.id)?.short ?? p.id} | ${p.loadAtStart.toFixed(2)} | ${p.calibrationMs.toFixed(0)} | ${p.reference.cpuUsPerRequest.toFixed(1)} | ${t.mainSleeps.toFixed(2)} / ${t.mainPreempted.toFixed(2)}, ${t.otherSleeps.toFixed(2)} | ${pct(m.serverCoreSteal)} | ${pct(m.serverCoreForeign)} | ${pct(m.loadCoreForeign)} | ${best === undefined ? "–" : best.rps.toFixed(0)} | ${best === undefined ? "–" : `${best.cpuCores.toFixed(2)} / ${best.ghzCores.toFixed(2)}`} |`;
    }),
  ];
}

/** The shipped Node flags and what they did in this run: scenario 3 with them against 3b without. */
function flagsSection(r: Results): string[] {
  const shipped = r.hot.find((h) => h.id === "plugin-token");
  const defaults = r.hot.find((h) => h.id === "plugin-token-node-defaults");
  const noop = ceiling(r);
  const out = [
    "## Shipped Node flags",
    "",
    `portcullis ships with \`node ${r.shippedFlags.node.join(" ")}\`${Object.keys(r.shippedFlags.env).length === 0 ? "" : ` and ${Object.entries(r.shippedFlags.env).map(([k, v]) => `\`${k}=${v}\``).join(", ")}`}: one list in src/cli/node-flags.ts, which`,
    "`npm start` (package.json), the Dockerfile's ENTRYPOINT and this benchmark all use (test/deploy/node-flags.test.ts holds",
    "them to it). Every portcullis process above ran with them, the memory scenario included, except 3b, which runs",
    "scenario 3 with Node's defaults to show what the flags change. Node's defaults depend on the machine: here V8's old",
    "generation may grow to a quarter of the host's memory (4 GiB), while in the shipped pod Node sizes it from the 512Mi",
    "limit (256 MiB), which the shipped flags spell out (the old-space size) so that this benchmark runs the pod's heap:",
    "",
  ];
  if (shipped === undefined || defaults === undefined) return [...out, "(3 or 3b not measured in this run.)"];
  out.push(
    "| | shipped flags (3) | Node defaults (3b) |",
    "| --- | ---: | ---: |",
    `| CPU µs/check at ${r.settings["referenceRps"]}/s (median of processes) | ${referenceCpu(r, "plugin-token").toFixed(1)} | ${referenceCpu(r, "plugin-token-node-defaults").toFixed(1)} |`,
    ...shipped.rates.map((x, i) => {
      const y = defaults.rates[i];
      const n = noop?.rates[i];
      return `| p99 ms at ${x.offeredRps}/s (no-op ${n === undefined ? "–" : n.p99Ms.toFixed(2)}) | ${x.p99Ms.toFixed(2)} | ${y === undefined ? "–" : y.p99Ms.toFixed(2)} |`;
    }),
    `| checks/s at saturation (best) | ${shipped.saturation.rps.toFixed(0)} | ${defaults.saturation.rps.toFixed(0)} |`,
    `| RSS after saturation MiB | ${(shipped.saturation.rssBytes / MiB).toFixed(0)} | ${(defaults.saturation.rssBytes / MiB).toFixed(0)} |`,
  );
  return out;
}

/** The idle reading the targets and the sizing use: as shipped, or, in runs before 2026-12-02, the fill process's. */
function idleAsShipped(m: NonNullable<Results["memory"]>): NonNullable<Results["memory"]>["afterGc"] {
  return m.idleShipped ?? m.idleAfterGc;
}

/**
 * The manifests' memory request and limit from this run's memory scenario: at the scale target
 * (caches raised to hold every user) and at the default cache sizes (the RSS curve read where the
 * default-sized caches would be full).
 */
export function memorySizing(r: Results): { atDefaults?: { users: number; rssMiB: number }; idleMiB: number; scaleMiB: number; request: number; limit: number; scaleLimit: number } | undefined {
  const m = r.memory;
  if (m === undefined) return undefined;
  const up = (mib: number, step: number) => Math.ceil(mib / step) * step;
  const idleMiB = idleAsShipped(m).rssBytes / MiB;
  const peak = (curve: ReadonlyArray<{ users: number; rssMiB: number }>, users: number) => Math.max(...curve.filter((p) => p.users <= users).map((p) => p.rssMiB));
  const scaleMiB = Math.max(m.rssFilledBytes, m.afterGc.rssBytes, m.later?.rssBytes ?? 0) / MiB;
  // The larger default cache bounds how many users' entries a default-sized server holds at most.
  const defaultUsers = Math.max(Number(r.settings["defaultTokenCacheEntries"] ?? 0), Number(r.settings["defaultCanViewCacheEntries"] ?? 0));
  const curve = m.rssCurve ?? [];
  const covered = curve.length > 0 && curve.at(-1)!.users >= defaultUsers;
  const atDefaults = covered ? { users: defaultUsers, rssMiB: peak(curve, defaultUsers) } : undefined;
  const base = atDefaults?.rssMiB ?? scaleMiB;
  return { atDefaults, idleMiB, scaleMiB, request: up(base, 32), limit: up(base * 1.25, 64), scaleLimit: up(scaleMiB * 1.25, 64) };
}

function sizing(r: Results): string[] {
  const s = memorySizing(r)!;
  const m = r.memory!;
  return [
    "### Sizing the pod from this run",
    "",
    "The memory scenario raises the caches to hold every user. A replica at the default cache sizes" +
      ` (${Number(r.settings["defaultTokenCacheEntries"]).toLocaleString("en")} verified tokens, ${Number(r.settings["defaultCanViewCacheEntries"]).toLocaleString("en")} can_view entries) holds at most the entries of`,
    `${s.atDefaults === undefined ? "as many users as the larger cache" : `${s.atDefaults.users.toLocaleString("en")} users`}, so its RSS is read off the fill's curve at that point (the highest RSS up to it, before any GC is forced — an upper bound:`,
    "the token cache holds fewer). Request = that RSS rounded up to 32 MiB; limit = 1.25 × it rounded up to 64 MiB.",
    "",
    "| | RSS MiB | request | limit |",
    "| --- | ---: | ---: | ---: |",
    `| idle, ${m.installations.toLocaleString("en")} installations indexed, default cache sizes, after a full GC | ${s.idleMiB.toFixed(0)} | | |`,
    s.atDefaults === undefined
      ? `| default cache sizes | not covered by this run's fill (${m.users.toLocaleString("en")} users) | | |`
      : `| default cache sizes (${s.atDefaults.users.toLocaleString("en")} users on the curve) | ${s.atDefaults.rssMiB.toFixed(0)} | **${s.request}Mi** | **${s.limit}Mi** |`,
    `| scale target (${m.users.toLocaleString("en")} users cached, highest of right after, after GC${m.later === undefined ? "" : `, ${m.later.seconds} s later`}) | ${s.scaleMiB.toFixed(0)} | | ${s.scaleLimit}Mi |`,
    "",
    "deploy/k8s/deployment.yaml and docs/deployment.md's sizing table are set from these rows; with `workers: N`, each",
    "worker holds its own caches and indexes, so multiply by N.",
  ];
}

/** The Deployment's CPU request (cores) and the HorizontalPodAutoscaler's CPU target (share of it), as shipped. */
function shippedCpuScaling(): { requestCores: number; targetShare: number } {
  const manifest = (file: string, kind: string) =>
    parseAllDocuments(readFileSync(resolve(import.meta.dirname, "../deploy/k8s", file), "utf8"))
      .map((d) => d.toJS() as { kind?: string; spec?: any })
      .find((d) => d.kind === kind)!;
  const container = manifest("deployment.yaml", "Deployment").spec.template.spec.containers.find((c: { name: string }) => c.name === "portcullis");
  const request = String(container.resources.requests.cpu);
  const metric = manifest("horizontalpodautoscaler.yaml", "HorizontalPodAutoscaler").spec.metrics.find((m: any) => m.resource?.name === "cpu");
  return { requestCores: request.endsWith("m") ? Number(request.slice(0, -1)) / 1000 : Number(request), targetShare: metric.resource.target.averageUtilization / 100 };
}

/** Checks per second per core from this run's CPU per check, and where the shipped autoscaler adds a replica. */
function cpuSizing(r: Results): string[] {
  const refRps = Number(r.settings["referenceRps"]);
  const { requestCores, targetShare } = shippedCpuScaling();
  const scaleAt = requestCores * targetShare;
  const rows = r.hot
    .filter((h) => h.id !== "noop" && h.id !== "opa" && h.id !== "plugin-token-node-defaults")
    .map((h) => {
      const cpu = referenceCpu(r, h.id);
      const s = h.saturation;
      return `| ${label(h.id)} | ${cpu.toFixed(0)} | ${(1e6 / cpu).toFixed(0)} | ${((scaleAt * 1e6) / cpu).toFixed(0)} | ${s.rps.toFixed(0)} on ${s.cpuCores.toFixed(2)} cores | ${(s.rps / s.cpuCores).toFixed(0)} |`;
    });
  const m = r.memory;
  if (m !== undefined && m.fillCpuSeconds > 0) {
    const cold = (m.fillCpuSeconds * 1e6) / m.users;
    rows.push(`| plugin-proxy PluginToken, cold (the memory scenario's fill: each check a new user's token verified and can_view asked of OpenFGA) | ${cold.toFixed(0)} | ${(1e6 / cold).toFixed(0)} | ${((scaleAt * 1e6) / cold).toFixed(0)} | | |`);
  }
  return [
    "### Sizing CPU from this run",
    "",
    `CPU per check falls as the load rises (a busier server sleeps less per check: Findings), so checks/s per core at ${refRps}/s`,
    `is the conservative figure for a replica, and saturation's the most one core gave. The shipped Deployment requests ${requestCores * 1000}m`,
    `of CPU with no limit, and its HorizontalPodAutoscaler adds replicas at ${(targetShare * 100).toFixed(0)}% of that request: the third column is the`,
    `rate of each kind of check alone at which a replica reaches it (${(scaleAt * 1000).toFixed(0)}m). A replica at a lower rate than ${refRps}/s pays more per check, so`,
    "the autoscaler adds replicas somewhat earlier than the column says.",
    "",
    `| scenario | CPU µs/check at ${refRps}/s | checks/s per core at that cost | checks/s at the autoscaler's target | checks/s at saturation | checks/s per core at saturation |`,
    "| --- | ---: | ---: | ---: | ---: | ---: |",
    ...rows,
    "",
    "docs/deployment.md's CPU section is set from these rows.",
  ];
}

function median(xs: number[]): number {
  const s = xs.toSorted((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
}

function coldSummary(r: Results) {
  const samples = r.cold!.samples;
  return {
    checkMs: median(samples.map((s) => s.checkMs)),
    maxMs: median(samples.map((s) => Math.max(...s.calls.map((c) => c.ms)))),
    sumMs: median(samples.map((s) => s.calls.reduce((a, c) => a + c.ms, 0))),
  };
}

function cold(r: Results): string[] {
  const c = r.cold!;
  const deps = [...new Set(c.samples.flatMap((s) => s.calls.map((x) => x.dependency)))];
  const sum = coldSummary(r);
  return [
    "## Cold paths (scenario 6: real OpenFGA and kube-apiserver)",
    "",
    "`startFundamentWorld()` (test/e2e/fundament-world.ts): a real kube-apiserver and OpenFGA with the demo RBAC; each sample",
    "is a fresh portcullis (fresh ports, so every cache empty) serving a first kube-api-proxy PluginToken check",
    "(`GET …/namespaces/team-a/certificates/web` as alice) over gRPC on 127.0.0.1, after a plugin-assets check has set",
    "up the gRPC connection. Not pinned: the dependencies need the cores. Each remote call's latency is its own",
    "`portcullis:dependency` event.",
    "",
    `| sample | first check ms | ${deps.join(" ms | ")} ms |`,
    `| ---: | ---: | ${deps.map(() => "---:").join(" | ")} |`,
    ...c.samples.map((s, i) => `| ${i + 1} | ${s.checkMs.toFixed(1)} | ${deps.map((d) => s.calls.filter((x) => x.dependency === d).map((x) => x.ms.toFixed(1)).join(" + ") || "–").join(" | ")} |`),
    "",
    `Median first check ${sum.checkMs.toFixed(1)} ms against a median slowest call of ${sum.maxMs.toFixed(1)} ms and a median sum of calls of`,
    `${sum.sumMs.toFixed(1)} ms: the three remote calls run concurrently (the TokenRequest needs only the local installation index,`,
    "so it starts with the others rather than after them).",
    "",
    `100 concurrent identical cold checks (one fresh server, one token): ${c.concurrent.allowed}/${c.concurrent.checks} allowed in ${c.concurrent.wallMs.toFixed(1)} ms,`,
    `upstream calls: ${Object.entries(c.concurrent.upstreamCalls).map(([k, v]) => `${k} ${v}`).join(", ")}.`,
  ];
}

function memory(r: Results): string[] {
  const m = r.memory!;
  const shipped = idleAsShipped(m);
  const mb = (b: number) => `${(b / MiB).toFixed(1)} MiB`;
  const space = (rep: typeof m.afterGc, name: string, size: "usedBytes" | "committedBytes" = "usedBytes") => rep.spaces.find((s) => s.space === name)?.[size] ?? 0;
  return [
    "## Memory",
    "",
    `portcullis on its real ports (OpenFGA SDK, client-node, the PluginInstallation watch) against the wire fakes in another`,
    `process, ${m.installations.toLocaleString("en")} PluginInstallations in the watched index, then ${m.users.toLocaleString("en")} distinct users' PluginTokens on the`,
    "plugin-proxy route, one check each (a verified-token entry and a can_view entry per user), caches sized to hold them all.",
    `${m.allowed.toLocaleString("en")} allowed, ${m.failed} failed, in ${m.fillSeconds.toFixed(1)} s.`,
    "",
    "The idle server is read twice: as shipped (the configuration's default cache sizes, a process of its own), and in the",
    "fill's process before its first check, whose caches, raised to hold every user, preallocate their tables (lru-cache sizes",
    "them by their maximum). VmRSS counts the node binary's pages the process has touched as well: mapped from the file,",
    "shared with every process running the same binary, and dropped by the kernel under memory pressure rather than",
    "swapped or OOM-killed for; the anonymous part is what the process itself allocated.",
    "",
    "| | idle, shipped cache sizes | idle, caches raised | after the checks |",
    "| --- | ---: | ---: | ---: |",
    `| RSS (/proc VmRSS) | | ${mb(m.rssIdleBytes)} | ${mb(m.rssFilledBytes)} |`,
    `| RSS after a full GC | ${mb(shipped.rssBytes)} | ${mb(m.idleAfterGc.rssBytes)} | ${mb(m.afterGc.rssBytes)} |`,
    `| of which anonymous | ${mb(shipped.rssAnonBytes)} | ${mb(m.idleAfterGc.rssAnonBytes)} | ${mb(m.afterGc.rssAnonBytes)} |`,
    `| of which mapped files (the node binary) | ${mb(shipped.rssFileBytes)} | ${mb(m.idleAfterGc.rssFileBytes)} | ${mb(m.afterGc.rssFileBytes)} |`,
    `| V8 heap used / committed | ${mb(shipped.heapUsedBytes)} / ${mb(shipped.heapTotalBytes)} | ${mb(m.idleAfterGc.heapUsedBytes)} / ${mb(m.idleAfterGc.heapTotalBytes)} | ${mb(m.afterGc.heapUsedBytes)} / ${mb(m.afterGc.heapTotalBytes)} |`,
    `| young generation committed | ${mb(space(shipped, "new_space", "committedBytes"))} | ${mb(space(m.idleAfterGc, "new_space", "committedBytes"))} | ${mb(space(m.afterGc, "new_space", "committedBytes"))} |`,
    `| old space used | ${mb(space(shipped, "old_space"))} | ${mb(space(m.idleAfterGc, "old_space"))} | ${mb(space(m.afterGc, "old_space"))} |`,
    `| large objects | ${mb(space(shipped, "large_object_space"))} | ${mb(space(m.idleAfterGc, "large_object_space"))} | ${mb(space(m.afterGc, "large_object_space"))} |`,
    `| external (Buffers, native) | ${mb(shipped.externalBytes)} | ${mb(m.idleAfterGc.externalBytes)} | ${mb(m.afterGc.externalBytes)} |`,
    ...(m.later === undefined
      ? []
      : [`| ${m.later.seconds} s after the GC, idle (no GC forced${m.idleShippedQuiet === undefined ? "" : "; the idle GC has run"}): RSS / V8 heap used / committed | | | ${mb(m.later.rssBytes)} / ${mb(m.later.heapUsedBytes)} / ${mb(m.later.heapTotalBytes)} |`]),
    ...(m.idleShippedQuiet === undefined
      ? []
      : [
          `| idle as shipped, ${m.idleShippedQuiet.seconds} s without a Check (the idle GC has run), after a full GC: RSS / anonymous / V8 heap used / committed | ${mb(m.idleShippedQuiet.rssBytes)} / ${mb(m.idleShippedQuiet.rssAnonBytes)} / ${mb(m.idleShippedQuiet.heapUsedBytes)} / ${mb(m.idleShippedQuiet.heapTotalBytes)} | | |`,
          "",
          "The idle GC (src/server/idle-gc.ts, `idleGc`): once no Check has arrived for 30 s and the V8 heap has grown by 8 MiB",
          "since the last one, one memory-reducing collection compacts the heap and shrinks its young generation. The full GC the",
          "benchmark forces is a regular one: it frees the garbage but keeps the pages the heap grew into.",
        ]),
    "",
    `Per cached user: ${((m.afterGc.heapUsedBytes - m.idleAfterGc.heapUsedBytes) / m.users).toFixed(0)} bytes of V8 heap.`,
    ...(m.rssCurve === undefined || m.rssCurve.length === 0
      ? []
      : [
          "",
          "RSS and V8 heap used as the users are checked (no GC forced; heap from the admin port's /metrics):",
          "",
          "![RSS over the memory scenario's fill](rss-over-fill.svg)",
          "",
          "Chart: [bench/rss-over-fill.svg](rss-over-fill.svg).",
        ]),
    ...(r.moduleMemory === undefined
      ? []
      : [
          "",
          "Before any data — each dependency loaded in turn, each figure from fresh processes, after a full GC (bench/module-memory.ts).",
          "Shipped: Node's compile cache warm (NODE_COMPILE_CACHE, filled at image build). Cold: no cache, so Node strips the .ts",
          "sources itself with amaro. Floor: a `node -e` process with no TypeScript at all, loading only what the cell says.",
          "",
          "| loaded | RSS MiB | Δ RSS | heap used MiB | heap committed MiB | RSS MiB, cold | floor RSS MiB |",
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
          ...r.moduleMemory.map(
            (x, i, all) =>
              `| ${x.step} | ${(x.rssBytes / MiB).toFixed(1)} | ${i === 0 ? "" : `${x.rssBytes >= all[i - 1]!.rssBytes ? "+" : "−"}${(Math.abs(x.rssBytes - all[i - 1]!.rssBytes) / MiB).toFixed(1)}`} | ${(x.heapUsedBytes / MiB).toFixed(1)} | ${(x.heapTotalBytes / MiB).toFixed(1)} | ${x.cold === undefined ? "" : (x.cold.rssBytes / MiB).toFixed(1)} | ${x.alone === undefined ? "" : `${(x.alone.rssBytes / MiB).toFixed(1)} (${x.alone.what})`}${x.unbundled === undefined ? "" : `; the package root, unbundled: ${(x.unbundled.rssBytes / MiB).toFixed(1)}`} |`,
          ),
        ]),
  ];
}

function findings(r: Results, compared: ReturnType<typeof comparedWithPrevious>): string[] {
  const out: string[] = ["## Findings", ""];
  const noop = ceiling(r);
  const plugin = r.hot.find((h) => h.id === "plugin-token");
  const refRps = Number(r.settings["referenceRps"]);
  if (noop !== undefined) {
    // The cost of one no-op check at each load level this run measured it at.
    const levels = [
      { at: `${refRps}/s`, cpu: referenceCpu(r, "noop") },
      ...noop.rates.map((x) => ({ at: `${x.offeredRps}/s`, cpu: x.cpuUsPerRequest })),
      { at: `saturation (${noop.saturation.rps.toFixed(0)}/s)`, cpu: noop.saturation.cpuUsPerRequest },
    ];
    const ps = plugin === undefined ? [] : [{ at: `${refRps}/s`, cpu: referenceCpu(r, "plugin-token") }, ...plugin.rates.map((x) => ({ at: `${x.offeredRps}/s`, cpu: x.cpuUsPerRequest })), { at: `saturation (${plugin.saturation.rps.toFixed(0)}/s)`, cpu: plugin.saturation.cpuUsPerRequest }];
    out.push(
      "- **Why the figures moved between machines (0.62× on one, 0.48× on another of the same kind).** Saturation measures",
      "  the load generator and the load level as much as the server:",
      `  - ghz has one core. At the no-op's "saturation" here ghz used ${noop.saturation.ghzCores.toFixed(2)} cores and the no-op ${noop.saturation.cpuCores.toFixed(2)}:` +
        (noop.saturation.ghzCores >= 0.9 && noop.saturation.cpuCores < 0.9 ? " the no-op's checks/s is ghz's ceiling, and moves with ghz's speed on each machine." : " this run, the server was the limit."),
      `  - CPU per check depends on the load: the no-op cost ${levels.map((l) => `${l.cpu.toFixed(0)} µs at ${l.at}`).join(", ")}.` +
        (ps.length === 0 ? "" : ` Scenario 3: ${ps.map((l) => `${l.cpu.toFixed(0)} µs at ${l.at}`).join(", ")}.`),
      "    The busier the event loop, the less often it sleeps per check (\"Sleeping is charged to CPU per check\", below) and the",
      "    more checks share each HTTP/2 frame, `writev` and `epoll_wait`. At saturation the",
      "    no-op runs at ghz's rate and portcullis at its own, so their CPU per check are taken at different load levels: the",
      "    saturation capacity ratio is not like for like, and shifts with how fast ghz is on the machine. The targets now use",
      `    CPU per check with every server at the same offered rate (${refRps}/s).`,
      `  - Other work on the VM: over the reference-rate runs, steal on core 1 reached ${pct(Math.max(...r.processes.map((p) => p.reference.machine.serverCoreSteal)))}, other processes' work on core 1`,
      `    ${pct(Math.max(...r.processes.map((p) => p.reference.machine.serverCoreForeign)))} and on ghz's core ${pct(Math.max(...r.processes.map((p) => p.reference.machine.loadCoreForeign)))} (max over processes); the calibration loop ranged`,
      `    ${Math.min(...r.processes.map((p) => p.calibrationMs)).toFixed(0)}–${Math.max(...r.processes.map((p) => p.calibrationMs)).toFixed(0)} ms. Work sharing a core raises the server's CPU per check too (caches and TLBs`,
      "    refilled after every switch), not only its latency; a run with much other work or steal is not comparable to a quiet one,",
      "    which is why every process's share is recorded and each scenario is compared with the no-op run beside it.",
      "  - CPU frequency: these VMs expose no cpufreq; /proc/cpuinfo's MHz is nominal. The calibration loop is the check.",
    );
  }
  const own = r.hotPath?.find((x) => x.scenario === "plugin-token");
  const base = r.hotPath?.find((x) => x.scenario === "noop");
  const ratios = referenceRatios(r, "plugin-token");
  const cost = sleepCost(r);
  if (cost !== undefined && noop !== undefined && plugin !== undefined) {
    const [n, p] = [referenceSleeps(r, "noop"), referenceSleeps(r, "plugin-token")];
    const [ns, ps] = [noop.saturation, plugin.saturation];
    out.push(
      `- **Sleeping is charged to CPU per check.** A server that runs out of work sleeps (Node's main thread in \`epoll_wait\`), and on`,
      `  these VMs a sleep and wake-up costs more CPU than a check: ~${cost.perSleepUs.toFixed(0)} µs per sleep of the no-op's main thread, fitted over its`,
      `  ${cost.points} runs in this one (CPU per check against sleeps per check, R² ${cost.r2.toFixed(2)}; ${cost.perCheckUs.toFixed(0)} µs per check with no sleep). The fit also`,
      "  takes in that fewer checks share each frame and syscall where the server sleeps more: read it as the order of the cost.",
      `  At ${refRps}/s the no-op's main thread slept ${n.toFixed(2)} times per check and scenario 3's ${p.toFixed(2)}: with more work per check, scenario 3 was busy nearly`,
      `  all the time, so the reference-rate figure charges the no-op ~${((n - p) * cost.perSleepUs).toFixed(0)} µs of waking up that scenario 3 did not pay. The`,
      "  ratio at the reference rate therefore flatters scenario 3, and every scenario busier than the no-op. At saturation, where",
      `  neither sleeps (${ns.switches.mainSleeps.toFixed(2)} and ${ps.switches.mainSleeps.toFixed(2)} per check), CPU per check is ${ns.cpuUsPerRequest.toFixed(0)} vs ${ps.cpuUsPerRequest.toFixed(0)} µs = ${(ns.cpuUsPerRequest / ps.cpuUsPerRequest).toFixed(2)}× the no-op's capacity:`,
      "  like for like on sleeping but not on sharing: the no-op runs faster there, so more of its checks share each frame and",
      "  syscall, and this ratio understates scenario 3 as the reference rate's overstates it. The capacity ratio lies between the two.",
      "  The price of a wake-up belongs to the VM (a halt and a wake-up through the hypervisor), not to either server: it moves",
      "  between hosts and over a day, and every fixed-rate figure moves with it, which is most of why the same code measured",
      "  0.62× and 0.48× on two machines of one kind.",
    );
  }
  if (ratios.length > 0) {
    const p = median(ratios.map((x) => x.cpuUs));
    const n = median(ratios.map((x) => x.noopCpuUs));
    const saturated = noop !== undefined && plugin !== undefined ? plugin.saturation.cpuUsPerRequest - noop.saturation.cpuUsPerRequest : NaN;
    out.push(
      `- **Scenario 3 costs ${(p - n).toFixed(0)} µs more CPU per check than the no-op at ${refRps}/s** (${p.toFixed(0)} vs ${n.toFixed(0)} µs)` +
        (Number.isFinite(saturated) ? `, ${saturated.toFixed(0)} µs more at saturation.` : ".") +
        (own !== undefined && base !== undefined
          ? ` Portcullis's own work, measured without gRPC in a tight loop (bench/hot-path.ts), is ${(own.cpuUsPerCheck - base.cpuUsPerCheck).toFixed(0)} µs of it.`
          : ""),
      "  The rest is not idleness (scenario 3 barely sleeps at the reference rate, above): it is the same work run between two",
      "  checks' worth of grpc-js, HTTP/2 and syscalls, which evict the code and data a check touches from the caches and",
      "  predictors, so in a server each piece costs several times its tight-loop figure. `bench/hot-path.ts --pace-us 333`",
      "  shows the same inflation for a thread asleep between checks (the no-op's case at the reference rate). No single piece",
      "  holds it; only less work and less memory touched per check lowers it. Profiles: the one below (at saturation) and",
      "  bench/hot-path.ts.",
    );
  }
  const assets = referenceRatios(r, "plugin-assets");
  if (ratios.length > 0 && assets.length > 0) {
    // Each scenario above the no-op processes run beside it (the no-op moves between processes).
    const n = median(ratios.map((x) => x.noopCpuUs));
    const above = (xs: typeof ratios) => median(xs.map((x) => x.cpuUs - x.noopCpuUs));
    const [plugin3, assets2] = [above(ratios), above(assets)];
    const budget = n / CAPACITY_TARGET - n;
    out.push(
      `- **What ${CAPACITY_TARGET}× leaves for the gates.** At ${refRps}/s, ${CAPACITY_TARGET}× the no-op's capacity allows scenario 3 ${budget.toFixed(0)} µs of CPU per check above`,
      `  the no-op's ${n.toFixed(0)} µs. Scenario 2 (plugin-assets) runs the same server and check path (the CheckRequest read into a`,
      "  request, the deadline, the decision's metrics, the response) with a policy that only matches a path and drops two",
      `  headers, and it cost ${assets2.toFixed(0)} µs above the no-op (${median(assets.map((x) => x.capacityRatio)).toFixed(2)}×): ${assets2 >= budget ? `the whole budget and ${(assets2 - budget).toFixed(0)} µs more, before any gate` : `${(budget - assets2).toFixed(0)} µs of the budget left for the gates`}.`,
      `  Scenario 3's gates cost ${(plugin3 - assets2).toFixed(0)} µs above scenario 2 (each figure a median over the scenario's processes, each`,
      "  against the no-op beside it): verifying the PluginToken (a SHA-256 of it finds it in the verified-token cache), the",
      "  deny-list, the installation index, OpenFGA's, the review's and the TokenRequest's caches, reading the Kubernetes",
      "  request, the credential swap and the audit line, each one a gate or an obligation of FUN-17 §11. Meeting the",
      "  target at this machine's price per check would take the check path near the no-op's and the gates at a fraction of",
      "  their tight-loop cost, not the removal of any one piece.",
    );
  }
  const half = rateAt(r, plugin, 0.5);
  if (half !== undefined && plugin !== undefined) {
    const headroom = plugin.saturation.rps / Number(half.offeredRps);
    out.push(
      `- **The p99 target needs capacity to spare.** Half the no-op's saturation rate is ${half.offeredRps}/s here; scenario 3's own best saturation run reached`,
      `  ${plugin.saturation.rps.toFixed(0)}/s, ${headroom.toFixed(2)}× that rate, and it answered ${half.rps.toFixed(0)}/s of it. ${headroom < 1.2 ? "A server offered about its capacity or more queues the excess, and its p99 is the queue's, not a check's: this target is a capacity target in disguise here." : "It had capacity to spare, so its p99 is a check's and the GC's, not a queue's."}`,
      "  Where scenario 3's capacity is below half the no-op's (the saturation ratio under 0.5), the target cannot be met",
      "  by the tail alone; on a machine whose no-op saturates lower (ghz's ceiling, a slower core) the same code meets it.",
    );
  }
  const previous = r.previous;
  if (previous !== undefined) {
    const show = (name: string, digits: number) => {
      const m = compared.get(name);
      return m === undefined ? "–" : `${m.before.toFixed(digits)} → ${m.after.toFixed(digits)}`;
    };
    const memoryMoves = [...compared].filter(([name]) => name.startsWith("memory: ")).map(([, m]) => Math.abs(m.change));
    const scenario3 = HOT_SCENARIOS.find((h) => h.id === "plugin-token")!.short;
    out.push(
      `- **Between this run and the previous full run** (${previous.date}; "Against the previous full run" below): the core 1 calibration loop ${show(CALIBRATION, 0)} ms,`,
      `  the no-op's CPU per check at ${refRps}/s ${show(noopCpuAt(refRps), 0)} µs. Scenario 3 × the no-op's capacity at ${refRps}/s ${show(capacityAt(scenario3, refRps), 2)},`,
      `  by throughput at saturation ${show(saturationRatio(scenario3), 2)}; its p99 ratio at half the no-op's saturation ${show(P99_AT_HALF, 2)}.` +
        (memoryMoves.length === 0 ? "" : ` The memory readings moved by at most ${pct(Math.max(...memoryMoves))}.`),
      "  A CPU ratio that moves between runs of the same code by more than the spread within one run is a property of the",
      "  machine as much as of portcullis: judge a change to the code by runs made side by side on one machine.",
    );
  }
  out.push("- **The tail**: mostly full GCs, not the checks ([FINDINGS.md](FINDINGS.md#the-tail)).");
  if (r.memory !== undefined) {
    const m = r.memory;
    const shipped = idleAsShipped(m);
    const steps = r.moduleMemory;
    const clientNode = steps?.findIndex((x) => x.step.includes("client-node")) ?? -1;
    const baseline = steps?.findLast((x) => x.memoryReduced !== true);
    out.push(
      `- **Memory.**` +
        (baseline === undefined ? "" : ` Before holding any data the process is ${(baseline.rssBytes / MiB).toFixed(0)} MiB RSS`) +
        (steps !== undefined && clientNode > 0 ? `, of which @kubernetes/client-node adds ${((steps[clientNode]!.rssBytes - steps[clientNode - 1]!.rssBytes) / MiB).toFixed(0)} MiB.` : "."),
      `  With ${m.installations.toLocaleString("en")} installations indexed and idle, as shipped, it is ${(shipped.rssBytes / MiB).toFixed(0)} MiB after a full GC` +
        (m.idleShippedQuiet === undefined ? "" : ` (${(m.idleShippedQuiet.rssBytes / MiB).toFixed(0)} MiB once quiet for ${m.idleShippedQuiet.seconds} s: the idle GC)`) +
        `, ${(shipped.rssFileBytes / MiB).toFixed(0)} MiB of it the node`,
      `  binary's pages (mapped, not allocated: "Memory" below). Each cached user costs`,
      `  ~${((m.afterGc.heapUsedBytes - m.idleAfterGc.heapUsedBytes) / m.users).toFixed(0)} bytes of live heap; after the fill of ${m.users.toLocaleString("en")} cold checks V8 has committed ${(m.afterGc.heapTotalBytes / MiB).toFixed(0)} MiB`,
      `  for ${(m.afterGc.heapUsedBytes / MiB).toFixed(0)} MiB live. The RSS curve over the fill is charted below.`,
    );
    const bare = steps?.[0]?.alone;
    const clientNodeStep = steps?.find((x) => x.unbundled !== undefined);
    if (bare !== undefined && clientNodeStep?.alone !== undefined && clientNodeStep.unbundled !== undefined) {
      const { alone, unbundled } = clientNodeStep;
      out.push(
        `- **The memory targets' floor.** Bare Node holds ${(bare.rssBytes / MiB).toFixed(0)} MiB RSS after a full GC. @kubernetes/client-node, the chosen ` +
          `Kubernetes client, cannot be imported piecemeal: its KubeConfig (dist/config.js) and every generated API class import ` +
          `dist/gen/index.js, which loads all of its 1,033 modules, so a \`node -e\` process that imports the package and nothing else ` +
          `holds ${(unbundled.rssBytes / MiB).toFixed(0)} MiB, above the idle target (100 MB = ${(100e6 / MiB).toFixed(0)} MiB) before gRPC, the Envoy protos, ` +
          `OpenFGA's SDK or any data. portcullis therefore loads a bundle of the parts it uses (src/kube-fleet/kubernetes-client.ts, built by ` +
          `esbuild at install): alone, with undici and client-node's other dependencies, which stay packages of their own, ${(alone.rssBytes / MiB).toFixed(0)} MiB.`,
      );
    }
    const reduced = steps?.find((x) => x.memoryReduced === true);
    const quiet = m.idleShippedQuiet;
    if (reduced?.alone !== undefined && quiet !== undefined) {
      const target = 100e6 / MiB;
      const givenStack = reduced.alone.rssBytes / MiB;
      out.push(
        `- **What the idle target leaves for portcullis.** The module table's last row: everything portcullis loads, after the idle GC's ` +
          `memory-reducing collection, with no data and no server started, holds ${(reduced.rssBytes / MiB).toFixed(1)} MiB RSS; the stack the project ` +
          `was given, alone, ${givenStack.toFixed(1)} MiB: ${Math.abs(givenStack - target).toFixed(1)} MiB ${givenStack > target ? "above" : "below"} ` +
          `the idle target (${target.toFixed(1)} MiB). Both are read within a second of loading, before the allocator's decay (jemalloc's, ~10 s) ` +
          `has given back the pages freed while loading, so they overstate a settled process; the settled figure is the quiet idle server's, ` +
          `${(quiet.rssBytes / MiB).toFixed(1)} MiB with ${m.installations.toLocaleString("en")} installations indexed and the server running.`,
      );
    }
  }
  return out;
}

export type { HotResult, LoadResult };
