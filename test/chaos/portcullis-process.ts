/**
 * portcullis as a child process, the way it is deployed: `node src/cli/main.ts --config FILE`
 * with the pinned Node. CHAOS_PORTCULLIS_ROOT runs another checkout (e.g. an old commit in a
 * worktree) against the same world. Measured from outside only: a heartbeat over the admin port's
 * /healthz (an answer needs a turn of the event loop, so its latency bounds every stall), VmRSS
 * from /proc, the exit status. A control — an idle Node HTTP server probed the same way — tells a
 * stall of portcullis apart from the machine's own (two cores shared with etcd, kube-apiserver,
 * OpenFGA and the load).
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";

export const PORTCULLIS_ROOT = resolve(process.env["CHAOS_PORTCULLIS_ROOT"] ?? resolve(import.meta.dirname, "../.."));

/** Whether the checkout under test knows `openfga.storeName` (commits before it only take a storeId). */
export const SUPPORTS_STORE_NAME = readFileSync(join(PORTCULLIS_ROOT, "src/config/schema.ts"), "utf8").includes("storeName");

const HEARTBEAT_EVERY_MS = 100;
/** No heartbeat answered for this long, with the process alive: frozen. */
export const FROZEN_AFTER_MS = 5_000;
const LINES_KEPT = 400;

export interface Heartbeat {
  /** When the probe was sent (performance.now()). */
  readonly at: number;
  readonly latencyMs: number;
}

/** Probes GET `path` on a loopback port every 100 ms and keeps each answer's latency. */
export class HeartbeatProbe {
  readonly beats: Heartbeat[] = [];
  #timer: NodeJS.Timeout | undefined;
  #lastAnswer = performance.now();
  readonly #port: number;
  readonly #path: string;

  constructor(port: number, path: string) {
    this.#port = port;
    this.#path = path;
  }

