/**
 * Servers under test run as separate processes pinned to one core (`taskset -c CORE`), each
 * announcing its port through a ready file; the runner stops every process it started, by pid.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export interface ServerProcess {
  readonly name: string;
  readonly pid: number;
  readonly port: number;
  readonly info: Record<string, unknown>;
  readonly logFile: string;
  stop(): Promise<void>;
}

export interface StartSpec {
  readonly name: string;
  readonly core: string;
  /** The program and its arguments; `{READY}` is replaced by the ready file's path. */
  readonly command: readonly string[];
  readonly env?: Record<string, string>;
  readonly workDir: string;
  /** How the process tells it is ready: the ready file (bench servers) or a probe (OPA). */
  readonly ready?: { readonly probe: () => Promise<number | undefined> };
  readonly timeoutMs?: number;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

export async function startProcess(spec: StartSpec): Promise<ServerProcess> {
  const readyFile = join(spec.workDir, `${spec.name}.ready.json`);
  const logFile = join(spec.workDir, `${spec.name}.log`);
  rmSync(readyFile, { force: true });
  const out = openSync("/dev/null", "w");
  const err = openSync(logFile, "a");
  const command = spec.command.map((a) => a.replaceAll("{READY}", readyFile));
  const child = spawn("taskset", ["-c", spec.core, ...command], {
    stdio: ["ignore", out, err],
    env: { ...process.env, ...spec.env },
  });
  closeSync(out);
  closeSync(err);
  live.add(child);
  let exited: string | undefined;
  const exitPromise = new Promise<void>((resolve) =>
    child.on("exit", (code, signal) => {
      exited = signal ?? `exit ${code}`;
      live.delete(child);
      resolve();
    }),
  );
  const deadline = Date.now() + (spec.timeoutMs ?? 60_000);
  let port: number | undefined;
  let info: Record<string, unknown> = {};
  while (port === undefined) {
    if (exited !== undefined) throw new Error(`${spec.name} ${exited} before it was ready; log: ${tail(logFile)}`);
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${spec.name} not ready in time; log: ${tail(logFile)}`);
    }
    if (spec.ready !== undefined) {
      port = await spec.ready.probe().catch(() => undefined);
    } else if (existsSync(readyFile)) {
      info = JSON.parse(readFileSync(readyFile, "utf8")) as Record<string, unknown>;
      port = info["port"] as number;
    }
    if (port === undefined) await sleep(100);
  }
  return {
    name: spec.name,
    pid: child.pid!,
    port,
    info,
    logFile,
    async stop() {
      if (exited !== undefined) return;
      child.kill("SIGTERM");
      const done = await Promise.race([exitPromise.then(() => true), sleep(15_000).then(() => false)]);
      if (!done) {
        child.kill("SIGKILL");
        await exitPromise;
      }
    },
  };
}

/**
 * CPU ms that a fixed integer loop takes on `core`, best of three: the core's speed as the server
 * will meet it. It moves when the CPU's frequency does, or when a neighbour (another VM on the
 * same physical core) slows this one; the runner records it before every server process.
 */
export function coreCalibrationMs(core: string): number {
  const loop =
    "let x=1;const t=process.cpuUsage();for(let i=0;i<1e7;i++)x=(Math.imul(x,1103515245)+12345)>>>0;const d=process.cpuUsage(t);process.stdout.write(String((d.user+d.system)/1000+(x&0)))";
  const runs = Array.from({ length: 3 }, () => {
    const r = spawnSync("taskset", ["-c", core, process.execPath, "-e", loop], { encoding: "utf8", timeout: 30_000 });
    return r.status === 0 ? Number(r.stdout) : NaN;
  });
  return Math.min(...runs);
}

function tail(file: string): string {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-30).join("\n");
  } catch {
    return "(no log)";
  }
}
