/**
 * Runs review-storm.ts in a child process while `restart` plays an API server restart, and watches
 * the child's event loop through a heartbeat: a child that stops answering is frozen (and killed).
 */
import { fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const STORM = fileURLToPath(new URL("./review-storm.ts", import.meta.url));
/** Heartbeats every 100 ms; this long without an answer is a frozen event loop. */
const FROZEN_AFTER_MS = 3_000;
/** A frozen child grows by hundreds of MB a second: past this it is killed at once. */
const RUNAWAY_RSS_BYTES = 1.5 * 1024 ** 3;

export interface StormCounts {
  readonly fired: number;
  readonly answered: number;
  readonly unavailable: number;
  readonly other: number;
  /** One more review after the restart, with a generous deadline, was answered. */
  readonly recovered: boolean;
}

export interface StormOutcome {
  readonly frozen: boolean;
  /** The child's final counts; undefined when it froze or died. */
  readonly done: StormCounts | undefined;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function residentBytes(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]) * 4096;
  } catch {
    return 0;
  }
}

/**
 * `pool` reviews through Clusters.load (the fix); `h2-default` through the old clusters.ts setup.
 * `restart` starts 300 ms into a storm of `stormMs`.
 */
export async function stormThroughRestart(
  kubeconfigPath: string,
  mode: "pool" | "h2-default",
  stormMs: number,
  restart: () => Promise<void>,
): Promise<StormOutcome> {
  const child = fork(STORM, [kubeconfigPath, mode, String(stormMs)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let lastAnswer = Date.now();
  let done: StormCounts | undefined;
  let exited = false;
  child.on("exit", () => (exited = true));
  const ready = new Promise<void>((resolve) => {
    child.on("message", (message: { ready?: true; pong?: StormCounts; done?: StormCounts }) => {
      lastAnswer = Date.now();
      if (message.ready) resolve();
      if (message.done) done = message.done;
    });
  });
  const heartbeat = setInterval(() => child.connected && child.send("ping"), 100);
  try {
    await ready;
    await sleep(300);
    await restart();
    let frozen = false;
    while (done === undefined && !frozen && !exited) {
      await sleep(100);
      const silentMs = Date.now() - lastAnswer;
      frozen = silentMs > FROZEN_AFTER_MS || (silentMs > 1_000 && residentBytes(child.pid ?? 0) > RUNAWAY_RSS_BYTES);
    }
    return { frozen, done };
  } finally {
    clearInterval(heartbeat);
    // A frozen child ignores SIGTERM.
    child.kill("SIGKILL");
  }
}
