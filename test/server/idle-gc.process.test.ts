/**
 * The idle GC (src/server/idle-gc.ts) in a real portcullis started with the shipped Node flags
 * (--expose-gc among them) and `idleGc.quietMs: 1000`: it collects once the server is quiet, not
 * while Checks keep arriving, gives back what the heap grew into, and does not collect again
 * until the heap grows again. The heap is grown from outside through the Node inspector.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { NODE_FLAGS } from "../../src/cli/node-flags.ts";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullis, startProcessWorld } from "../support/portcullis-process.ts";
import { ids } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { healthStatus } from "../support/grpc-health.ts";
import { evaluateInProcess } from "../support/inspector.ts";

const QUIET_MS = 1_000;
const MESSAGE = "quiet: memory-reducing GC gave heap back";
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let world: ProcessWorld;
let portcullis: PortcullisProcess;

interface IdleGcLine {
  readonly quiet_ms: number;
  readonly pause_ms: number;
  readonly heap_committed_mib: [number, number];
  readonly heap_used_mib: [number, number];
}
const idleGcs = () => portcullis.lines().filter((l) => l["msg"] === MESSAGE) as unknown as IdleGcLine[];

beforeAll(async () => {
  world = await startProcessWorld("idle-gc");
  portcullis = spawnPortcullis(world, await freeAddresses(), {
    name: "idle-gc",
    extra: `idleGc: { quietMs: ${QUIET_MS} }`,
    nodeArgs: [...NODE_FLAGS, "--inspect=127.0.0.1:0"],
  });
  await until(async () => (await healthStatus(portcullis.addresses.grpc)) === "SERVING", 20_000, "portcullis to start (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${portcullis.stderr()}`);
  });
});

afterAll(async () => {
  portcullis.kill();
  await world.stop();
});

it("collects when quiet, not while Checks arrive, gives back what the heap grew into, and only once per growth", { timeout: 60_000 }, async () => {
  // The first quiet spell after start: the heap has grown from nothing.
  await until(async () => idleGcs().length === 1, 10_000, "the first idle GC after start");
  expect(portcullis.stderr()).not.toContain("idle GC off");

  // ~40 MB of objects that live long enough to be promoted, nine in ten then dropped: the committed heap
  // grows, and its pages stay, each with a tenth still live, as a burst of cold users leaves it.
  await evaluateInProcess(
    portcullis,
    "globalThis.ballast = Array.from({ length: 400000 }, (_, i) => ({ i, s: 'ballast-' + i })); setTimeout(() => { globalThis.ballast = globalThis.ballast.filter((_, i) => i % 10 === 0); }, 200);",
  );
  // Checks every 200 ms for 4 s: never quiet for a whole second, so no collection however grown the heap.
  const client = authorizationClient(portcullis.addresses.grpc);
  const until4s = performance.now() + 4_000;
  let answered = 0;
  while (performance.now() < until4s) {
    await client.check(envoyCheckRequest({ path: PODS, policy: "kube-api-proxy" }));
    answered++;
    await sleep(200);
  }
  client.close();
  expect(answered).toBeGreaterThan(10);
  expect(idleGcs()).toHaveLength(1);

  // Quiet again: one collection, which gives back at least what it needed to have grown.
  await until(async () => idleGcs().length === 2, 5_000, "the idle GC after the checks stopped");
  const [, second] = idleGcs();
  expect(second!.quiet_ms).toBeGreaterThanOrEqual(QUIET_MS);
  const [before, after] = second!.heap_committed_mib;
  expect(before - after).toBeGreaterThanOrEqual(8);
  // Compacted, not only swept: what stays committed is about what is live (a regular full GC here
  // left 97 MiB committed for 48 used; this one 45 for 42).
  expect(after - second!.heap_used_mib[1]).toBeLessThan(8);

  // Nothing has grown since: still quiet, no further collection.
  await sleep(3 * QUIET_MS);
  expect(idleGcs()).toHaveLength(2);
});
