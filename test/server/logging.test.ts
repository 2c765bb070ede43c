/**
 * The logger's error serializer: what reaches a log line for each kind of `err`. A string summary or
 * a plain object keeps its (sanitized) message, code and status; a foreign Error of unknown kind never
 * its message (test/server/error-causes.test.ts: the dependency errors whose message is kept);
 * no token or secret in any case.
 */
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { errorSummary, sanitizedMessage } from "../../src/redaction/error-cause.ts";
import { createLogging } from "../../src/server/logging.ts";

const JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEyMyJ9.c2lnbmF0dXJlLXRoYXQtaXMtc2VjcmV0";
const SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789";

async function logged(err: unknown): Promise<Record<string, unknown>> {
  let text = "";
  const sink = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk);
      cb();
    },
  });
  const logging = createLogging("info", sink);
  logging.logger.warn({ err }, "watch failed; restarting");
  await logging.flush();
  const line = JSON.parse(text.trim()) as Record<string, unknown>;
  return line["err"] as Record<string, unknown>;
}

describe("the err serializer", () => {
  it.each([
    { name: "errorSummary's string (the watch failure line)", err: errorSummary(Object.assign(new Error("forbidden"), { code: 403 })), expected: { type: "string", message: "Error 403" } },
    { name: "a string", err: "fetch failed", expected: { type: "string", message: "fetch failed" } },
    { name: "a status string", err: "429", expected: { type: "string", message: "429" } },
    { name: "a plain object with message, code and status", err: { message: "storage is (re)initializing", code: "TooManyRequests", statusCode: 429 }, expected: { type: "object", message: "storage is (re)initializing TooManyRequests 429", code: "TooManyRequests", status: 429 } },
    { name: "a number", err: 410, expected: { type: "number", message: "410" } },
    { name: "undefined", err: undefined, expected: undefined },
    { name: "null", err: null, expected: { type: "null", message: "unknown error" } },
    { name: "a string holding a JWT", err: `token ${JWT} rejected`, expected: { type: "string", message: "token [redacted] rejected" } },
    { name: "a string holding a bearer credential", err: "sent Authorization: Bearer abc123 upstream", expected: { type: "string", message: "sent Authorization: Bearer [redacted] upstream" } },
    { name: "a string holding a secret-sized word", err: `secret ${SECRET}`, expected: { type: "string", message: "secret [redacted]" } },
    { name: "an object whose code is a token", err: { code: JWT }, expected: { type: "object", message: "[redacted]", code: "[redacted]" } },
    { name: "a multi-line string", err: "line one\nline two\r\n", expected: { type: "string", message: "line one line two" } },
    { name: "a foreign Error: type and code, never its message", err: Object.assign(new Error(`request failed with Authorization: Bearer ${JWT}`), { code: "ECONNRESET" }), expected: { type: "Error", message: "Error ECONNRESET", code: "ECONNRESET" } },
    { name: "undici's fetch failed: its cause's code", err: new TypeError("fetch failed", { cause: Object.assign(new Error("connect"), { code: "ECONNREFUSED" }) }), expected: { type: "TypeError", message: "TypeError (cause Error ECONNREFUSED)", cause: { type: "Error", code: "ECONNREFUSED" } } },
  ])("$name", async ({ err, expected }) => {
    const serialized = await logged(err);
    if (expected === undefined) expect(serialized).toBeUndefined();
    else expect(serialized).toMatchObject(expected);
    const text = JSON.stringify(serialized ?? {});
    for (const secret of [JWT, SECRET, "abc123", "c2lnbmF0dXJlLXRoYXQtaXMtc2VjcmV0"]) expect(text).not.toContain(secret);
  });
});

describe("sanitizedMessage", () => {
  it("bounds the length", () => {
    expect(sanitizedMessage("a ".repeat(500)).length).toBeLessThanOrEqual(201);
  });
  it("keeps ordinary long words without digits (resource names)", () => {
    expect(sanitizedMessage("plugininstallations.plugins.fundament.io is forbidden")).toBe("plugininstallations.plugins.fundament.io is forbidden");
  });
});
