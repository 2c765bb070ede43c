/**
 * The watchdog's thread (watchdog.ts): ends the process when the main thread's heartbeat counter
 * has not moved for `timeoutMs`. Its own timer measures the wait, so if the whole process was
 * paused (SIGSTOP, a suspended VM) the worker was too, and that pause is not counted as a stall.
 */
import { writeSync } from "node:fs";
import { workerData } from "node:worker_threads";
import type { WatchdogWorkerData } from "./watchdog.ts";

const { beats, timeoutMs, intervalMs } = workerData as WatchdogWorkerData;
const counter = new Int32Array(beats);

let lastBeat = Atomics.load(counter, 0);
let lastBeatAt = performance.now();
let lastTickAt = lastBeatAt;

setInterval(() => {
  const now = performance.now();
  const beat = Atomics.load(counter, 0);
  // This thread did not run either: the process was paused, not the event loop stuck.
  const paused = now - lastTickAt > timeoutMs / 2;
  lastTickAt = now;
  if (beat !== lastBeat || paused) {
    lastBeat = beat;
    lastBeatAt = now;
    return;
  }
  const stalledMs = Math.round(now - lastBeatAt);
  if (stalledMs < timeoutMs) return;
  const line = {
    level: 60,
    time: Date.now(),
    pid: process.pid,
    msg: "event loop stalled; the watchdog is ending the process",
    stalled_ms: stalledMs,
    timeout_ms: timeoutMs,
  };
  writeSync(2, `${JSON.stringify(line)}\n`);
  process.kill(process.pid, "SIGKILL");
}, intervalMs);
