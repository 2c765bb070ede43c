/**
 * An audit record as the JSON line operators read: `{"level":30,"time":<ms>,` then the record's
 * fields in their order, then a newline — the line pino wrote for `auditLogger.info(record)`, built
 * here without pino's generic serializer (it was the largest single cost of a warm PluginToken check).
 * Pure.
 *
 * Every value is escaped by JSON.stringify: quotes, backslashes and control characters (CR and LF
 * included, so a field can never start a second line) are escaped, and a lone surrogate is written as
 * a `\udXXX` escape, so the line is valid UTF-8 and reads back exactly as it was given (pino wrote a
 * short string's lone surrogate raw, which its UTF-8 encoding turned into U+FFFD).
 */
import type { PluginRequestAudit } from "./plugin-request.ts";
import type { PluginTokenReplayAudit } from "./plugin-token-replay.ts";

/** pino's number for `info`: the audit lines are written at info, whatever the log level. */
const INFO = 30;

export function auditJsonLine(record: PluginRequestAudit | PluginTokenReplayAudit, timeMs: number): string {
  // JSON.stringify of the flat record is `{…}`: its fields follow the envelope's.
  return `{"level":${INFO},"time":${timeMs},${JSON.stringify(record).slice(1)}\n`;
}
