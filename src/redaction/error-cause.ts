/**
 * What of an error may be logged: a dependency's own words as each client library reports them
 * (@openfga/sdk, client-node, Node's system errors), sanitized, and never the request, its headers or
 * a credential.
 */

import { STATUS_CODES } from "node:http";
import { FgaApiError, FgaError } from "@openfga/sdk";

/**
 * An error whose message portcullis wrote to be logged as it is (it names a dependency and a rule,
 * never a credential), such as DependencyUnavailable. Any other error is described by errorCause.
 */
export class LoggableError extends Error {}

/**
 * A dependency error's cause, safe to log: the HTTP status it answered, its error code (an errno such
 * as ECONNREFUSED, OpenFGA's code), a Kubernetes Status reason, and the dependency's own message,
 * sanitized — never the request, its headers or a body beyond that message.
 */
export interface ErrorCause {
  readonly type: string;
  readonly status?: number;
  readonly code?: string | number;
  readonly reason?: string;
  readonly message?: string;
  readonly cause?: ErrorCause;
}

const MAX_CAUSE_DEPTH = 3;

/**
 * What is known to be the dependency's own words, per kind of error: OpenFGA's `apiErrorMessage`
 * (FgaApiError; its `message` also names the request's URL), the network error an FgaError wraps, a
 * Kubernetes Status's `reason` and `message` (client-node's ApiException; its `message` also quotes
 * the response headers), a system error's message (`connect ECONNREFUSED 127.0.0.1:8080`), a watch's
 * HTTP status text. Any other Error keeps its name, code and status only: its message may echo a request.
 */
export function errorCause(err: unknown, depth = 0): ErrorCause {
  if (!(err instanceof Error)) return { type: err === null ? "null" : typeof err, message: errorSummary(err) };
  const fields = err as Error & Record<string, unknown>;
  const nested = depth < MAX_CAUSE_DEPTH && err.cause !== undefined ? { cause: errorCause(err.cause, depth + 1) } : {};
  if (err instanceof LoggableError) return { type: err.name, message: err.message, ...nested };
  if (err instanceof FgaApiError) {
    return withFields({ type: err.name }, { status: err.statusCode, code: fields["apiErrorCode"], message: err.apiErrorMessage });
  }
  if (err instanceof FgaError) {
    // The SDK wraps a network failure as "FGA Error: connect ECONNREFUSED …", dropping the code.
    return withFields({ type: err.name }, { code: /\b(E[A-Z]{3,}|ETIMEDOUT)\b/.exec(err.message)?.[1], message: err.message.replace(/^FGA Error:?\s*/, "") });
  }
  if (typeof fields["code"] === "number" && "body" in fields && "headers" in fields) {
    const status = statusBody(fields["body"]);
    return withFields({ type: "ApiException" }, { status: fields["code"], reason: status.reason, message: status.message });
  }
  const code = fields["code"];
  const status = typeof fields["statusCode"] === "number" ? fields["statusCode"] : undefined;
  const systemError = typeof fields["syscall"] === "string" || (typeof code === "string" && code.startsWith("UND_ERR_"));
  const statusText = status !== undefined && err.message === STATUS_CODES[status];
  return withFields({ type: err.name }, { status, code, message: systemError || statusText ? err.message : undefined, ...nested });
}

function withFields(base: { type: string }, fields: { status?: unknown; code?: unknown; reason?: unknown; message?: unknown; cause?: ErrorCause }): ErrorCause {
  const cause: Record<string, unknown> = { ...base };
  if (typeof fields.status === "number") cause["status"] = fields.status;
  if (typeof fields.code === "number") cause["code"] = fields.code;
  if (typeof fields.code === "string" && fields.code !== "") cause["code"] = sanitizedMessage(fields.code);
  if (typeof fields.reason === "string" && fields.reason !== "") cause["reason"] = sanitizedMessage(fields.reason);
  if (typeof fields.message === "string" && fields.message !== "") cause["message"] = sanitizedMessage(fields.message);
  if (fields.cause !== undefined) cause["cause"] = fields.cause;
  return cause as unknown as ErrorCause;
}

/** A Kubernetes Status body (an object, or its JSON text): its reason and message. */
function statusBody(body: unknown): { reason?: unknown; message?: unknown } {
  if (typeof body === "string") {
    try {
      return statusBody(JSON.parse(body));
    } catch {
      return {};
    }
  }
  return typeof body === "object" && body !== null ? (body as { reason?: unknown; message?: unknown }) : {};
}

/** errorCause on one line: `FgaApiInternalError 500 internal_error: datastore unavailable (cause …)`. */
function renderCause(cause: ErrorCause): string {
  const head = [cause.type, cause.status, cause.code, cause.reason].filter((v) => v !== undefined).join(" ");
  const text = cause.message === undefined ? head : `${head}: ${cause.message}`;
  return cause.cause === undefined ? text : `${text} (cause ${renderCause(cause.cause)})`;
}

/**
 * A description of an error that is safe to log, on one line: our own LoggableError messages (such
 * as DependencyUnavailable's, written to name the dependency and the rule, never a credential), a
 * foreign error's cause as errorCause keeps it. A value that is not an Error (a string, a plain object) keeps its message,
 * sanitized: it is often all there is.
 */
export function errorSummary(err: unknown): string {
  if (err instanceof LoggableError) return err.message;
  if (err instanceof Error) return renderCause(errorCause(err));
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
