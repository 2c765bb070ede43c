/**
 * The watchdog's kill reaches portcullis as the image runs it. In a container the ENTRYPOINT's
 * process is its PID namespace's init, and the kernel drops a signal sent to that init from inside
 * the namespace unless init handles it, SIGKILL included: node as PID 1 could not be ended by its
 * own watchdog. The Dockerfile's ENTRYPOINT runs node under tini; this test runs that ENTRYPOINT
 * (Debian's tini, the pinned node, the shipped flags) as the init of a PID namespace of its own
 * (`unshare --pid --fork`), blocks the event loop, and reads the exit. The same command without
 * tini shows what the init is for: node is PID 1 and outlives the kill.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { afterEach, beforeAll, afterAll, describe, expect, it } from "vitest";
import { resolveBinary } from "../harness/binaries.ts";
import { freeAddresses, MAIN, NODE, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { healthStatus } from "../support/grpc-health.ts";
import { evaluateInProcess } from "../support/inspector.ts";

const TIMEOUT_MS = 1_000;
const STALL_LINE = "event loop stalled; the watchdog is ending the process";
const PID1_WARNING = /portcullis is its container's init \(PID 1\)/;

/** The Dockerfile's ENTRYPOINT with this machine's paths: tini from scripts/deps, the pinned node (inspectable), main.ts. */
function imageEntrypoint(): string[] {
  const dockerfile = readFileSync(resolve(import.meta.dirname, "../../Dockerfile"), "utf8");
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]!) as string[];
  return entrypoint.flatMap((arg) => {
    if (arg === "tini") return [resolveBinary("tini")];
    if (arg === "node") return [NODE, "--inspect=127.0.0.1:0"];
    if (arg === "src/cli/main.ts") return [MAIN];
    return [arg];
  });
}

/** A PID namespace of its own; --kill-child: the namespace's processes die with the test's handle on it. */
const inPidNamespace = (command: readonly string[]) => ["unshare", "--pid", "--fork", "--kill-child", ...command];

let world: ProcessWorld;
let portcullis: PortcullisProcess | undefined;

beforeAll(async () => {
  world = await startProcessWorld("watchdog-pid1");
});
afterEach(() => portcullis?.kill());
afterAll(async () => {
  await world.stop();
});

async function startAndBlock(name: string, command: readonly string[]): Promise<{ process: PortcullisProcess; blockedAt: number }> {
  const started = spawnPortcullis(world, await freeAddresses(), { name, command, extra: `watchdog: { timeoutMs: ${TIMEOUT_MS} }` });
  portcullis = started;
  await until(async () => (await healthStatus(started.addresses.grpc)) === "SERVING", 20_000, `${name} to start (SERVING)`).catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${started.stderr()}`);
  });
  const blockedAt = performance.now();
  await evaluateInProcess(started, "for (;;) {}");
  return { process: started, blockedAt };
}

const stallLines = (p: PortcullisProcess) =>
  p
    .stderr()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l["msg"] === STALL_LINE);

describe("the watchdog in a PID namespace", () => {
  it("the image's ENTRYPOINT (node under tini, tini PID 1): a blocked event loop ends the container, exit status 137", { timeout: 60_000 }, async () => {
    const entrypoint = imageEntrypoint();
    expect(entrypoint[0]).toBe(resolveBinary("tini"));
    const { process: p, blockedAt } = await startAndBlock("entrypoint", inPidNamespace(entrypoint));
    const exit = await Promise.race([p.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), TIMEOUT_MS + 10_000))]);
    expect(exit, `still running with its event loop blocked; stderr: ${p.stderr()}`).toBeDefined();
    // tini exits 128 + the signal that ended node; unshare exits with its init's status.
    expect(exit!).toMatchObject({ code: 137, signal: null });
    expect(exit!.at - blockedAt).toBeLessThan(TIMEOUT_MS + 3_000);
    expect(stallLines(p)).toHaveLength(1);
    expect(p.stdout()).not.toMatch(PID1_WARNING);
  });

  it("without an init node is PID 1: it warns at start, and the kernel ignores the watchdog's kill", { timeout: 60_000 }, async () => {
    const withoutInit = imageEntrypoint().slice(2);
    expect(withoutInit[0]).toBe(NODE);
    const { process: p } = await startAndBlock("pid1", inPidNamespace(withoutInit));
    await until(async () => stallLines(p).length === 1, TIMEOUT_MS + 5_000, "the watchdog's stall line");
    await new Promise((r) => setTimeout(r, 1_000));
    expect(p.child.exitCode, "node as PID 1 was ended: has the kernel stopped protecting a namespace's init?").toBeNull();
    expect(p.child.signalCode).toBeNull();
    expect(p.stdout()).toMatch(PID1_WARNING);
  });
});
