/**
 * /metrics on the admin port exposes the runtime's health: event-loop delay (p99 and max since the
 * previous scrape), memory outside the V8 heap, ArrayBuffers, RSS. A loop blocked on purpose shows.
 * The build, every dependency's error series from the start, unary gRPC calls by method and code.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { codeName } from "../../src/metrics/grpc-server.ts";
import { BUILD } from "../../src/metrics/build-info.ts";
import { createMetrics, DEPENDENCIES } from "../../src/server/prometheus.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
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

it("has a build-info series and every dependency's error series from the first scrape, at 0", async () => {
  const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
  expect(text).toMatch(new RegExp(`^portcullis_build_info\\{version="${BUILD.version.replaceAll(".", "\\.")}",node="${process.version.replaceAll(".", "\\.")}"\\} 1$`, "m"));
  for (const dependency of DEPENDENCIES) expect(text).toContain(`portcullis_dependency_errors_total{dependency="${dependency}"} 0\n`);
});

it("DEPENDENCIES names every dependency label the code reports", () => {
  // Each withDeadline or publishDependencyCall call names its dependency directly or through a
  // constant defined somewhere in src/ (events.ts's own definition of publishDependencyCall aside).
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []));
  const sources = walk(resolve(import.meta.dirname, "../../src")).map((file) => readFileSync(file, "utf8"));
  const constants = new Map(sources.flatMap((source) => [...source.matchAll(/const ([A-Z_]+) = "([^"]+)"/g)].map((m) => [m[1]!, m[2]!] as const)));
  const named = new Set<string>();
  for (const source of sources) {
    for (const m of source.matchAll(/(?:withDeadline|publishDependencyCall)\(\s*(?:"([^"]+)"|([A-Z_]+)\b)/g)) {
      named.add(m[1] ?? constants.get(m[2]!) ?? `unresolved constant ${m[2]}`);
    }
  }
  expect([...named].sort()).toEqual([...DEPENDENCIES].sort());
});

it("counts unary gRPC calls by method and code name", async () => {
  const client = authorizationClient(`127.0.0.1:${server.server.grpcPort}`);
  await client.check(envoyCheckRequest({ path: "/plugins/sdk/1.0.0/sdk.js", policy: "plugin-assets" }));
  client.close();
  const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
  expect(text).toMatch(/^portcullis_grpc_server_handled_total\{method="envoy\.service\.auth\.v3\.Authorization\/Check",code="OK"\} [1-9]\d*$/m);
  expect(text).toMatch(/^portcullis_grpc_server_handling_seconds_count\{method="envoy\.service\.auth\.v3\.Authorization\/Check"\} [1-9]\d*$/m);
});

it.each([
  [null, "OK"],
  [{ code: 14 }, "UNAVAILABLE"],
  [{ code: 13 }, "INTERNAL"],
  [{}, "UNKNOWN"],
  [{ code: 999 }, "UNKNOWN"],
])("a callback given %j answered %s", (err, name) => {
  expect(codeName(err as never)).toBe(name);
});

it("portcullis_index_proven_lag_seconds: the lag of each proving index as the scrape finds it, none for an index that does not prove or is gone", async () => {
  const indexes: Array<{ index: string; clusterId: string; size: number; synced: boolean; provenLagSeconds?: number }> = [
    { index: "revocations", clusterId: "management", size: 2, synced: true, provenLagSeconds: 2.5 },
    { index: "plugininstallations", clusterId: "c1", size: 1, synced: true, provenLagSeconds: 11 },
    { index: "projects", clusterId: "c1", size: 3, synced: true },
  ];
  const metrics = createMetrics({ indexSizes: () => indexes });
  const lagSeries = async () => (await metrics.metrics()).split("\n").filter((l) => l.startsWith("portcullis_index_proven_lag_seconds{"));
  expect(await lagSeries()).toEqual(['portcullis_index_proven_lag_seconds{index="revocations",cluster_id="management"} 2.5', 'portcullis_index_proven_lag_seconds{index="plugininstallations",cluster_id="c1"} 11']);
  // The cluster removed: its series goes rather than stay at its last lag.
  indexes.splice(1, 1);
  expect(await lagSeries()).toEqual(['portcullis_index_proven_lag_seconds{index="revocations",cluster_id="management"} 2.5']);
});
