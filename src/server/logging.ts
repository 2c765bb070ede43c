/**
 * Logs and the audit line, as JSON lines on stdout. The audit lines ignore the log level (they are
 * mandatory) and are written in batches, off the Check's critical path: one write per AUDIT_FLUSH_MS
 * instead of one per check. Each write is one write(2) from the event loop's own thread: an
 * asynchronous destination handed every batch to libuv's thread pool and was woken with the result,
 * two thread wake-ups per batch, which under load cost more CPU than the write (issue 55).
 */
import pino, { type DestinationStream, type Logger } from "pino";
import { auditJsonLine } from "../audit/json-line.ts";
import type { AuditSink } from "../audit/plugin-request.ts";
import { errorCause, errorSummary, sanitizedMessage } from "../redaction/error-cause.ts";

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
  /** Hands the audit lines accepted so far to the stream now, not at the next batch (tests read them at once). */
  writeAuditBatch(): void;
}

/**
 * How long an audit line may wait for company. It bounds what a SIGKILL (or the watchdog's kill of a
 * frozen event loop) can lose: the lines accepted in the last AUDIT_FLUSH_MS. An exit, a crash
 * (uncaught exception) and SIGTERM write every line (writeAtExit, flush()).
 */
export const AUDIT_FLUSH_MS = 5;
/** A batch this large (UTF-16 code units, ~100 lines) is written at once rather than at the timer. */
export const AUDIT_BATCH_MAX_CHARS = 64 * 1024;

type SyncFlushable = DestinationStream & { flush?: (cb: (err?: Error) => void) => void; flushSync?: () => void };

/** Audit lines held for the next write: one `write` per batch, never a line split across two. */
class AuditBatch {
  #pending = "";
  #timer: NodeJS.Timeout | undefined;
  readonly #stream: SyncFlushable;

  constructor(stream: SyncFlushable) {
    this.#stream = stream;
  }

  add(line: string): void {
    this.#pending += line;
    if (this.#pending.length >= AUDIT_BATCH_MAX_CHARS) this.write();
    else if (this.#timer === undefined) {
      // Unref'd: a batch never keeps a finished process alive; the exit hook writes it.
      this.#timer = setTimeout(() => this.write(), AUDIT_FLUSH_MS).unref();
      unwrittenBatches.add(this);
    }
  }

  /** Hands the pending lines to the stream (one write). */
  write(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      unwrittenBatches.delete(this);
    }
    if (this.#pending === "") return;
    const batch = this.#pending;
    this.#pending = "";
    this.#stream.write(batch);
  }

  /** On exit (process.exit, an uncaught exception): no event loop is left, so the stream is written synchronously. */
  writeSync(): void {
    this.write();
    flushStreamSync(this.#stream);
  }
}

/**
 * Batches holding lines; one pair of hooks for all of them (a listener per createLogging would pile
 * up). First in line: pino's own hook ends its stream at `beforeExit`, and a batch written after
 * that would be lost.
 */
const unwrittenBatches = new Set<AuditBatch>();
process.prependListener("beforeExit", () => {
  for (const batch of unwrittenBatches) batch.write();
});
process.prependListener("exit", () => {
  for (const batch of unwrittenBatches) batch.writeSync();
});

function flushStreamSync(stream: SyncFlushable): void {
  if (typeof stream.flushSync !== "function") return;
  try {
    stream.flushSync();
  } catch {
    // sonic-boom throws if not yet ready; an asynchronous flush, where there is one, still drains it.
  }
}

export function createLogging(level: string, destination?: DestinationStream): Logging {
  // Synchronous: a line or a batch is in the kernel when write() returns, nothing is held in memory,
  // and a log collector that stops reading holds the event loop (checks then fail closed at Envoy's
  // timeout) rather than a buffer growing without bound. Audit lines reach it in batches (AuditBatch).
  const stream: SyncFlushable = destination ?? pino.destination({ dest: 1, sync: true });
  const logger = pino({ level, redact: { paths: REDACT, censor: "[redacted]" }, serializers: { err: safeError } }, stream);
  const batch = new AuditBatch(stream);
  return {
    logger,
    audit: {
      pluginRequest: (line) => batch.add(auditJsonLine(line, Date.now())),
      pluginTokenReplay: (line) => batch.add(auditJsonLine(line, Date.now())),
    },
    writeAuditBatch: () => batch.write(),
    flush: () =>
      new Promise<void>((resolveFlush) => {
        batch.write();
        flushStreamSync(stream);
        if (typeof stream.flush === "function") stream.flush(() => resolveFlush());
        else resolveFlush();
      }),
  };
}
