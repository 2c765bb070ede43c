/**
 * Remote gates run concurrently but are reported in the seed's order: each is started at once,
 * and read later, in order. A gate that is never read (an earlier one denied) must not surface as
 * an unhandled rejection, so the outcome is captured when the work starts.
 */
export interface Started<T> {
  /** The gate's result, or its error rethrown, at the point the policy reads it. */
  result(): Promise<T>;
}

export function start<T>(work: () => Promise<T>): Started<T> {
  let settled: Promise<{ ok: true; value: T } | { ok: false; error: unknown }>;
  try {
    settled = work().then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );
  } catch (error) {
    settled = Promise.resolve({ ok: false as const, error });
  }
  return {
    async result() {
      const outcome = await settled;
      if (outcome.ok) return outcome.value;
      throw outcome.error;
    },
  };
}
