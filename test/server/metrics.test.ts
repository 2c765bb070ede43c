/**
 * /metrics on the admin port exposes the runtime's health: event-loop delay (p99 and max since the
 * previous scrape), memory outside the V8 heap, ArrayBuffers, RSS. A loop blocked on purpose shows.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer(new FakeWorld());
});
afterAll(async () => server.stop());

async function scrape(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
  const values = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = /^([a-z0-9_]+)(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (match !== null && !values.has(match[1]!)) values.set(match[1]!, Number(match[2]));
  }
  return values;
}

it("exposes event-loop delay, external memory, ArrayBuffers and RSS", async () => {
  const values = await scrape();
  for (const name of [
    "nodejs_eventloop_lag_p99_seconds",
    "nodejs_eventloop_lag_max_seconds",
    "nodejs_external_memory_bytes",
    "portcullis_memory_array_buffers_bytes",
    "process_resident_memory_bytes",
  ]) {
    expect(values.get(name) ?? Number.NaN, name).toBeGreaterThanOrEqual(0);
  }
  expect(values.get("portcullis_memory_array_buffers_bytes")).toBeGreaterThan(0);
  expect(values.get("portcullis_memory_array_buffers_bytes")).toBeLessThanOrEqual(values.get("nodejs_external_memory_bytes")!);
});

it("a blocked event loop shows in the max delay of the next scrape", async () => {
  await scrape();
  await new Promise((r) => setTimeout(r, 50));
  const blockedUntil = performance.now() + 400;
  while (performance.now() < blockedUntil) {
    // Busy: nothing else runs on this thread.
  }
  await new Promise((r) => setTimeout(r, 50));
  const values = await scrape();
  expect(values.get("nodejs_eventloop_lag_max_seconds")).toBeGreaterThanOrEqual(0.3);
});
