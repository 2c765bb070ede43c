/**
 * What /readyz answers, and with `?verbose` why: one line per check, `[+]` or `[-]`, then the verdict.
 *
 * A process is ready while it is not shutting down and every watched index has synced at least once
 * (Ports.ready), save a cluster whose first list failed while another cluster's synced
 * (InstallationIndex.ready). An index that loses its watch later does not take the replica out of
 * service either: its own cluster's checks answer 503 while the other clusters are served, so one
 * API server's outage cannot empty the whole fleet. Such an index is listed `[-]` under a ready verdict.
 * Dependencies that do not gate readiness at all (the OpenFGA store's resolution: a check answers
 * 503 while it is unresolved) are listed for the operator, marked as such, and so are the event
 * sources that keep the caches fresh (a cache whose source is not synced falls back to its short TTLs).
 *
 * With `workers: N` the primary asks each worker over IPC (workers.ts) and is ready only when all N
 * are listening and ready; each worker's lines carry its pid.
 */
import type { FeedState } from "../cache/freshness.ts";

export interface ReadinessCheck {
  /** e.g. `index plugininstallations cluster=prod-1`, `openfga store`, `shutdown`. */
  readonly name: string;
  readonly ok: boolean;
  /** In words: `synced, 12 objects`, `unsynced (synced before: its cluster's checks answer 503)`. */
  readonly state: string;
  /** False for a line that informs and does not take part in the verdict. */
  readonly gates: boolean;
}

export interface Readiness {
  readonly ready: boolean;
  readonly checks: readonly ReadinessCheck[];
}

/** One watched index of one cluster, as Ports.indexSizes reports it. */
export interface IndexState {
  readonly index: string;
  readonly clusterId: string;
  readonly size: number;
  /** Its watch is healthy now: lookups are answered. */
  readonly synced: boolean;
  /** Synced at least once (readiness waits for this); taken as `synced` when the index does not say. */
  readonly hasSynced?: boolean;
  /** When its list and watch last succeeded, where the index says. */
  readonly lastSyncedAt?: Date | undefined;
  /** Its first list has been attempted (where the index says): a failed first list then gates no longer, once another cluster synced. */
  readonly attempted?: boolean;
  /** False for a cluster registered while the process served: its checks answer 503 until it syncs, the replica stays in service. */
  readonly gatesReadiness?: boolean;
  /** What a broken watch after a sync means, where it is not "this cluster's checks answer 503" (the cluster registry). */
  readonly outage?: string;
  /**
   * The cluster registry's cluster ids claimed by more than one Secret, each served by none of them:
   * listed one line each, gating nothing (one Secret must not take every replica out of service).
   */
  readonly conflicts?: ReadonlyArray<{ readonly clusterId: string; readonly secrets: readonly string[] }>;
}

/** A dependency's state that does not gate readiness. */
export interface DependencyState {
  readonly name: string;
  readonly ok: boolean;
  readonly state: string;
}

export interface ProcessState {
  readonly shuttingDown: boolean;
  /** Health.serving: the verdict the gRPC health service gives too, so both always agree. */
  readonly serving: boolean;
  readonly indexes: readonly IndexState[];
  readonly dependencies: readonly DependencyState[];
  /** The event sources keeping the caches fresh (issue 45): shown, gating nothing (a cache falls back to its short TTLs). */
  readonly changeFeeds?: readonly FeedState[];
}

export function processReadiness(state: ProcessState): Readiness {
  const checks: ReadinessCheck[] = [
    { name: "shutdown", ok: !state.shuttingDown, state: state.shuttingDown ? "begun: not serving" : "not begun", gates: true },
    ...state.indexes.flatMap((i) => [
      indexCheck(i, state.indexes.some((other) => other.index === i.index && (other.hasSynced ?? other.synced))),
      ...(i.conflicts ?? []).map(conflictCheck),
    ]),
    ...state.dependencies.map((d) => ({ ...d, gates: false })),
    ...(state.changeFeeds ?? []).map(changeFeedCheck),
  ];
  return { ready: state.serving, checks };
}

function indexCheck(i: IndexState, anotherClusterSynced: boolean): ReadinessCheck {
  const name = `index ${i.index} cluster=${i.clusterId}`;
  const objects = `${i.size} object${i.size === 1 ? "" : "s"}`;
  const last = i.lastSyncedAt === undefined ? "" : `, last synced ${i.lastSyncedAt.toISOString()}`;
  if (i.synced) return { name, ok: true, state: `synced, ${objects}${last}`, gates: true };
  if (i.hasSynced ?? false) {
    return { name, ok: false, state: `unsynced${last || ", synced before"}: ${i.outage ?? "this cluster's checks answer 503 until its watch recovers"}`, gates: false };
  }
  if (i.gatesReadiness === false) return { name, ok: false, state: "not synced yet, registered while serving: this cluster's checks answer 503 until it syncs", gates: false };
  if ((i.attempted ?? false) && anotherClusterSynced) {
    return { name, ok: false, state: "never synced, its first list failed: this cluster's checks answer 503 until it syncs", gates: false };
  }
  return { name, ok: false, state: "never synced: not ready until it has", gates: true };
}

function changeFeedCheck(f: FeedState): ReadinessCheck {
  const name = `event source ${f.source} scope=${f.scope}`;
  if (f.synced) return { name, ok: true, state: `synced, every change applied up to ${(f.lagSeconds ?? 0).toFixed(1)} s ago: answers kept up to the safety-net TTL`, gates: false };
  return { name, ok: false, state: `not synced${f.detail === undefined ? "" : ` (${f.detail})`}: answers on the short TTLs`, gates: false };
}

function conflictCheck(conflict: { readonly clusterId: string; readonly secrets: readonly string[] }): ReadinessCheck {
  return {
    name: `cluster id conflict cluster=${conflict.clusterId}`,
    ok: false,
    state: `claimed by ${conflict.secrets.length} cluster Secrets (${conflict.secrets.join(", ")}): served by none of them, its checks answer 404 unknown-cluster until all but one are deleted`,
    gates: false,
  };
}

/** One worker's answer, or undefined when it did not answer in time. */
export interface WorkerReadiness {
  readonly pid: number | undefined;
  readonly readiness: Readiness | undefined;
}

/** The primary's verdict: every one of the `expected` workers listening and ready. */
export function workersReadiness(expected: number, workers: readonly WorkerReadiness[]): Readiness {
  const count: ReadinessCheck = {
    name: "workers",
    ok: workers.length === expected,
    state: `${workers.length} of ${expected} listening`,
    gates: true,
  };
  const checks: ReadinessCheck[] = [count];
  for (const w of workers) {
    const prefix = `worker ${w.pid ?? "?"} `;
    if (w.readiness === undefined) checks.push({ name: `${prefix}answer`, ok: false, state: "no answer in time", gates: true });
    else for (const c of w.readiness.checks) checks.push({ ...c, name: prefix + c.name });
  }
  const ready = count.ok && workers.every((w) => w.readiness?.ready === true);
  return { ready, checks };
}

/** The body of /readyz: the verdict alone, or every check's line before it. */
export function renderReadiness(readiness: Readiness, verbose: boolean): string {
  const verdict = readiness.ready ? "ready\n" : "not ready\n";
  if (!verbose) return verdict;
  const lines = readiness.checks.map((c) => `[${c.ok ? "+" : "-"}]${c.name}: ${c.state}${c.gates ? "" : " (does not gate readiness)"}`);
  return `${lines.join("\n")}\n${verdict}`;
}
