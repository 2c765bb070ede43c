/**
 * The audit line, built by hand (src/audit/json-line.ts) and written in batches (src/server/logging.ts):
 * - the line is the one pino wrote — same field names, order and values — for adversarial field
 *   values (quotes, backslashes, every control character, U+2028/U+2029, lone surrogates, oversized
 *   fields), always exactly one line of valid UTF-8 that reads back as the record given;
 * - the lines accepted within AUDIT_FLUSH_MS reach the stream in one write, none split, none lost;
 *   a batch past AUDIT_BATCH_MAX_CHARS is written at once; flush() writes what is pending;
 * - a process that exits, or dies of an uncaught exception, still writes every accepted line.
 */
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { auditJsonLine } from "../../src/audit/json-line.ts";
import type { PluginRequestAudit } from "../../src/audit/plugin-request.ts";
import type { PluginTokenReplayAudit } from "../../src/audit/plugin-token-replay.ts";
import { AUDIT_BATCH_MAX_CHARS, AUDIT_FLUSH_MS, createLogging } from "../../src/server/logging.ts";
import { NODE } from "../support/portcullis-process.ts";

const REQUEST: PluginRequestAudit = {
  audit: "plugin_request",
  user: "3f2a1b4c-1111-4222-8333-444455556666",
  cluster_id: "9a8b7c6d-1111-4222-8333-444455556666",
  installation_id: "0a1b2c3d-1111-4222-8333-444455556666",
  plugin_name: "cert-manager",
  plugin_version: "1.2.3",
  definition_hash: `sha256:${"a".repeat(64)}`,
  pinned_definition_hash: `sha256:${"b".repeat(64)}`,
  verb: "get",
  api_group: "cert-manager.io",
  resource: "certificates",
  subresource: "status",
  namespace: "team-a",
  name: "web",
  path: "",
  decision: "allowed",
  request_id: "5d1c2b3a-1111-4222-8333-444455556666",
};

const REPLAY: PluginTokenReplayAudit = {
  audit: "plugin_token_replay",
  service: "organization-api",
  path: "/organization.v1.APIKeyService/CreateAPIKey",
  http_method: "POST",
  credential: "bearer",
  user: REQUEST.user,
  cluster_id: REQUEST.cluster_id,
  installation_id: REQUEST.installation_id,
  installation_name: "cert-manager",
  plugin_name: "cert-manager",
  plugin_version: "1.2.3",
  definition_hash: REQUEST.definition_hash,
  origin: "https://console.example",
  request_id: "r-1",
};

const EVERY_CONTROL_CHARACTER = Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(i)).join("") + "\x7f";

/** Field values an attacker shapes (the URL's name, namespace, path; the request id) or a claim carries. */
const ADVERSARIAL: Array<{ name: string; record: PluginRequestAudit | PluginTokenReplayAudit; pinoLossless: boolean }> = [
  { name: "ordinary values", record: REQUEST, pinoLossless: true },
  { name: "the replay event", record: REPLAY, pinoLossless: true },
  { name: "an explained line (explain: true last)", record: { ...REQUEST, request_id: "explain:x", explain: true }, pinoLossless: true },
  { name: "quotes and backslashes", record: { ...REQUEST, name: 'a"b\\c\\"d', namespace: '"', path: "\\" }, pinoLossless: true },
  { name: "every control character, CR and LF included", record: { ...REQUEST, name: EVERY_CONTROL_CHARACTER, request_id: "x\r\n{\"audit\":\"forged\"}" }, pinoLossless: true },
  { name: "U+2028 and U+2029 (line separators to JavaScript, not to JSON)", record: { ...REQUEST, name: "a\u2028b\u2029c" }, pinoLossless: true },
  { name: "non-ASCII and a surrogate pair", record: { ...REQUEST, name: "müller-名前-😀", user: "ü" }, pinoLossless: true },
  { name: "a lone high surrogate", record: { ...REQUEST, name: "a\ud800b" }, pinoLossless: false },
  { name: "a lone low surrogate at the end", record: { ...REQUEST, request_id: "id\udfff" }, pinoLossless: false },
  { name: "a reversed pair", record: { ...REQUEST, path: "/version\udc00\ud800" }, pinoLossless: false },
  { name: "a lone surrogate with a control character", record: { ...REQUEST, name: "\ud800\n" }, pinoLossless: true },
  { name: "an oversized field (1 MiB)", record: { ...REQUEST, path: `/openapi/${"x\"\\".repeat(350_000)}` }, pinoLossless: true },
  { name: "every field empty", record: { ...REQUEST, user: "", cluster_id: "", installation_id: "", verb: "", name: "", decision: "", request_id: "" }, pinoLossless: true },
];

/** What a sink receives, decoded as UTF-8 the way a reader of stdout decodes it. */
function recordingSink(): { sink: Writable; writes: string[] } {
  const writes: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      writes.push(chunk.toString("utf8"));
      cb();
    },
  });
  return { sink, writes };
}

/** The line pino wrote for `pino({ level: "info", base: null }).info(record)`, as the old audit logger did. */
function pinoLine(record: object): string {
  const { sink, writes } = recordingSink();
  pino({ level: "info", base: null }, sink).info(record);
  return writes.join("");
}

