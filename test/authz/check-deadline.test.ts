/**
 * CheckDeadlines: one timer for every check of a checker (all have the same time), armed for the
 * oldest check still waiting. Each check is still answered exactly once: by its decision, or by the
 * deadline's DependencyUnavailable at its own deadline — not before, and not again.
 */
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createChecker } from "../../src/authz/check.ts";
import { CheckDeadlines } from "../../src/authz/check-deadline.ts";
import { allow, type Decision } from "../../src/authz/decision.ts";
import type { Policy } from "../../src/authz/policy.ts";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import type { CheckRequestMessage } from "../../src/envoy/check-request.ts";
import type { CheckResponseMessage } from "../../src/envoy/check-response-message.ts";
import { envoyCheckRequest } from "../support/envoy.ts";

const MS = 800;

function pending<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Starts a check on `deadlines` now; its answers, in order. */
function started<T>(deadlines: CheckDeadlines, work: Promise<T>): Array<{ ok: boolean; outcome: unknown; atMs: number }> {
  const answers: Array<{ ok: boolean; outcome: unknown; atMs: number }> = [];
  const t0 = process.hrtime.bigint();
  deadlines.settle(work, t0, (ok, outcome) => answers.push({ ok, outcome, atMs: Number(process.hrtime.bigint() - t0) / 1e6 }));
  return answers;
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("CheckDeadlines", () => {
  it("answers a decided check once, with its value or its error, and never with the deadline after", async () => {
    const deadlines = new CheckDeadlines(MS);
    const allowed = pending<string>();
    const failed = pending<string>();
    const a = started(deadlines, allowed.promise);
    const b = started(deadlines, failed.promise);
    allowed.resolve("allow");
    failed.reject(new Error("boom"));
    await vi.advanceTimersByTimeAsync(0);
    expect(a).toMatchObject([{ ok: true, outcome: "allow" }]);
    expect(b).toMatchObject([{ ok: false, outcome: new Error("boom") }]);
    await vi.advanceTimersByTimeAsync(MS * 3);
    expect(a).toHaveLength(1);
    expect(b).toHaveLength(1);
  });

  it("denies a check that never decides at its deadline, not before, and ignores a decision after it", async () => {
    const deadlines = new CheckDeadlines(MS);
    const never = pending<string>();
    const answers = started(deadlines, never.promise);
    await vi.advanceTimersByTimeAsync(MS - 1);
    expect(answers).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(answers).toHaveLength(1);
    expect(answers[0]!.ok).toBe(false);
    expect(answers[0]!.outcome).toBeInstanceOf(DependencyUnavailable);
    never.resolve("late");
    await vi.advanceTimersByTimeAsync(0);
    expect(answers).toHaveLength(1);
  });

  it("gives each check its own deadline, counted from its start, whatever the others did", async () => {
    const deadlines = new CheckDeadlines(MS);
    const first = started(deadlines, pending<string>().promise);
    await vi.advanceTimersByTimeAsync(100);
    const quick = pending<string>();
    started(deadlines, quick.promise);
    quick.resolve("done");
    await vi.advanceTimersByTimeAsync(200);
    const third = started(deadlines, pending<string>().promise);
    await vi.advanceTimersByTimeAsync(MS - 300);
    expect(first).toHaveLength(1);
    expect(first[0]!.atMs).toBe(MS);
    expect(third).toEqual([]);
    await vi.advanceTimersByTimeAsync(299);
    expect(third).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(third).toHaveLength(1);
    expect(third[0]!.atMs).toBe(MS);
  });

  it("does not deny a check a few ms early because an older one's deadline fired just before", async () => {
    const deadlines = new CheckDeadlines(MS);
    const older = started(deadlines, pending<string>().promise);
    await vi.advanceTimersByTimeAsync(30);
    const younger = started(deadlines, pending<string>().promise);
    await vi.advanceTimersByTimeAsync(MS - 30);
    expect(older).toHaveLength(1);
    expect(younger).toEqual([]);
    await vi.advanceTimersByTimeAsync(29);
    expect(younger).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(younger.map((a) => a.atMs)).toEqual([MS]);
  });

  it("keeps every deadline through thousands of checks answered out of order", async () => {
    const deadlines = new CheckDeadlines(MS);
    const works = Array.from({ length: 5000 }, () => pending<number>());
    const answers = works.map((w) => started(deadlines, w.promise));
    // Every other one decides, from the back; the rest never do.
    for (let i = works.length - 1; i >= 0; i -= 2) works[i]!.resolve(i);
    await vi.advanceTimersByTimeAsync(0);
    await vi.advanceTimersByTimeAsync(MS);
    answers.forEach((a, i) => {
      expect(a).toHaveLength(1);
      expect(a[0]!.ok).toBe(i % 2 === 1);
    });
    // And the queue works on afterwards.
    const later = started(deadlines, pending<number>().promise);
    await vi.advanceTimersByTimeAsync(MS);
    expect(later).toHaveLength(1);
  });
});

describe("the checker's deadline", () => {
  it("answers 503 at the deadline for a policy that has not decided, and a decided one at once; each once", async () => {
    const decisions: Array<ReturnType<typeof pending<Decision>>> = [];
    const policy: Policy = {
      name: "public",
      bodyShape: "json",
      decide: () => {
        const p = pending<Decision>();
        decisions.push(p);
        return p.promise;
      },
    };
    const check = createChecker({ policies: [policy], audit: { pluginRequest: () => {}, pluginTokenReplay: () => {} }, timeoutMs: MS, retryAfterSeconds: 1, logger: pino({ level: "silent" }) });
    const request = () => envoyCheckRequest({ path: "/x", policy: "public" }) as CheckRequestMessage;
    const answers: CheckResponseMessage[][] = [[], []];
    void check(request()).then((r) => answers[0]!.push(r));
    void check(request()).then((r) => answers[1]!.push(r));
    decisions[1]!.resolve(allow({ set: {}, remove: [] }));
    await vi.advanceTimersByTimeAsync(0);
    expect(answers[0]).toEqual([]);
    expect(answers[1]!.map((r) => r.status.code)).toEqual([0]);
    await vi.advanceTimersByTimeAsync(MS);
    expect(answers[0]!.map((r) => [r.status.code, r.denied_response?.status.code])).toEqual([[14, 503]]);
    decisions[0]!.resolve(allow({ set: {}, remove: [] }));
    await vi.advanceTimersByTimeAsync(MS);
    expect(answers.map((a) => a.length)).toEqual([1, 1]);
  });
});