  start(): void {
    this.#lastAnswer = performance.now();
    this.#timer ??= setInterval(() => this.#probe(), HEARTBEAT_EVERY_MS);
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #probe(): void {
    const at = performance.now();
    const req = request({ host: "127.0.0.1", port: this.#port, path: this.#path, timeout: 60_000, agent: false }, (res) => {
      res.resume();
      res.on("end", () => {
        this.#lastAnswer = performance.now();
        this.beats.push({ at, latencyMs: this.#lastAnswer - at });
      });
    });
    req.on("error", () => {});
    req.on("timeout", () => req.destroy());
    req.end();
  }

  /** How long no probe has been answered. */
  silentForMs(): number {
    return performance.now() - this.#lastAnswer;
  }

  /** Longest latency among probes sent in [from, to]. */
  maxLatencyMs(from: number, to: number): number {
    let max = 0;
    for (const beat of this.beats) if (beat.at >= from && beat.at <= to) max = Math.max(max, beat.latencyMs);
    return max;
  }
}

/** An idle Node process (the same pinned Node) answering HTTP: what the machine alone does to an event loop. */
export class ControlProcess {
  readonly probe: HeartbeatProbe;
  readonly #child;

  constructor(port: number) {
    const server = `require("node:http").createServer((q, s) => s.end("ok")).listen(${port}, "127.0.0.1")`;
    this.#child = spawn(join(PORTCULLIS_ROOT, "node_modules/.bin/node"), ["-e", server], { stdio: "ignore" });
    const reap = () => this.#child.kill("SIGKILL");
    process.once("exit", reap);
    this.probe = new HeartbeatProbe(port, "/");
    this.probe.start();
  }

  stop(): void {
    this.probe.stop();
    this.#child.kill("SIGKILL");
  }
}

export class PortcullisProcess {
  /** Last log lines (stdout and stderr), for a failure's message. */
  readonly tail: string[] = [];
  #child: ChildProcessByStdio<null, Readable, Readable> | undefined;
  #exit: Promise<number | null> | undefined;
  #exitStatus: string | undefined;
  readonly #heartbeat: HeartbeatProbe;
  readonly #configFile: string;

  readonly adminPort: number;
  readonly env: Record<string, string>;

  constructor(dir: string, config: string, adminPort: number, env: Record<string, string>) {
    this.adminPort = adminPort;
    this.env = env;
    this.#heartbeat = new HeartbeatProbe(adminPort, "/healthz");
    this.#configFile = join(dir, "portcullis.yaml");
    writeFileSync(this.#configFile, config);
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Exit description once the process has exited, else undefined. */
  get exitStatus(): string | undefined {
    return this.#exitStatus;
  }

  start(): void {
    const node = join(PORTCULLIS_ROOT, "node_modules/.bin/node");
    const child = spawn(node, [join(PORTCULLIS_ROOT, "src/cli/main.ts"), "--config", this.#configFile], {
      cwd: PORTCULLIS_ROOT,
      env: { PATH: process.env["PATH"] ?? "", ...this.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.#child = child;
    this.#exitStatus = undefined;
    // A test run that dies must not leave portcullis behind ('exit' handlers run synchronously).
    const reap = () => child.kill("SIGKILL");
    process.once("exit", reap);
    child.once("exit", () => process.removeListener("exit", reap));
    const keep = (chunk: Buffer) => {
      for (const line of chunk.toString("utf8").split("\n")) {
        // Audit lines are most of the output and say nothing about faults.
        if (line === "" || line.includes('"audit":"plugin_request"')) continue;
        this.tail.push(line.length > 600 ? `${line.slice(0, 600)}…` : line);
      }
      if (this.tail.length > LINES_KEPT) this.tail.splice(0, this.tail.length - LINES_KEPT);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    this.#exit = new Promise((resolveExit) =>
      child.once("exit", (code, signal) => {
        this.#exitStatus = signal ? `signal ${signal}` : `exit code ${code}`;
        resolveExit(code);
      }),
    );
    this.#heartbeat.start();
  }

  /** Longest heartbeat latency among probes sent in [from, to]; probes still unanswered count as open stalls. */
  maxStallMs(from: number, to: number = performance.now()): number {
    return Math.max(this.#heartbeat.maxLatencyMs(from, to), this.frozenForMs() - HEARTBEAT_EVERY_MS);
  }

  /** How long no heartbeat has been answered. */
  frozenForMs(): number {
    return this.#exitStatus === undefined ? this.#heartbeat.silentForMs() : 0;
  }

  isFrozen(): boolean {
    return this.frozenForMs() > FROZEN_AFTER_MS;
  }

  /** Resident set size in MB, from /proc/<pid>/status. */
  rssMb(): number {
    const pid = this.pid;
    if (pid === undefined || this.#exitStatus !== undefined) return Number.NaN;
    try {
      const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
      return kb === undefined ? Number.NaN : Number(kb) / 1024;
    } catch {
      return Number.NaN;
    }
  }

  /**
   * The main (event-loop) thread's time on a CPU and waiting for one, in ms, from /proc/<pid>/schedstat:
   * a stall spent waiting in the run queue is the machine's; one spent on a CPU is portcullis's own.
   */
  loopThreadTimes(): { cpuMs: number; runQueueMs: number } {
    const pid = this.pid;
    try {
      const [cpu, wait] = readFileSync(`/proc/${pid}/schedstat`, "utf8").trim().split(/\s+/).map(Number);
      return { cpuMs: (cpu ?? Number.NaN) / 1e6, runQueueMs: (wait ?? Number.NaN) / 1e6 };
    } catch {
      return { cpuMs: Number.NaN, runQueueMs: Number.NaN };
    }
  }

  /** Resolves when GET /readyz answers 200 (every index synced). */
  async untilReady(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      if (this.#exitStatus !== undefined) throw new Error(`portcullis exited (${this.#exitStatus}):\n${this.tail.slice(-30).join("\n")}`);
      if ((await adminStatus(this.adminPort, "/readyz")) === 200) return;
      await sleep(100);
    }
    throw new Error(`portcullis not ready after ${timeoutMs} ms:\n${this.tail.slice(-30).join("\n")}`);
  }

  /** Sends `signal` and waits (bounded) for the exit code; undefined when it did not exit in time. */
  async signalAndWait(signal: NodeJS.Signals, timeoutMs: number): Promise<number | null | undefined> {
    const exit = this.#exit;
    if (exit === undefined) return undefined;
    this.#child?.kill(signal);
    return Promise.race([exit, sleep(timeoutMs).then(() => undefined)]);
  }

  /** SIGKILL, for a frozen process or at teardown. */
  async kill(): Promise<void> {
    if (this.#exitStatus === undefined) await this.signalAndWait("SIGKILL", 5_000);
  }

  stopHeartbeat(): void {
    this.#heartbeat.stop();
  }
}

function adminStatus(port: number, path: string): Promise<number> {
  return new Promise((resolveStatus) => {
    const req = request({ host: "127.0.0.1", port, path, timeout: 2_000, agent: false }, (res) => {
      res.resume();
      resolveStatus(res.statusCode ?? 0);
    });
    req.on("error", () => resolveStatus(0));
    req.on("timeout", () => req.destroy());
    req.end();
  });
}