describe("the audit line", () => {
  it.each(ADVERSARIAL)("$name: one line of UTF-8 that reads back as the record, with pino's fields", ({ record, pinoLossless }) => {
    const line = auditJsonLine(record, 1_764_556_800_123);
    expect(line.endsWith("\n")).toBe(true);
    expect(line.slice(0, -1)).not.toMatch(/[\n\r]/);
    // Nothing a UTF-8 encoder would replace: what is written is what reads back.
    expect(Buffer.from(line, "utf8").toString("utf8")).toBe(line);
    const parsed = JSON.parse(line) as Record<string, unknown>;
    expect(parsed).toStrictEqual({ level: 30, time: 1_764_556_800_123, ...record });
    expect(Object.keys(parsed)).toEqual(["level", "time", ...Object.keys(record)]);

    const old = JSON.parse(pinoLine(record)) as Record<string, unknown>;
    expect(Object.keys(old)).toEqual(Object.keys(parsed));
    if (pinoLossless) expect({ ...old, time: 0 }).toStrictEqual({ ...parsed, time: 0 });
    // pino wrote a short string's lone surrogate raw: U+FFFD once encoded. The new line keeps it, escaped.
    else expect(JSON.stringify(old)).toContain("\ufffd");
  });
});

describe("batched audit writes", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it(`lines accepted within ${AUDIT_FLUSH_MS} ms reach the stream together, in one write, in order`, () => {
    const { sink, writes } = recordingSink();
    const logging = createLogging("info", sink);
    for (let i = 0; i < 20; i++) logging.audit.pluginRequest({ ...REQUEST, request_id: `r-${i}` });
    logging.audit.pluginTokenReplay(REPLAY);
    expect(writes).toEqual([]);
    vi.advanceTimersByTime(AUDIT_FLUSH_MS - 1);
    expect(writes).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(writes).toHaveLength(1);
    const lines = writes[0]!.split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.map((l) => (JSON.parse(l) as Record<string, unknown>)["request_id"])).toEqual([...Array.from({ length: 20 }, (_, i) => `r-${i}`), "r-1"]);
    // Nothing left over for a later write.
    vi.advanceTimersByTime(AUDIT_FLUSH_MS * 10);
    expect(writes).toHaveLength(1);
  });

  it("a batch reaching the size bound is written at once, whole lines only", () => {
    const { sink, writes } = recordingSink();
    const logging = createLogging("info", sink);
    const lineLength = auditJsonLine(REQUEST, Date.now()).length;
    const perBatch = Math.ceil(AUDIT_BATCH_MAX_CHARS / lineLength);
    for (let i = 0; i < perBatch; i++) logging.audit.pluginRequest(REQUEST);
    expect(writes).toHaveLength(1);
    expect(writes[0]!.split("\n")).toHaveLength(perBatch + 1);
    // An oversized line alone is its own batch.
    logging.audit.pluginRequest({ ...REQUEST, path: "x".repeat(AUDIT_BATCH_MAX_CHARS) });
    expect(writes).toHaveLength(2);
    expect((JSON.parse(writes[1]!) as Record<string, unknown>)["path"]).toHaveLength(AUDIT_BATCH_MAX_CHARS);
  });

  it("flush() (shutdown) writes the pending lines without waiting for the timer", async () => {
    const { sink, writes } = recordingSink();
    const logging = createLogging("info", sink);
    logging.audit.pluginRequest(REQUEST);
    logging.logger.info("after the audit line");
    await logging.flush();
    expect(writes.join("")).toContain('"audit":"plugin_request"');
    vi.advanceTimersByTime(AUDIT_FLUSH_MS);
    expect(writes.join("").match(/plugin_request/g)).toHaveLength(1);
  });
});

/**
 * A real process on stdout (pino's asynchronous destination, as production): it accepts audit lines
 * and then ends without any flush of its own. Every line must be on stdout.
 */
describe("a process that ends with audit lines pending writes them all", () => {
  const LOGGING = resolve(import.meta.dirname, "../../src/server/logging.ts");
  const script = (ending: string) => `
    import { createLogging } from ${JSON.stringify(LOGGING)};
    const logging = createLogging("info");
    for (let i = 0; i < 500; i++) logging.audit.pluginRequest({ audit: "plugin_request", request_id: "line-" + i });
    ${ending}
  `;
  it.each([
    { name: "an uncaught exception", ending: 'throw new Error("crash");', code: 1 },
    { name: "an unhandled rejection", ending: 'Promise.reject(new Error("crash"));', code: 1 },
    { name: "process.exit(3)", ending: "process.exit(3);", code: 3 },
    { name: "the event loop running empty", ending: "", code: 0 },
  ])("$name", ({ ending, code }) => {
    const child = spawnSync(NODE, ["--input-type=module", "-e", script(ending)], { encoding: "utf8", timeout: 30_000 });
    expect(child.status, child.stderr).toBe(code);
    const ids = child.stdout
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => (JSON.parse(l) as Record<string, unknown>)["request_id"]);
    expect(ids).toEqual(Array.from({ length: 500 }, (_, i) => `line-${i}`));
  });
});
