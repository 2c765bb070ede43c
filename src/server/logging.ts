/**
 * Logs and the audit line, as JSON lines on stdout, written asynchronously so logging stays off the
 * Check's critical path. The audit logger ignores the log level: the audit line is mandatory.
 */
import pino, { type DestinationStream, type Logger } from "pino";
import type { AuditSink } from "../audit/plugin-request.ts";
import { errorCause, errorSummary, sanitizedMessage } from "../authz/errors.ts";

/** Defence in depth: we never log credentials, and these paths are censored if anything tries. */
const REDACT = ["authorization", "cookie", "token", "*.authorization", "*.cookie", "*.token", "headers.*"];

/**
 * An Error is logged as its sanitized cause (errorCause: HTTP status, error code, Kubernetes reason,
 * the dependency's own message, the cause's cause) and stack; never the request it failed on, whose
 * headers and body a client library's message may carry. Anything else thrown or passed as `err`
 * (a string summary, a plain object) keeps its message, sanitized (errorSummary).
 */
function safeError(err: unknown): Record<string, unknown> {
  if (!(err instanceof Error)) {
    const { code, status, statusCode } = typeof err === "object" && err !== null ? (err as Record<string, unknown>) : {};
    return {
      type: err === null ? "null" : typeof err,
      message: errorSummary(err),
      ...safeField("code", code),
      ...safeField("status", status ?? statusCode),
    };
  }
  const { type, message: _message, ...cause } = errorCause(err);
  return { type, message: errorSummary(err), ...cause, stack: err.stack?.split("\n").slice(1).join("\n") };
}

function safeField(name: string, value: unknown): Record<string, string | number> {
  if (typeof value === "number") return { [name]: value };
  if (typeof value === "string") return { [name]: sanitizedMessage(value) };
  return {};
}

export interface Logging {
  readonly logger: Logger;
  readonly audit: AuditSink;
  /** Writes out everything buffered; called on shutdown. */
  flush(): Promise<void>;
}

export function createLogging(level: string, destination?: DestinationStream): Logging {
  // Asynchronous, but without a minimum batch: an audit line must not wait for 4 KB of company.
  const stream = destination ?? pino.destination({ dest: 1, sync: false });
  const logger = pino({ level, redact: { paths: REDACT, censor: "[redacted]" }, serializers: { err: safeError } }, stream);
  const auditLogger = pino({ level: "info", base: null }, stream);
  return {
    logger,
    audit: { pluginRequest: (line) => auditLogger.info(line), pluginTokenReplay: (line) => auditLogger.info(line) },
    flush: () =>
      new Promise<void>((resolveFlush) => {
        const s = stream as { flush?: (cb: (err?: Error) => void) => void; flushSync?: () => void };
        if (typeof s.flushSync === "function") {
          try {
            s.flushSync();
          } catch {
            // sonic-boom throws if not yet ready; the async flush below still drains it.
          }
        }
        if (typeof s.flush === "function") s.flush(() => resolveFlush());
        else resolveFlush();
      }),
  };
}
