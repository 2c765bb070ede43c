/**
 * Bounds for every duration in the configuration. Node's timers hold at most 2^31 − 1 ms (24.8
 * days; a larger delay fires after 1 ms), and a deadline of minutes turns an outage into a hang
 * instead of a 503, so each kind of duration has a sane maximum and a message that says it.
 */
import { z } from "zod";

/** A deadline on one call or one decision: a call that takes longer has failed. */
export const MAX_DEADLINE_MS = 60_000;
/** A cache lifetime, backoff or refresh period. */
export const MAX_PERIOD_MS = 86_400_000;
/** A grace period around shutdown or a stalled event loop. */
export const MAX_GRACE_MS = 600_000;

const human = (ms: number) => (ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`);

function milliseconds(min: number, max: number) {
  const expected = `expected whole milliseconds from ${min} to ${max} (${human(max)})`;
  return z.number(expected).int(expected).min(min, expected).max(max, expected);
}

/** Whole seconds, as a JWT counts time (`exp`, `iat`): `min` … `max`. */
export function wholeSeconds(min: number, max: number) {
  const expected = `expected whole seconds from ${min} to ${max} (${human(max * 1000)})`;
  return z.number(expected).int(expected).min(min, expected).max(max, expected);
}

/** A per-call or per-decision deadline: 1 ms … 60 s. */
export const deadlineMs = () => milliseconds(1, MAX_DEADLINE_MS);
/** A cache lifetime or backoff: `min` … 24 h. */
export const periodMs = (min = 1) => milliseconds(min, MAX_PERIOD_MS);
/** A shutdown or watchdog grace: `min` … 10 min. */
export const graceMs = (min = 0) => milliseconds(min, MAX_GRACE_MS);
