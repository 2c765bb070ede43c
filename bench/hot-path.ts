/**
 * portcullis's own work per check, without gRPC or
 * HTTP/2 — the CheckRequest decoded by the deserializer grpc-js uses, the checker, the CheckResponse
 * encoded by the serializer — in a loop, on this process's CPU time. portcullis's scenarios use the
 * server's (protos.ts checkService); `noop` uses proto-loader's, as bench/noop-server.ts does, and
 * `noop-same-bytes` decodes as the server does and answers scenario 3's allow encoded once, as
 * `bench/noop-server.ts --scenario same-bytes` does. Quieter than
 * a load test, so a change to the hot path shows up even on a busy machine.
 *
 * The runner reports it beside the load tests; alone it is the quick loop for working on the hot path:
 *
 *   node bench/hot-path.ts [--scenario plugin-token|user-token|plugin-assets|noop|noop-same-bytes] [--checks 200000] [--json] [--pace-us 0]
 *   node bench/hot-path.ts … --profile-file F.cpuprofile   # V8's CPU profile of the measured checks only, and its sampling heap profile (F.cpuprofile.heapprofile)
 *   node bench/hot-path.ts … --handler                    # through the server's Check handler (check-handler.ts: queued, decided from setImmediate), its gRPC metrics and tracing wrapper
 *   node bench/hot-path.ts … --count-promises             # also the promises a check creates (counted apart from the measured checks)
 *
 * `--pace-us 333` runs one check at a time with the thread asleep 333 µs before each, as a server
 * offered 3,000 checks/s sleeps in epoll between requests. The same code then costs several times
 * its tight-loop figure (caches, TLB and branch predictors have gone cold or been used by others):
 * that, not gRPC or timers, is most of what a fixed-rate load test charges above this loop.
 *
 * Beside the CPU time it reports the bytes the V8 heap allocated per check (v8.GCProfiler: what each
 * GC found in use less what the previous one left, plus the growth since the last).
 */
import { createHook } from "node:async_hooks";
import { openSync } from "node:fs";
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { parseArgs } from "node:util";
import { GCProfiler, getHeapStatistics } from "node:v8";
import type * as grpc from "@grpc/grpc-js";
import pino from "pino";
import { createChecker } from "../src/authz/check.ts";
import { configSchema } from "../src/config/schema.ts";
import { authorizationService, checkService } from "../src/envoy/protos.ts";
import { policiesFor } from "../src/server/policies.ts";
import { createLogging } from "../src/server/logging.ts";
import { createMetrics } from "../src/server/prometheus.ts";
import { instrumented } from "../src/metrics/grpc-server.ts";
import { checkHandler } from "../src/server/check-handler.ts";
import { tracedChecks } from "../src/tracing/spans.ts";
import { SECRET } from "../test/support/tokens.ts";
import { encodedScenario3Allow } from "./scenario3-allow.ts";
import { allocatedSince } from "./servers/common.ts";
import { warmPorts } from "./warm-ports.ts";
import { assetRequests, BENCH_TOKEN_LIFETIMES, benchWorld, pluginTokenRequests, userTokenRequests } from "./workload.ts";

const { values } = parseArgs({
  options: {
    scenario: { type: "string", default: "plugin-token" },
    checks: { type: "string", default: "200000" },
    json: { type: "boolean", default: false },
    "pace-us": { type: "string", default: "0" },
    "profile-file": { type: "string", default: "" },
    /** The CPU profile's sampling interval: the default's cost distorts a paced run's figures. */
    "profile-interval-us": { type: "string", default: "100" },
    handler: { type: "boolean", default: false },
    "count-promises": { type: "boolean", default: false },
  },
  strict: false,
});
const scenario = String(values.scenario);
const total = Number(values.checks);
const paceMs = Number(values["pace-us"]) / 1000;

const world = benchWorld(250);
const requests =
  scenario === "user-token" ? await userTokenRequests(1000) : scenario === "plugin-assets" ? assetRequests(1000) : await pluginTokenRequests(world, 1000);
const method = (scenario === "noop" ? authorizationService() : checkService())["Check"]!;
const SAME_BYTES = encodedScenario3Allow();
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
// As startServer registers it: the handler, wrapped by withCallMetrics, over the traced check (tracing off).
const handler = instrumented(scenario === "noop" ? authorizationService() : checkService(), { Check: checkHandler(tracedChecks(check), { inFlight: 0, started: 0 }) })["Check"] as grpc.handleUnaryCall<unknown, unknown>;
const NO_METADATA = { get: () => [] };

/** One Check through the server's handler, as grpc-js calls it. */
function handled(message: unknown): Promise<unknown> {
  return new Promise((resolve, reject) =>
    handler({ request: message, metadata: NO_METADATA } as unknown as grpc.ServerUnaryCall<unknown, unknown>, (err, value) => (err ? reject(err) : resolve(value))),
  );
}

async function one(i: number): Promise<number> {
  const message = method.requestDeserialize(wire[i % wire.length]!);
  // Pre-encoded: grpc-js sends what the serializer returns, here the bytes as they are.
  if (scenario === "noop-same-bytes") return SAME_BYTES.length;
  const response = scenario === "noop" ? OK : values.handler ? await handled(message) : await check(message);
  return method.responseSerialize(response).length;
}

/** Promises created per check (async_hooks' PROMISE resources), the bench's own `one()` included. */
async function promisesPerCheck(n: number): Promise<number> {
  let promises = 0;
  const hook = createHook({ init: (_id, type) => void (type === "PROMISE" && promises++) }).enable();
  await run(n, 0);
  hook.disable();
  return promises / n;
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
const profiler = values["profile-file"] ? new Session() : undefined;
if (profiler !== undefined) {
  profiler.connect();
  await profiler.post("Profiler.enable");
  await profiler.post("Profiler.setSamplingInterval", { interval: Number(values["profile-interval-us"]) });
  await profiler.post("Profiler.start");
  await profiler.post("HeapProfiler.enable");
  await profiler.post("HeapProfiler.startSampling", { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
}
const gc = new GCProfiler();
gc.start();
const heap0 = getHeapStatistics().used_heap_size;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await run(total, paceMs);
const cpu = process.cpuUsage(cpu0);
const wall = performance.now() - t0;
const us = (cpu.user + cpu.system) / total;
const bytesPerCheck = allocatedSince(heap0, gc.stop()?.statistics ?? [], getHeapStatistics().used_heap_size) / total;
if (profiler !== undefined) {
  writeFileSync(String(values["profile-file"]), JSON.stringify((await profiler.post("Profiler.stop")).profile));
  writeFileSync(`${values["profile-file"]}.heapprofile`, JSON.stringify((await profiler.post("HeapProfiler.stopSampling")).profile));
}
const paced = paceMs > 0 ? `, paced ${values["pace-us"]} µs apart` : "";
// Counted after the measured checks, apart from them: an async hook slows every promise.
if (values["count-promises"]) process.stdout.write(`${scenario}: ${(await promisesPerCheck(2_000)).toFixed(2)} promises per check\n`);
if (values.json) process.stdout.write(`${JSON.stringify({ scenario, cpuUsPerCheck: us, bytesPerCheck, checks: total, ...(paceMs > 0 ? { paceUs: paceMs * 1000 } : {}) })}\n`);
else process.stdout.write(`${scenario}: ${us.toFixed(2)} µs CPU per check (decode + check + encode${paced}), ${(bytesPerCheck / 1024).toFixed(1)} KiB allocated per check, ${((total / wall) * 1000).toFixed(0)} checks/s wall\n`);
await logging.flush();
process.exit(0);
