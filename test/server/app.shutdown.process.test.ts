/**
 * Graceful shutdown of the real process: `node src/cli/main.ts --config FILE` (the pinned Node from
 * node_modules/.bin, what `npx node` runs) against wire fakes.
 *
 * - With OpenFGA slow, checks are in flight when SIGTERM lands: health must turn NOT_SERVING before
 *   any of them is answered, every one must be answered and audited, the exit status 0, and neither
 *   stdout nor stderr may hold a credential.
 * - With the shipped drain period (shutdown.drainMs, 5 s), checks sent after SIGTERM keep being
 *   answered while health is NOT_SERVING and /readyz fails: Envoy is still sending them until its
 *   health checking moves away. None may be refused.
 * - A second instance on a port that is taken logs why and exits non-zero at once.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { ids, OLD_SECRET, pluginToken, SECRET } from "../support/tokens.ts";
import { healthStatus, watchHealth } from "../support/grpc-health.ts";
import { signatureOf } from "../support/jwt-craft.ts";

const IN_FLIGHT = 50;
/** OpenFGA answers after this, inside the configured deadlines: the checks are slow, not failing. */
const OPENFGA_DELAY_MS = 1_500;
/** The shipped default of shutdown.drainMs. */
const DEFAULT_DRAIN_MS = 5_000;
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let world: ProcessWorld;
const started: PortcullisProcess[] = [];

beforeAll(async () => {
  world = await startProcessWorld("shutdown");
});
afterEach(() => {
  world.openfga.fault = "healthy";
  for (const p of started) p.kill();
});
afterAll(async () => {
  for (const p of started) p.kill();
  await world.stop();
});

async function start(name: string, extra = "", addresses?: Awaited<ReturnType<typeof freeAddresses>>): Promise<PortcullisProcess> {
  const p = spawnPortcullis(world, addresses ?? (await freeAddresses()), { name, extra });
  started.push(p);
  return p;
}

async function serving(p: PortcullisProcess): Promise<void> {
  await until(async () => (await healthStatus(p.addresses.grpc)) === "SERVING", 20_000, "portcullis to start and its index to sync (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${p.stderr()}`);
  });
}

