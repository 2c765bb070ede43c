/** Calls to a dependency (OpenFGA, an API server, an OIDC provider) bounded by a deadline, timed and traced. */

import { publishDependencyCall } from "../metrics/events.ts";
import { errorSummary } from "../redaction/error-cause.ts";
import { inDependencySpan, type SpanAttributes } from "../tracing/spans.ts";
import { DependencyUnavailable } from "./unavailable.ts";

/**
 * Runs one call to a dependency with a deadline: past `ms` the call is aborted and the result is
 * DependencyUnavailable; any other failure becomes DependencyUnavailable too. With tracing on, the
 * call is a span named `dependency` carrying `attributes` (never a credential).
 */
export function withDeadline<T>(dependency: string, ms: number, run: (signal: AbortSignal) => Promise<T>, attributes?: SpanAttributes): Promise<T> {
  return inDependencySpan(dependency, attributes, () => callWithDeadline(dependency, ms, run));
}

async function callWithDeadline<T>(dependency: string, ms: number, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const started = performance.now();
  let ok = false;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(new DependencyUnavailable(dependency, `no answer within ${ms} ms`));
    }, ms);
  });
  try {
    const value = await Promise.race([run(controller.signal), deadline]);
    ok = true;
    return value;
  } catch (err) {
    if (err instanceof DependencyUnavailable) throw err;
    throw new DependencyUnavailable(dependency, errorSummary(err), { cause: err });
  } finally {
    clearTimeout(timer);
    publishDependencyCall(dependency, (performance.now() - started) / 1000, ok);
  }
}
