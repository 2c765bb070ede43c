/**
 * What a SIGKILL (kill -9, the OOM killer, the watchdog's kill of a frozen event loop) can take from
 * the audit trail. Audit lines are written in batches (src/server/logging.ts): a line waits at most
 * AUDIT_FLUSH_MS (5 ms) for the next write, and SIGTERM, an exit or a crash write every pending line
 * (test/server/app.shutdown.process.test.ts, test/server/audit-line.test.ts). A SIGKILL runs no code, so it
 * loses the lines accepted in the last AUDIT_FLUSH_MS before it, plus however long the event loop
 * took to reach the write timer.
 *
 * A real portcullis process under steady Check load is killed with SIGKILL; every check answered
 * more than LOSS_BOUND_MS before the kill must have its audit line on stdout. LOSS_BOUND_MS is
 * AUDIT_FLUSH_MS plus the scheduling slack of a shared CI machine; the test prints the window it
 * actually lost.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { AUDIT_FLUSH_MS } from "../../src/server/logging.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { healthStatus } from "../support/grpc-health.ts";

/** The flush interval and the event loop's lag under this load on two shared cores. */
const LOSS_BOUND_MS = AUDIT_FLUSH_MS + 250;
const CONCURRENCY = 16;
/** Load before the kill: long enough that the batches run in their steady state. */
const LOAD_MS = 1_500;
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let world: ProcessWorld;
let portcullis: PortcullisProcess;

beforeAll(async () => {
  world = await startProcessWorld("audit-kill");
  portcullis = spawnPortcullis(world, await freeAddresses(), { name: "audit-kill" });
});
afterAll(async () => {
  portcullis.kill();
  await world.stop();
});

it(`SIGKILL under load loses only audit lines of checks answered in the last ${LOSS_BOUND_MS} ms`, { timeout: 60_000 }, async () => {
  await until(async () => (await healthStatus(portcullis.addresses.grpc)) === "SERVING", 20_000, "portcullis to start (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${portcullis.stderr()}`);
  });
  const stdoutEnded = new Promise<void>((r) => portcullis.child.stdout.once("end", () => r()));
  const client = authorizationClient(portcullis.addresses.grpc);
  const token = await pluginToken();
  /** Request id → when its allow arrived (performance.now()). */
  const answeredAt = new Map<string, number>();
  let killed = false;
  let sent = 0;
  const loops = Array.from({ length: CONCURRENCY }, async () => {
    while (!killed) {
      const id = `kill-${sent++}`;
      try {
        const res = summarize(
          (await client.check(envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${token}`, "x-request-id": id }, policy: "kube-api-proxy" }))) as CheckResponse,
        );
        if (res.allowed) answeredAt.set(id, performance.now());
      } catch {
        // The checks in flight at the kill fail: no answer, no claim on the audit trail.
      }
    }
  });
  await new Promise((r) => setTimeout(r, LOAD_MS));
  portcullis.child.kill("SIGKILL");
  const killedAt = performance.now();
  killed = true;
  await Promise.all(loops);
  const exit = await portcullis.exited;
  await stdoutEnded;
  client.close();

  expect(exit.signal).toBe("SIGKILL");
  const audited = new Set(portcullis.lines().filter((l) => l["audit"] === "plugin_request").map((l) => l["request_id"]));
  const answeredBeforeKill = [...answeredAt].filter(([, at]) => at <= killedAt);
  expect(answeredBeforeKill.length).toBeGreaterThan(100);
  const lost = answeredBeforeKill.filter(([id]) => !audited.has(id));
  const lostWindowMs = Math.max(0, ...lost.map(([, at]) => killedAt - at));
  expect(lostWindowMs, `${lost.length} answered checks have no audit line`).toBeLessThanOrEqual(LOSS_BOUND_MS);
  console.log(
    `SIGKILL under load: ${answeredBeforeKill.length} checks answered, ${lost.length} without an audit line, all answered within ${lostWindowMs.toFixed(1)} ms before the kill (bound ${LOSS_BOUND_MS} ms)`,
  );
});