describe("SIGTERM", () => {
  it("with checks in flight: NOT_SERVING first, every check answered and audited, exit 0, no credential on stdout or stderr", { timeout: 60_000 }, async () => {
    const p = await start("in-flight", "shutdown: { drainMs: 500 }");
    const address = p.addresses.grpc;
    await serving(p);

    const health = watchHealth(address);
    await until(() => health.statuses.includes("SERVING"), 2_000, "the health watch to report SERVING");
    const events: Array<{ at: number; what: string }> = [];
    health.statuses.length = 0;
    const recordHealth = setInterval(() => {
      while (health.statuses.length > 0) events.push({ at: performance.now(), what: `health ${health.statuses.shift()}` });
    }, 1);

    world.openfga.slowMs = OPENFGA_DELAY_MS;
    world.openfga.fault = "slow";
    const client = authorizationClient(address);
    const token = await pluginToken();
    const requestIds = Array.from({ length: IN_FLIGHT }, (_, i) => `shutdown-${i}`);
    const answers = requestIds.map((id) =>
      client
        .check(envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${token}`, "x-request-id": id }, policy: "kube-api-proxy" }))
        .then((res) => {
          events.push({ at: performance.now(), what: "answer" });
          return summarize(res as CheckResponse);
        }),
    );
    // Every check is waiting on OpenFGA (one coalesced Check per user and cluster) before the signal.
    await until(() => world.openfga.pendingRequests > 0, 2_000, "the checks to reach OpenFGA");
    p.child.kill("SIGTERM");

    const results = await Promise.all(answers);
    const exit = await p.exited;
    events.push({ at: exit.at, what: "exit" });
    clearInterval(recordHealth);
    while (health.statuses.length > 0) events.push({ at: performance.now(), what: `health ${health.statuses.shift()}` });
    health.close();
    client.close();

    expect(results.map((r) => (r.allowed ? "allowed" : r.reason))).toEqual(requestIds.map(() => "allowed"));
    const notServing = events.findIndex((e) => e.what === "health NOT_SERVING");
    const firstAnswer = events.findIndex((e) => e.what === "answer");
    expect(notServing, JSON.stringify(events.slice(0, 5))).toBeGreaterThanOrEqual(0);
    expect(notServing).toBeLessThan(firstAnswer);
    expect(exit.code).toBe(0);
    // Nothing (an open health Watch included) holds the process once the last check is answered.
    expect(exit.at - events.findLast((e) => e.what === "answer")!.at).toBeLessThan(2_000);

    const audits = p.lines().filter((l) => l["audit"] === "plugin_request");
    expect(audits.map((a) => a["request_id"]).sort()).toEqual([...requestIds].sort());
    expect(audits.every((a) => a["decision"] === "allowed")).toBe(true);

    for (const secret of [SECRET, OLD_SECRET, token, signatureOf(token), world.kube.bearer, ...world.kube.issuedTokens]) {
      expect(p.stdout()).not.toContain(secret);
      expect(p.stderr()).not.toContain(secret);
    }
    expect(p.stderr()).toBe("");
    console.log(
      `shutdown: ${IN_FLIGHT} checks in flight at SIGTERM, ${results.length} answered, ${audits.length} audit lines, exit ${String(exit.code)}, NOT_SERVING ${(events[firstAnswer]!.at - events[notServing]!.at).toFixed(0)} ms before the first answer, exit ${(exit.at - events.findLast((e) => e.what === "answer")!.at).toFixed(0)} ms after the last`,
    );
  });

  it("the shipped drain period: checks sent after SIGTERM are all answered while NOT_SERVING and /readyz 503, then exit 0", { timeout: 60_000 }, async () => {
    const p = await start("drain");
    const address = p.addresses.grpc;
    await serving(p);
    const client = authorizationClient(address);
    const token = await pluginToken();
    const ask = (i: number) =>
      client
        .check(envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${token}`, "x-request-id": `drain-${i}` }, policy: "kube-api-proxy" }))
        .then(
          (res) => {
            const s = summarize(res as CheckResponse);
            return s.allowed ? "allowed" : `denied ${s.reason}`;
          },
          (err: { code?: number }) => `refused (gRPC ${String(err.code)})`,
        );
    expect(await ask(-1)).toBe("allowed");

    const signalled = performance.now();
    p.child.kill("SIGTERM");
    const answers: Array<Promise<string>> = [];
    const healthDuring: string[] = [];
    const readyDuring: Array<number | string> = [];
    // Envoy keeps sending until its health checks see NOT_SERVING: one check every 100 ms for most of the drain period.
    for (let i = 0; performance.now() - signalled < DEFAULT_DRAIN_MS - 1_000; i++) {
      answers.push(ask(i));
      if (i % 10 === 5) {
        healthDuring.push(await healthStatus(address));
        readyDuring.push(await fetch(`http://${p.addresses.admin}/readyz`).then((r) => r.status, () => "refused"));
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const results = await Promise.all(answers);
    const exit = await p.exited;
    client.close();

    const tally = results.reduce<Record<string, number>>((t, r) => ({ ...t, [r]: (t[r] ?? 0) + 1 }), {});
    expect(tally, JSON.stringify(tally)).toEqual({ allowed: results.length });
    expect(results.length).toBeGreaterThanOrEqual(30);
    expect(healthDuring.length).toBeGreaterThanOrEqual(3);
    expect(new Set(healthDuring)).toEqual(new Set(["NOT_SERVING"]));
    expect(new Set(readyDuring)).toEqual(new Set([503]));
    expect(exit.code).toBe(0);
    expect(exit.at - signalled).toBeGreaterThanOrEqual(DEFAULT_DRAIN_MS - 100);
    expect(exit.at - signalled).toBeLessThan(DEFAULT_DRAIN_MS + 5_000);
    expect(p.lines().filter((l) => l["audit"] === "plugin_request")).toHaveLength(results.length + 1);
    console.log(`drain: ${results.length} checks sent during the drain period, ${tally["allowed"]} answered allowed, none refused; exit 0 ${(exit.at - signalled).toFixed(0)} ms after SIGTERM`);
  });
});

it("a second instance whose port is taken logs the error and exits non-zero promptly; the first keeps serving", { timeout: 60_000 }, async () => {
  const first = await start("first");
  await serving(first);
  const second = await start("second", "", first.addresses);
  const startedAt = performance.now();
  const exit = await Promise.race([second.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000))]);
  expect(exit, `the second instance is still alive; stderr: ${second.stderr()}`).toBeDefined();
  expect(exit!.code).not.toBe(0);
  expect(exit!.code).not.toBeNull();
  expect(exit!.at - startedAt).toBeLessThan(5_000);
  expect(second.stderr()).toMatch(/EADDRINUSE|address already in use/);
  expect(second.lines().filter((l) => l["msg"] === "portcullis failed to start")).toHaveLength(1);
  expect(second.child.exitCode).not.toBeNull();
  expect(await healthStatus(first.addresses.grpc)).toBe("SERVING");
  console.log(`taken port: second instance exited ${String(exit!.code)} after ${(exit!.at - startedAt).toFixed(0)} ms: ${second.stderr().trim()}`);
});
