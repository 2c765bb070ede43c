/**
 * portcullis's own work per check, without gRPC or
 * HTTP/2 — the CheckRequest decoded by the deserializer grpc-js uses, the checker, the CheckResponse
 * encoded by the serializer — in a loop, on this process's CPU time. portcullis's scenarios use the
 * server's (protos.ts checkService); `noop` uses proto-loader's, as bench/noop-server.ts does. Quieter than
 * a load test, so a change to the hot path shows up even on a busy machine.
 *
 * The runner reports it beside the load tests; alone it is the quick loop for working on the hot path:
 *
 *   node bench/hot-path.ts [--scenario plugin-token|user-token|plugin-assets|noop] [--checks 200000] [--json] [--pace-us 0]
 *   node --cpu-prof bench/hot-path.ts …
 *
 * `--pace-us 333` runs one check at a time with the thread asleep 333 µs before each, as a server
 * offered 3,000 checks/s sleeps in epoll between requests. The same code then costs several times
 * its tight-loop figure (caches, TLB and branch predictors have gone cold or been used by others):
 * that, not gRPC or timers, is most of what a fixed-rate load test charges above this loop.
 */
import { openSync } from "node:fs";
import { parseArgs } from "node:util";
import pino from "pino";
import { createChecker } from "../src/authz/check.ts";
import { configSchema } from "../src/config/schema.ts";
import { authorizationService, checkService } from "../src/envoy/protos.ts";
import { policiesFor } from "../src/server/policies.ts";
import { createLogging } from "../src/server/logging.ts";
import { createMetrics } from "../src/metrics/prometheus.ts";
import { SECRET } from "../test/support/tokens.ts";
import { warmPorts } from "./warm-ports.ts";
import { assetRequests, BENCH_TOKEN_LIFETIMES, benchWorld, pluginTokenRequests, userTokenRequests } from "./workload.ts";

const { values } = parseArgs({
  options: { scenario: { type: "string", default: "plugin-token" }, checks: { type: "string", default: "200000" }, json: { type: "boolean", default: false }, "pace-us": { type: "string", default: "0" } },
  strict: false,
});
const scenario = String(values.scenario);
const total = Number(values.checks);
const paceMs = Number(values["pace-us"]) / 1000;

const world = benchWorld(250);
const requests =
  scenario === "user-token" ? await userTokenRequests(1000) : scenario === "plugin-assets" ? assetRequests(1000) : await pluginTokenRequests(world, 1000);
const method = (scenario === "noop" ? authorizationService() : checkService())["Check"]!;
// ghz's JSON form of the Timestamp is not what proto-loader encodes from.
for (const r of requests) delete ((r["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
const wire = requests.map((r) => method.requestSerialize(r));

process.env["PORTCULLIS_BENCH_SECRET"] = SECRET;
const config = configSchema.parse({
  logLevel: "info",
  tokens: { secrets: [{ env: "PORTCULLIS_BENCH_SECRET" }], maxLifetimeSeconds: BENCH_TOKEN_LIFETIMES },
  openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
  clusters: world.clusterIds.map((id) => ({ id, kubeconfig: "/nonexistent" })),
});
// Synchronous: this loop never waits for I/O, so an asynchronous stream would never drain and would
// hold every audit line of the run (300,000 outgrew the shipped 256 MiB old generation). Audit lines
// still reach it in batches (src/server/logging.ts), one write each.
const logging = createLogging("info", pino.destination({ dest: openSync("/dev/null", "w"), sync: true }));
const ports = warmPorts(world);
createMetrics({ indexSizes: ports.indexSizes });
const check = createChecker({ policies: policiesFor(config, ports), audit: logging.audit, timeoutMs: 800, retryAfterSeconds: 1, logger: logging.logger });
const OK = { status: { code: 0, message: "" }, ok_response: { headers: [], headers_to_remove: [] } };

async function one(i: number): Promise<number> {
  const message = method.requestDeserialize(wire[i % wire.length]!);
  const response = scenario === "noop" ? OK : await check(message);
  return method.responseSerialize(response).length;
}

/** Atomics.wait on a cell nobody changes: a plain sleep of the thread, without the event loop. */
const asleep = new Int32Array(new SharedArrayBuffer(4));

async function run(n: number, gapMs: number): Promise<void> {
  if (gapMs > 0) {
    for (let i = 0; i < n; i++) {
      Atomics.wait(asleep, 0, 0, gapMs);
      await one(i);
    }
    return;
  }
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < n) await one(next++);
    }),
  );
}

// The warm-up is never paced: the JIT has compiled the path before anything is measured.
await run(20_000, 0);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await run(total, paceMs);
const cpu = process.cpuUsage(cpu0);
const wall = performance.now() - t0;
const us = (cpu.user + cpu.system) / total;
const paced = paceMs > 0 ? `, paced ${values["pace-us"]} µs apart` : "";
if (values.json) process.stdout.write(`${JSON.stringify({ scenario, cpuUsPerCheck: us, checks: total, ...(paceMs > 0 ? { paceUs: paceMs * 1000 } : {}) })}\n`);
else process.stdout.write(`${scenario}: ${us.toFixed(2)} µs CPU per check (decode + check + encode${paced}), ${((total / wall) * 1000).toFixed(0)} checks/s wall\n`);
await logging.flush();
process.exit(0);
