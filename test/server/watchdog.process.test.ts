/**
 * The watchdog process (src/server/watchdog.ts) against the process it watches, through
 * test/server/support/watchdog-host.ts: it kills a blocked event loop within the timeout, never outlives
 * the process however that ends, does not take a freeze of both (SIGSTOP, the cgroup freezer, a
 * suspended VM) for a stall, and its own death is logged. test/server/watchdog.portcullis.process.test.ts is the
 * same kill in a real portcullis at the shipped default.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { watchdogTimings } from "../../src/server/watchdog.ts";
import { childPids } from "../support/child-pids.ts";
import { NODE } from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";

const HOST = resolve(import.meta.dirname, "support/watchdog-host.ts");
const TIMEOUT_MS = 1_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Host {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly stdout: () => string;
  readonly stderr: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

const hosts: Host[] = [];
afterEach(() => {
  for (const h of hosts.splice(0)) if (h.child.exitCode === null && h.child.signalCode === null) h.child.kill("SIGKILL");
});

/** Starts the host in a process group of its own (so a test can stop the group) and waits for it to start. */
async function startHost(args: number[], env: NodeJS.ProcessEnv = process.env): Promise<Host> {
  const child = spawn(NODE, [HOST, ...args.map(String)], { stdio: ["ignore", "pipe", "pipe"], detached: true, env });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((r) =>
    child.once("exit", (code, signal) => r({ code, signal, at: performance.now() })),
  );
  const host = { child, stdout: () => stdout, stderr: () => stderr, exited };
  hosts.push(host);
  await until(async () => stdout.includes("started\n"), 10_000, "the host to start");
  return host;
}

/** The host's watchdog: its one child, a bash process. */
function watchdogOf(host: Host): number {
  const children = childPids(host.child.pid!);
  expect(children).toHaveLength(1);
  expect(readFileSync(`/proc/${children[0]}/comm`, "utf8").trim()).toBe("bash");
  return children[0]!;
}

/** Alive and not a zombie. */
const running = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));

describe("the watchdog process", () => {
  it.each([
    { timeoutMs: 500, intervalMs: 50, waitMs: 125 },
    { timeoutMs: 1_000, intervalMs: 100, waitMs: 250 },
    { timeoutMs: 5_000, intervalMs: 500, waitMs: 1_250 },
    { timeoutMs: 600_000, intervalMs: 60_000, waitMs: 150_000 },
  ])("timings for $timeoutMs ms: a beat every $intervalMs ms, reads of $waitMs ms", ({ timeoutMs, intervalMs, waitMs }) => {
    expect(watchdogTimings(timeoutMs)).toEqual({ intervalMs, waitMs });
    // A read spans at least two beats, so one late beat is not a missed read.
    expect(waitMs).toBeGreaterThanOrEqual(2 * intervalMs);
  });

  it("a blocked event loop: one stderr line, then SIGKILL within the timeout and one read", { timeout: 20_000 }, async () => {
    const host = await startHost([TIMEOUT_MS]);
    await sleep(TIMEOUT_MS * 2);
    expect(host.child.exitCode).toBeNull();
    const blockedAt = performance.now();
    host.child.kill("SIGUSR2");
    const exit = await host.exited;
    expect(exit.signal).toBe("SIGKILL");
    expect(exit.at - blockedAt).toBeGreaterThanOrEqual(TIMEOUT_MS - watchdogTimings(TIMEOUT_MS).waitMs);
    expect(exit.at - blockedAt).toBeLessThan(TIMEOUT_MS + watchdogTimings(TIMEOUT_MS).waitMs + 1_000);
    const lines = host.stderr().trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toEqual([
      { level: 60, time: expect.any(Number), pid: host.child.pid, msg: "event loop stalled; the watchdog is ending the process", stalled_ms: TIMEOUT_MS, timeout_ms: TIMEOUT_MS },
    ]);
    expect(Math.abs((lines[0]!["time"] as number) - Date.now())).toBeLessThan(5_000);
  });

  it("the watched process exits by itself: the watchdog ends with it", { timeout: 20_000 }, async () => {
    const host = await startHost([TIMEOUT_MS, 1_500]);
    const watchdog = watchdogOf(host);
    expect(await host.exited).toMatchObject({ code: 0, signal: null });
    await until(async () => !running(watchdog), 2_000, "the watchdog to end");
  });

  it("the watched process is killed (SIGKILL): the watchdog ends on the end of its input, and kills nothing", { timeout: 20_000 }, async () => {
    const host = await startHost([TIMEOUT_MS]);
    const watchdog = watchdogOf(host);
    host.child.kill("SIGKILL");
    await host.exited;
    await until(async () => !running(watchdog), 2_000, "the watchdog to end");
    expect(host.stderr()).toBe("");
  });

  it("a freeze of both processes (SIGSTOP of the group) longer than the timeout is not a stall", { timeout: 20_000 }, async () => {
    const host = await startHost([TIMEOUT_MS]);
    process.kill(-host.child.pid!, "SIGSTOP");
    await sleep(TIMEOUT_MS * 3);
    process.kill(-host.child.pid!, "SIGCONT");
    await sleep(TIMEOUT_MS * 2);
    expect(host.child.exitCode).toBeNull();
    expect(host.child.signalCode).toBeNull();
    expect(host.stderr()).toBe("");
  });

  it("bash runs no startup file and gets none of the environment but PATH (no secret in its /proc/<pid>/environ)", { timeout: 20_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "portcullis-watchdog-"));
    try {
      // Node's pipe is a socket, which bash takes for rshd's: it would source ~/.bashrc; BASH_ENV is sourced by any non-interactive bash.
      const marker = (name: string) => `echo ${name} >> '${join(dir, "sourced")}'\n`;
      writeFileSync(join(dir, ".bashrc"), marker(".bashrc"));
      writeFileSync(join(dir, "bash-env"), marker("BASH_ENV"));
      const host = await startHost([TIMEOUT_MS], { PATH: process.env["PATH"], HOME: dir, BASH_ENV: join(dir, "bash-env"), PORTCULLIS_SECRET: "a-secret-value" });
      const watchdog = watchdogOf(host);
      await sleep(TIMEOUT_MS * 2);
      expect(existsSync(join(dir, "sourced")), "a startup file ran").toBe(false);
      expect(readFileSync(`/proc/${watchdog}/environ`, "utf8").split("\0").filter((v) => v !== "")).toEqual([`PATH=${process.env["PATH"]}`]);
      expect(host.stderr()).toBe("");
      expect(host.child.exitCode).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the watchdog dies: the process goes on, and says its event loop is no longer watched", { timeout: 20_000 }, async () => {
    const host = await startHost([TIMEOUT_MS]);
    process.kill(watchdogOf(host), "SIGKILL");
    await until(async () => host.stdout().includes("watchdog process ended"), 5_000, "the log line");
    const line = JSON.parse(host.stdout().split("\n").find((l) => l.includes("watchdog process ended"))!) as Record<string, unknown>;
    expect(line).toMatchObject({ level: 50, msg: "watchdog process ended; the event loop is no longer watched", signal: "SIGKILL" });
    await sleep(TIMEOUT_MS * 2);
    expect(host.child.exitCode).toBeNull();
  });
});
