/**
 * The OTLP/HTTP export as configured (tracing.otlp): spans reach a collector on loopback, batched,
 * flushed at shutdown; a collector that does not answer is a warning in the log, never a failed Check.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import pino from "pino";
import { afterEach, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import type { CheckRequestMessage } from "../../src/envoy/check-request.ts";
import { startTracing } from "../../src/tracing/setup.ts";
import { tracedChecks } from "../../src/tracing/spans.ts";
import { freePort } from "../harness/ports.ts";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const request: CheckRequestMessage = {
  attributes: { request: { http: { method: "GET", path: "/", headers: { traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01` } } } },
};
const answer = async () => ({ status: { code: 0, message: "" } });

let collector: Server | undefined;
afterEach(async () => {
  await new Promise<void>((r) => (collector === undefined ? r() : collector.close(() => r())));
  collector = undefined;
});

function logSink(): { logger: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(String(chunk));
      cb();
    },
  });
  return { logger: pino({ level: "info" }, sink), lines: () => chunks.join("").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>) };
}

it("exports a Check's span to the configured collector, by the end of shutdown", async () => {
  const received: Array<{ path: string; type: string; body: Buffer }> = [];
  collector = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({ path: req.url ?? "", type: req.headers["content-type"] ?? "", body: Buffer.concat(chunks) });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => collector!.listen(0, "127.0.0.1", () => r()));
  const port = (collector.address() as AddressInfo).port;
  const { logger, lines } = logSink();
  const tracing = await startTracing(configSchema.shape.tracing.parse({ enabled: true, otlp: { endpoint: `http://127.0.0.1:${port}/v1/traces` } }), logger);
  expect(await tracedChecks(answer)(request)).toEqual({ status: { code: 0, message: "" } });
  await tracing.shutdown();
  expect(received).toHaveLength(1);
  expect(received[0]).toMatchObject({ path: "/v1/traces", type: "application/json" });
  const exported = JSON.parse(received[0]!.body.toString("utf8")) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ traceId: string; name: string }> }> }> };
  const spans = exported.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans));
  expect(spans.map((s) => [s.traceId, s.name])).toEqual([[TRACE_ID, "envoy.service.auth.v3.Authorization/Check"]]);
  expect(lines().filter((l) => l["dependency"] === "otlp")).toEqual([]);
});

it("a collector that does not answer costs a warning, and the Check is answered all the same", async () => {
  const closed = await freePort();
  const { logger, lines } = logSink();
  const tracing = await startTracing(
    configSchema.shape.tracing.parse({ enabled: true, otlp: { endpoint: `http://127.0.0.1:${closed}/v1/traces`, timeoutMs: 500 } }),
    logger,
  );
  expect(await tracedChecks(answer)(request)).toEqual({ status: { code: 0, message: "" } });
  await tracing.shutdown();
  const warnings = lines().filter((l) => l["dependency"] === "otlp");
  expect(warnings.length).toBeGreaterThan(0);
  expect(warnings[0]).toMatchObject({ level: 40 });
  expect(String(warnings[0]!["msg"])).toMatch(/^tracing: /);
});
