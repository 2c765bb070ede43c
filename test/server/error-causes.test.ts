/**
 * Logs keep causes (issue 13): the error each real client library throws for each way a dependency
 * fails — OpenFGA unreachable or answering an error, an API server refusing, a fetch that cannot
 * connect — logged with its HTTP status, error code and the dependency's own message, and never a
 * credential: not the token the request carried, not one the dependency echoed.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { OpenFgaClient } from "@openfga/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorCause, errorSummary } from "../../src/redaction/error-cause.ts";
import { withDeadline } from "../../src/dependencies/deadline.ts";
import { createLogging } from "../../src/server/logging.ts";
import { freePort } from "../harness/ports.ts";

const STORE = "01HVMMBCMGZNT3SED4Z17ECXCA";
const CREDENTIAL = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEyMyJ9.c2lnbmF0dXJlLXRoYXQtaXMtc2VjcmV0";

let dependency: Server;
let base: string;
/** What the fake dependency answers next: status and JSON body. */
let answer: { status: number; body: unknown } = { status: 200, body: {} };

beforeAll(async () => {
  dependency = createServer((req, res) => {
    req.resume();
    res.writeHead(answer.status, { "content-type": "application/json" }).end(JSON.stringify(answer.body));
  });
  await new Promise<void>((r) => dependency.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(dependency.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => dependency.close(() => r())));

async function thrown(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

/** The `err` of one logged line, as an operator reads it. */
async function logged(err: unknown): Promise<{ err: Record<string, unknown>; text: string }> {
  let text = "";
  const sink = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk);
      cb();
    },
  });
  const logging = createLogging("info", sink);
  logging.logger.warn({ err }, "dependency failed");
  await logging.flush();
  return { err: (JSON.parse(text.trim()) as { err: Record<string, unknown> }).err, text };
}

const fga = (apiUrl: string) =>
  new OpenFgaClient({ apiUrl, storeId: STORE, credentials: { method: "api_token" as never, config: { token: CREDENTIAL } } as never, retryParams: { maxRetry: 0, minWaitInMs: 1 } });
const check = (client: OpenFgaClient) => client.check({ user: "user:alice", relation: "can_view", object: "cluster:c1" });

function kube(server: string): CoreV1Api {
  const config = new KubeConfig();
  config.loadFromOptions({
    clusters: [{ name: "c", server, skipTLSVerify: true }],
    users: [{ name: "u", token: CREDENTIAL }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  return config.makeApiClient(CoreV1Api);
}

describe("each dependency failure keeps its cause, sanitized", () => {
  it.each([
    {
      name: "OpenFGA unreachable (FgaError): the connection error's code",
      error: async () => thrown(async () => check(fga(`http://127.0.0.1:${await freePort()}`))),
      expected: { type: "FgaError", code: "ECONNREFUSED" },
      summary: /^FgaError ECONNREFUSED: .*ECONNREFUSED/,
    },
    {
      name: "OpenFGA answering 500 (FgaApiInternalError): status, OpenFGA's code and message",
      answer: { status: 500, body: { code: "internal_error", message: "datastore unavailable" } },
      error: async () => thrown(() => check(fga(base))),
      expected: { type: "FgaApiInternalError", status: 500, code: "internal_error", message: "datastore unavailable" },
      summary: /^FgaApiInternalError 500 internal_error: datastore unavailable$/,
    },
    {
      name: "OpenFGA answering 400 with a credential in its message: removed",
      answer: { status: 400, body: { code: "validation_error", message: `bad request from Bearer ${CREDENTIAL}` } },
      error: async () => thrown(() => check(fga(base))),
      expected: { type: "FgaApiValidationError", status: 400, code: "validation_error", message: "bad request from Bearer [redacted]" },
      summary: /^FgaApiValidationError 400 validation_error: bad request from Bearer \[redacted\]$/,
    },
    {
      name: "the API server refusing (ApiException): status, reason and message",
      answer: { status: 403, body: { kind: "Status", apiVersion: "v1", status: "Failure", reason: "Forbidden", code: 403, message: 'namespaces is forbidden: User "system:serviceaccount:fundament-system:portcullis" cannot list resource "namespaces"' } },
      error: async () => thrown(() => kube(base).listNamespace()),
      expected: { type: "ApiException", status: 403, reason: "Forbidden", message: 'namespaces is forbidden: User "system:serviceaccount:fundament-system:portcullis" cannot list resource "namespaces"' },
      summary: /^ApiException 403 Forbidden: namespaces is forbidden/,
    },
    {
      name: "the API server unreachable: the connection error's code",
      error: async () => thrown(async () => kube(`http://127.0.0.1:${await freePort()}`).listNamespace()),
      expected: { cause: expect.objectContaining({ code: "ECONNREFUSED" }) },
      summary: /ECONNREFUSED/,
    },
    {
      name: "fetch failed: the cause's code and message",
      error: async () => thrown(async () => fetch(`http://127.0.0.1:${await freePort()}/`, { headers: { authorization: `Bearer ${CREDENTIAL}` } })),
      expected: { type: "TypeError", cause: expect.objectContaining({ code: "ECONNREFUSED", message: expect.stringMatching(/^connect ECONNREFUSED 127\.0\.0\.1:\d+$/) }) },
      summary: /^TypeError \(cause Error ECONNREFUSED: connect ECONNREFUSED 127\.0\.0\.1:\d+\)$/,
    },
  ])("$name", async ({ answer: next, error, expected, summary }) => {
    if (next !== undefined) answer = next;
    const err = await error();
    expect(errorCause(err)).toMatchObject(expected);
    expect(errorSummary(err)).toMatch(summary);
    // Through withDeadline (how every call to a dependency runs), the 503's log line keeps it.
    const wrapped = await thrown(() => withDeadline("dependency", 5_000, () => Promise.reject(err)));
    expect(errorSummary(wrapped)).toBe(`dependency: ${errorSummary(err)}`);
    const line = await logged(wrapped);
    expect(line.err["message"]).toBe(errorSummary(wrapped));
    expect(line.err["cause"]).toMatchObject(expected);
    expect(line.text).not.toContain(CREDENTIAL);
    expect(line.text).not.toContain("c2lnbmF0dXJl");
  });
});
