/** The time a check has to decide: past it, the check is denied as a dependency that did not answer. */

import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { markHandled } from "./started.ts";

/** A check's deadline: `passed` rejects with DependencyUnavailable when the check's time is up. */
export interface Deadline {
  readonly passed: Promise<never>;
  /** The check answered: the timer is cleared (it would otherwise keep the check's objects alive until it fires). */
  clear(): void;
}

export function deadlineIn(ms: number): Deadline {
  let timer: NodeJS.Timeout | undefined;
  const passed = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DependencyUnavailable("check", "no decision before the deadline")), ms).unref();
  });
  // Nothing may be racing it when it fires (the check already answered).
  return { passed: markHandled(passed), clear: () => clearTimeout(timer) };
}

/** Settles with `work`, or rejects with DependencyUnavailable when `deadline` passes first. */
export function beforeDeadline<T>(work: Promise<T>, deadline: Deadline): Promise<T> {
  return Promise.race([work, deadline.passed]);
}
