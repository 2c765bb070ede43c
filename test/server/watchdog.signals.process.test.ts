/**
 * A signal to portcullis's whole process group — a container runtime's or a supervisor's SIGTERM, a
 * terminal's SIGINT, a SIGHUP reload sent to the group — reaches the watchdog too. It is
 * portcullis's to act on: the watchdog lives through it and watches the shutdown, writing no error;
 * its own unexpected end is still an error (watchdog.process.test.ts).
 */
import { readFileSync } from "node:fs";
import { afterEach, beforeAll, afterAll, expect, it } from "vitest";
import { childPids } from "../support/child-pids.ts";
import { healthStatus } from "../support/grpc-health.ts";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";

let world: ProcessWorld;
const started: PortcullisProcess[] = [];

beforeAll(async () => {
  world = await startProcessWorld("watchdog-signals");
});
afterEach(() => {
  for (const p of started.splice(0)) p.kill();
});
afterAll(async () => world.stop());

async function serving(name: string): Promise<{ portcullis: PortcullisProcess; watchdog: number }> {
  const portcullis = spawnPortcullis(world, await freeAddresses(), { name, processGroup: true, extra: "shutdown: { drainMs: 1000 }" });
  started.push(portcullis);
  await until(async () => (await healthStatus(portcullis.addresses.grpc)) === "SERVING", 20_000, "portcullis to start (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${portcullis.stderr()}`);
  });
  const children = childPids(portcullis.child.pid!).filter((pid) => readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "bash");
  expect(children).toHaveLength(1);
  return { portcullis, watchdog: children[0]! };
}

const errors = (p: PortcullisProcess) => p.lines().filter((l) => (l["level"] as number) >= 50);
const alive = (pid: number) => {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
};

it.each(["SIGTERM", "SIGINT"] as const)("%s to the process group: a clean shutdown, exit 0, no error line, the watchdog watching to the end", { timeout: 60_000 }, async (signal) => {
  const { portcullis, watchdog } = await serving(`group-${signal}`);
  process.kill(-portcullis.child.pid!, signal);
  // Mid-drain: portcullis is shutting down, the watchdog still runs.
  await new Promise((r) => setTimeout(r, 300));
  expect(alive(watchdog), "the watchdog during the shutdown").toBe(true);
  expect((await portcullis.exited).code).toBe(0);
  await until(async () => !alive(watchdog), 2_000, "the watchdog to end with portcullis");
  expect(errors(portcullis)).toEqual([]);
  expect(portcullis.stderr()).toBe("");
});

it("SIGHUP to the process group: the configuration reloads and the watchdog still watches", { timeout: 60_000 }, async () => {
  const { portcullis, watchdog } = await serving("group-SIGHUP");
  process.kill(-portcullis.child.pid!, "SIGHUP");
  await until(async () => portcullis.lines().some((l) => l["msg"] === "signal received: reloading the configuration"), 5_000, "the reload");
  await new Promise((r) => setTimeout(r, 500));
  expect(alive(watchdog)).toBe(true);
  expect(errors(portcullis)).toEqual([]);
  expect(await healthStatus(portcullis.addresses.grpc)).toBe("SERVING");
});

it("SIGPIPE to the process group: Node ignores it, and so does the watchdog", { timeout: 60_000 }, async () => {
  const { portcullis, watchdog } = await serving("group-SIGPIPE");
  process.kill(-portcullis.child.pid!, "SIGPIPE");
  await new Promise((r) => setTimeout(r, 500));
  expect(alive(watchdog), "the watchdog after SIGPIPE").toBe(true);
  expect(errors(portcullis)).toEqual([]);
  expect(await healthStatus(portcullis.addresses.grpc)).toBe("SERVING");
});
