/**
 * Errors that decide a denial. A dependency that fails, times out or is not yet synced is a 503,
 * never an allow; anything else thrown while deciding is a bug, denied as 500.
 */

import { type Deny, deny } from "./decision.ts";
import { publishDependencyCall } from "../metrics/events.ts";
import { inDependencySpan, type SpanAttributes } from "../tracing/spans.ts";

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

/**
 * A description of an error that is safe to log: our own DependencyUnavailable messages (written
 * to name the dependency and the rule, never a credential), or a foreign error's name, code and its
 * cause's code — never its message, headers or body, which may echo a request. A value that is not
 * an Error (a string, a plain object) keeps its message, sanitized: it is often all there is.
 */
export function errorSummary(err: unknown): string {
  if (err instanceof DependencyUnavailable) return err.message;
  if (err instanceof Error) {
    const code = (err as { code?: unknown; statusCode?: unknown }).code ?? (err as { statusCode?: unknown }).statusCode;
    const causeCode = (err.cause as { code?: unknown } | undefined)?.code;
    const named = code === undefined ? err.name : `${err.name} ${String(code)}`;
    return causeCode === undefined ? named : `${named} (cause ${String(causeCode)})`;
  }
  if (typeof err === "string") return sanitizedMessage(err) || "unknown error";
  if (typeof err === "object" && err !== null) {
    const { message, code, status, statusCode } = err as Record<string, unknown>;
    const parts = [
      typeof message === "string" ? sanitizedMessage(message) : "",
      ...[code, status ?? statusCode].filter((v) => typeof v === "string" || typeof v === "number").map((v) => sanitizedMessage(String(v))),
    ].filter((p) => p !== "");
    return parts.length === 0 ? "unknown error" : parts.join(" ");
  }
  return err === undefined || err === null ? "unknown error" : sanitizedMessage(String(err));
}

const MAX_MESSAGE = 200;
/** Longer words with a digit are identifiers, keys or tokens, never the reason itself. */
const MAX_WORD = 32;
const JWT_LIKE = /[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g;

/**
 * A foreign message made safe to log: one line, at most 200 characters, with JWT-shaped strings,
 * whatever follows an auth scheme, and long words holding a digit (tokens, secrets) redacted.
 */
export function sanitizedMessage(text: string): string {
  const oneLine = text
    .replace(/[\u0000-\u001f\u007f]+/g, " ")
    .replace(JWT_LIKE, "[redacted]")
    .replace(/\b(bearer|basic)\s+\S+/gi, "$1 [redacted]")
    .split(" ")
    .map((word) => (word.length > MAX_WORD && /\d/.test(word) ? "[redacted]" : word))
    .join(" ")
    .trim();
  return oneLine.length > MAX_MESSAGE ? `${oneLine.slice(0, MAX_MESSAGE)}…` : oneLine;
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
