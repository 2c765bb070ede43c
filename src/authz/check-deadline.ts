/** The time a check has to decide: past it, the check is denied as a dependency that did not answer. */

import { DependencyUnavailable } from "../dependencies/unavailable.ts";

/** The monotonic clock process.hrtime.bigint() reads, in ms. */
function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** A check waiting for its decision, in the list of those waiting (oldest first) until it is answered. */
interface Waiting {
  readonly at: number;
  settle: Settle<unknown> | undefined;
  previous: Waiting | undefined;
  next: Waiting | undefined;
}

/** Called once: `ok` with the work's value, or not with its error (or the deadline's DependencyUnavailable). */
export type Settle<T> = (ok: boolean, outcome: T | unknown) => void;

/**
 * The deadlines of a checker's checks. Every check has the same time, so deadlines fall in the order
 * the checks started: one timer, armed for the oldest check still waiting, stands for all of them.
 * A check answered from warm caches within microseconds joins a list and leaves it when answered,
 * instead of making, inserting and clearing a timer of its own (and a promise raced against it);
 * nothing of an answered check stays behind.
 */
export class CheckDeadlines {
  readonly #ms: number;
  #oldest: Waiting | undefined;
  #newest: Waiting | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /**
   * Calls `settle` exactly once: with `work`'s value or error, or with DependencyUnavailable when the
   * deadline passes first (what `work` does later is then ignored). `startedAt`: when the check started,
   * process.hrtime.bigint() (the check has read the clock already; performance.now() costs more).
   */
  settle<T>(work: Promise<T>, startedAt: bigint, settle: Settle<T>): void {
    const waiting: Waiting = { at: Number(startedAt) / 1e6 + this.#ms, settle, previous: this.#newest, next: undefined };
    if (this.#newest === undefined) this.#oldest = waiting;
    else this.#newest.next = waiting;
    this.#newest = waiting;
    this.#timer ??= setTimeout(() => this.#expire(), this.#ms).unref();
    work.then(
      (value) => this.#answered(waiting)?.(true, value),
      (err: unknown) => this.#answered(waiting)?.(false, err),
    );
  }

  /** The entry's callback if it is still waiting (undefined once the deadline answered it); it leaves the list. */
  #answered(waiting: Waiting): Settle<unknown> | undefined {
    const settle = waiting.settle;
    if (settle === undefined) return undefined;
    waiting.settle = undefined;
    const { previous, next } = waiting;
    if (previous === undefined) this.#oldest = next;
    else previous.next = next;
    if (next === undefined) this.#newest = previous;
    else next.previous = previous;
    waiting.previous = waiting.next = undefined;
    return settle;
  }

  /** The timer: every check past its deadline is denied; the timer is armed again for the oldest one left. */
  #expire(): void {
    this.#timer = undefined;
    const now = nowMs();
    const late: Array<Settle<unknown>> = [];
    while (this.#oldest !== undefined && this.#oldest.at <= now) late.push(this.#answered(this.#oldest)!);
    const next = this.#oldest;
    // Armed before any answer runs: a callback that throws cannot leave the others without a deadline.
    if (next !== undefined) this.#timer = setTimeout(() => this.#expire(), Math.max(1, Math.ceil(next.at - now))).unref();
    for (const settle of late) {
      try {
        settle(false, new DependencyUnavailable("check", "no decision before the deadline"));
      } catch (err) {
        // Every late check is answered first; then the error surfaces as a timer's would.
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }
}
