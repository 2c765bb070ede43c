/**
 * Errors that decide a denial. A dependency that fails, times out or is not yet synced is a 503,
 * never an allow; anything else thrown while deciding is a bug, denied as 500.
 */

import { type Deny, deny } from "./decision.ts";
import { publishDependencyCall } from "../metrics/events.ts";

/** A remote dependency (OpenFGA, an API server, an index, an OIDC provider) could not answer in time. */
export class DependencyUnavailable extends Error {
  readonly code = "dependency-unavailable";
  readonly dependency: string;
  constructor(dependency: string, message: string, options?: { cause?: unknown }) {
    super(`${dependency}: ${message}`, options);
    this.dependency = dependency;
  }
}

/**
 * Runs one call to a dependency with a deadline: past `ms` the call is aborted and the result is
 * DependencyUnavailable; any other failure becomes DependencyUnavailable too.
 */
export async function withDeadline<T>(dependency: string, ms: number, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
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

/**
 * A description of an error that is safe to log: our own DependencyUnavailable messages (written
 * to name the dependency and the rule, never a credential), or a foreign error's name and code —
 * never its message, headers or body, which may echo a request.
 */
export function errorSummary(err: unknown): string {
  if (err instanceof DependencyUnavailable) return err.message;
  if (err instanceof Error) {
    const code = (err as { code?: unknown; statusCode?: unknown }).code ?? (err as { statusCode?: unknown }).statusCode;
    return code === undefined ? err.name : `${err.name} ${String(code)}`;
  }
  return "unknown error";
}

/** The denial for an error thrown while deciding: the one place that decides which errors are which denials. */
export function denialFor(err: unknown): Deny {
  if (err instanceof DependencyUnavailable) return deny("dependency-unavailable", `${err.dependency} is unavailable`);
  return deny("internal-error", "internal error");
}

/**
 * Settles with `work`, or rejects with DependencyUnavailable when `deadline` aborts first. The check
 * and a policy that must report its own outcome (the audit line) race the same signal, so both see
 * the same answer.
 */
export function beforeDeadline<T>(work: Promise<T>, deadline: AbortSignal): Promise<T> {
  if (deadline.aborted) return Promise.reject(new DependencyUnavailable("check", "deadline passed"));
  return new Promise<T>((resolveWork, reject) => {
    const onAbort = () => reject(new DependencyUnavailable("check", "no decision before the deadline"));
    deadline.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        deadline.removeEventListener("abort", onAbort);
        resolveWork(value);
      },
      (err: unknown) => {
        deadline.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
