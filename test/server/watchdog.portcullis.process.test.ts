/**
 * The watchdog ends a real portcullis whose event loop is blocked. The child runs the shipped
 * defaults (watchdog on, 5 s); the test blocks its main thread from outside with a busy loop through
 * the Node inspector (`--inspect`, the port Node picks), which is how a loop stuck in native code
 * looks from the watchdog process: no timer runs, no signal handler answers.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { healthStatus } from "../support/grpc-health.ts";
import { evaluateInProcess } from "../support/inspector.ts";

const DEFAULT_TIMEOUT_MS = 5_000;

let world: ProcessWorld;
let portcullis: PortcullisProcess;

beforeAll(async () => {
  world = await startProcessWorld("watchdog");
  portcullis = spawnPortcullis(world, await freeAddresses(), { name: "watchdog", nodeArgs: ["--inspect=127.0.0.1:0"] });
});

afterAll(async () => {
  portcullis.kill();
  await world.stop();
});

it("a blocked event loop: one stderr line, then the process is killed within the timeout (shipped default 5 s)", { timeout: 60_000 }, async () => {
  await until(async () => (await healthStatus(portcullis.addresses.grpc)) === "SERVING", 20_000, "portcullis to start (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${portcullis.stderr()}`);
  });
  // An event loop that answers is left alone, well past the timeout.
  await new Promise((r) => setTimeout(r, DEFAULT_TIMEOUT_MS + 1_500));
  expect(portcullis.child.exitCode).toBeNull();
  expect(portcullis.child.signalCode).toBeNull();
  expect(await healthStatus(portcullis.addresses.grpc)).toBe("SERVING");

  const blockedAt = performance.now();
  await evaluateInProcess(portcullis, "for (;;) {}");
  const exit = await Promise.race([portcullis.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), DEFAULT_TIMEOUT_MS + 10_000))]);
  expect(exit, "the process is still alive with its event loop blocked").toBeDefined();
  const afterMs = exit!.at - blockedAt;
  // Killed, not exited by itself: a non-zero status (137 in a container).
  expect(exit!.signal).toBe("SIGKILL");
  expect(afterMs).toBeGreaterThanOrEqual(DEFAULT_TIMEOUT_MS - 500);
  expect(afterMs).toBeLessThan(DEFAULT_TIMEOUT_MS + 3_000);
  const lines = portcullis
    .stderr()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines).toEqual([expect.objectContaining({ level: 60, msg: "event loop stalled; the watchdog is ending the process", timeout_ms: DEFAULT_TIMEOUT_MS })]);
  console.log(`watchdog: event loop blocked, process killed (SIGKILL) ${afterMs.toFixed(0)} ms later (timeout ${DEFAULT_TIMEOUT_MS} ms)`);
});
