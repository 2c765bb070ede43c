/** Per-fault figures from the recorded answers and heartbeats: pure, so the suite's report reads them in one place. */
import type { Answer } from "./load.ts";
import { isCorrect, isForbiddenAllow } from "./oracle.ts";

export interface FaultFigures {
  readonly fault: string;
  readonly answers: number;
  readonly byKind: Record<string, number>;
  /** 503s by their message (which dependency), failed calls by their gRPC status. */
  readonly byDetail: Record<string, number>;
  readonly forbiddenAllows: number;
  /** Denials other than 503 where the world says allowed or another reason (fail-closed, but wrong). */
  readonly wrongDenials: number;
  readonly unavailableWithoutRetryAfter: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** From the heal to the last wrong answer's send time (0: right at once); undefined: never recovered. */
  readonly recoveryMs: number | undefined;
  readonly maxStallMs: number;
  /** The control's (an idle Node process's) longest heartbeat in the same window: the machine's share of any stall. */
  readonly machineStallMs: number;
  /** portcullis's event-loop thread during the fault: time on a CPU, and time runnable but waiting for one. */
  readonly loopCpuMs: number;
  readonly loopRunQueueMs: number;
  readonly rssBeforeMb: number;
  readonly rssAfterMb: number;
}

/** Answers that are not a denial by reason: an allow, a 503, or no answer at all. */
const NOT_DENIALS: ReadonlySet<string> = new Set(["allowed", "dependency-unavailable", "timeout", "grpc-error"]);

export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** Answers to checks sent in [from, to). */
export function answersBetween(answers: readonly Answer[], from: number, to: number): Answer[] {
  return answers.filter((a) => a.sentAt >= from && a.sentAt < to);
}

/**
 * Recovered once every check sent during `settleMs` after some instant is answered correctly;
 * recovery time is from the heal to the last incorrect answer's send time before that quiet stretch.
 */
export function recoveryAfter(answers: readonly Answer[], healAt: number, settleMs: number, now: number): number | undefined {
  const after = answers.filter((a) => a.sentAt >= healAt);
  const lastWrong = after.reduce((last, a) => (isCorrect(a.expected, a.kind) ? last : Math.max(last, a.sentAt)), healAt);
  const settledUntil = after.reduce((latest, a) => Math.max(latest, a.sentAt), healAt);
  if (settledUntil - lastWrong < settleMs || now - lastWrong < settleMs) return undefined;
  return lastWrong - healAt;
}

export function figures(
  fault: string,
  answers: readonly Answer[],
  extra: {
    recoveryMs: number | undefined;
    maxStallMs: number;
    machineStallMs: number;
    loopCpuMs: number;
    loopRunQueueMs: number;
    rssBeforeMb: number;
    rssAfterMb: number;
  },
): FaultFigures {
  const byKind: Record<string, number> = {};
  const byDetail: Record<string, number> = {};
  for (const a of answers) {
    byKind[a.kind] = (byKind[a.kind] ?? 0) + 1;
    if (a.detail !== undefined) byDetail[a.detail] = (byDetail[a.detail] ?? 0) + 1;
  }
  const latencies = answers.map((a) => a.latencyMs).sort((x, y) => x - y);
  return {
    fault,
    answers: answers.length,
    byKind,
    byDetail,
    forbiddenAllows: answers.filter((a) => isForbiddenAllow(a.expected, a.kind)).length,
    wrongDenials: answers.filter((a) => !NOT_DENIALS.has(a.kind) && !isCorrect(a.expected, a.kind)).length,
    unavailableWithoutRetryAfter: answers.filter((a) => a.kind === "dependency-unavailable" && !a.retryAfter).length,
    p99Ms: quantile(latencies, 0.99),
    maxMs: latencies.at(-1) ?? Number.NaN,
    ...extra,
  };
}

export function formatFigures(f: FaultFigures): string {
  const kinds = Object.entries(f.byKind)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
  const recovery = f.recoveryMs === undefined ? "none" : `${(f.recoveryMs / 1000).toFixed(1)} s`;
  const details = Object.entries(f.byDetail)
    .map(([m, n]) => `${m} ${n}`)
    .join(", ");
  return `${f.fault}: ${f.answers} answers (${kinds}${details === "" ? "" : `; ${details}`}); wrong allows ${f.forbiddenAllows}, wrong denials ${f.wrongDenials}, 503s without retry-after ${f.unavailableWithoutRetryAfter}; p99 ${f.p99Ms.toFixed(0)} ms, max ${f.maxMs.toFixed(0)} ms; recovery ${recovery}; max stall ${f.maxStallMs.toFixed(0)} ms (idle control ${f.machineStallMs.toFixed(0)} ms; loop thread on CPU ${f.loopCpuMs.toFixed(0)} ms, waiting for one ${f.loopRunQueueMs.toFixed(0)} ms); RSS ${f.rssBeforeMb.toFixed(0)} → ${f.rssAfterMb.toFixed(0)} MB`;
}
