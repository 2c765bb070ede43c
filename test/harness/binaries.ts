// Locates the dependency binaries built by scripts/deps/install.sh and runs
// them as child processes that cannot outlive the test process.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const ENV_VARS = {
  openfga: "PORTCULLIS_OPENFGA_BIN",
  kubeApiserver: "PORTCULLIS_KUBE_APISERVER_BIN",
  etcd: "PORTCULLIS_ETCD_BIN",
  tini: "PORTCULLIS_TINI_BIN",
  requestInfoOracle: "PORTCULLIS_REQUESTINFO_ORACLE_BIN",
  kustomize: "PORTCULLIS_KUSTOMIZE_BIN",
  egctl: "PORTCULLIS_EGCTL_BIN",
  helm: "PORTCULLIS_HELM_BIN",
  istioPilot: "PORTCULLIS_ISTIO_PILOT_BIN",
  // Directories of CRD files, copied from the projects' Go modules.
  gatewayApiCrds: "PORTCULLIS_GATEWAY_API_CRDS",
  envoyGatewayCrds: "PORTCULLIS_ENVOY_GATEWAY_CRDS",
  istioCrds: "PORTCULLIS_ISTIO_CRDS",
  istioApiProtos: "PORTCULLIS_ISTIO_API_PROTOS",
} as const;

export type BinaryName = keyof typeof ENV_VARS;

const INSTALL_HINT = "run `bash scripts/deps/install.sh` first";

function envFilePath(): string {
  const cache = process.env["PORTCULLIS_CACHE"] || join(homedir(), ".cache", "portcullis");
  return join(cache, "env");
}

/** Parses the `export NAME=value` lines that install.sh writes. */
function readEnvFile(path: string): Record<string, string> {
  if (!existsSync(path)) return {};
  const vars: Record<string, string> = {};
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const match = /^\s*(?:export\s+)?([A-Z0-9_]+)=(.*)$/.exec(line);
    if (match?.[1] && match[2] !== undefined) vars[match[1]] = match[2].trim().replace(/^(["'])(.*)\1$/, "$2");
  }
  return vars;
}

/**
 * Absolute path of a dependency binary, from its PORTCULLIS_*_BIN variable or
 * else the cache's env file. Throws rather than letting tests skip: a test
 * that silently does not run proves nothing.
 */
export function resolveBinary(name: BinaryName): string {
  const envVar = ENV_VARS[name];
  const envFile = envFilePath();
  const path = process.env[envVar] || readEnvFile(envFile)[envVar];
  if (!path) throw new Error(`${envVar} is not set and ${envFile} does not define it: ${INSTALL_HINT}`);
  if (!existsSync(path)) throw new Error(`${envVar}=${path} does not exist: ${INSTALL_HINT}`);
  return path;
}

/** A fresh private directory; dependencies keep their data and keys there. */
export function makeTempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `portcullis-${prefix}-`));
}

const OUTPUT_LINES_KEPT = 200;
const OUTPUT_LINES_SHOWN = 40;

/** Every live process, so an exiting test run can reap them. */
const live = new Set<ManagedProcess>();
let reaperInstalled = false;

function installReaper(): void {
  if (reaperInstalled) return;
  reaperInstalled = true;
  // 'exit' handlers must be synchronous: SIGKILL and rmSync are.
  process.on("exit", () => {
    for (const proc of live) proc.kill();
  });
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = (): void => {
      for (const proc of live) proc.kill();
      process.removeListener(signal, onSignal);
      // Re-raise so the default action (terminate) still happens, unless
      // someone else (e.g. the test runner) handles the signal.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

export interface ManagedProcess {
  readonly name: string;
  /** The OS process id (fault injection reads /proc/<pid> and sends signals). */
  readonly pid: number | undefined;
  /** Sends a signal (SIGSTOP, SIGCONT, SIGKILL …) without touching its directory. */
  signal(signal: NodeJS.Signals): void;
  /** Settles once the process has exited. */
  readonly exited: Promise<void>;
  /** The last lines the process wrote to stdout/stderr. */
  outputTail(lines?: number): string;
  /** Exit description once the process has exited, else undefined. */
  exitStatus(): string | undefined;
  /** SIGKILL and remove its directory, synchronously (for exit handlers). */
  kill(): void;
  /** SIGTERM, SIGKILL after a grace period, then remove its directory. */
  stop(): Promise<void>;
}

/**
 * Spawns `bin args` with `dir` as its private directory, taking ownership of
 * `dir` unless `ownsDir` is false (a process restarted in the same directory:
 * its owner removes it). `detached: false` keeps the child in the test's
 * process group, so a Ctrl-C in the terminal reaches it too.
 */
export function spawnManaged(name: string, bin: string, args: string[], dir: string, ownsDir = true): ManagedProcess {
  installReaper();
  const child: ChildProcess = spawn(bin, args, { cwd: dir, detached: false, stdio: ["ignore", "pipe", "pipe"] });
  const output: string[] = [];
  const collect = (chunk: Buffer): void => {
    output.push(...chunk.toString("utf8").split("\n").filter((l) => l !== ""));
    if (output.length > OUTPUT_LINES_KEPT) output.splice(0, output.length - OUTPUT_LINES_KEPT);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);

  let status: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once("exit", (code, signal) => {
      status = signal ? `signal ${signal}` : `exit code ${code}`;
      resolve();
    });
    child.once("error", (err) => {
      status = `spawn error: ${err.message}`;
      resolve();
    });
  });

  const proc: ManagedProcess = {
    name,
    pid: child.pid,
    signal(signal) {
      if (status === undefined) child.kill(signal);
    },
    exited,
    outputTail: (lines = OUTPUT_LINES_SHOWN) => output.slice(-lines).join("\n"),
    exitStatus: () => status,
    kill() {
      if (status === undefined) child.kill("SIGKILL");
      if (ownsDir) rmSync(dir, { recursive: true, force: true });
      live.delete(proc);
    },
    async stop() {
      if (status === undefined) {
        // A stopped (SIGSTOP) process would not act on SIGTERM.
        child.kill("SIGCONT");
        child.kill("SIGTERM");
        const graceful = await Promise.race([exited.then(() => true), sleep(5_000).then(() => false)]);
        if (!graceful) {
          child.kill("SIGKILL");
          await exited;
        }
      }
      if (ownsDir) rmSync(dir, { recursive: true, force: true });
      live.delete(proc);
    },
  };
  live.add(proc);
  return proc;
}

/**
 * Polls `probe` until it returns true. Fails early if the process exits and at
 * the deadline otherwise, in both cases stopping it and reporting its last
 * output lines, which is where the reason always is.
 */
export async function waitUntilReady(
  proc: ManagedProcess,
  probe: () => Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "";
  for (;;) {
    const status = proc.exitStatus();
    if (status !== undefined) {
      await proc.stop();
      throw failure(proc, `exited (${status}) before becoming ready`);
    }
    try {
      if (await probe()) return;
      lastError = "";
    } catch (err) {
      lastError = ` (last probe error: ${err instanceof Error ? err.message : String(err)})`;
    }
    if (Date.now() > deadline) {
      await proc.stop();
      throw failure(proc, `not ready after ${timeoutMs} ms${lastError}`);
    }
    await sleep(100);
  }
}

function failure(proc: ManagedProcess, what: string): Error {
  return new Error(`${proc.name} ${what}; its last output:\n${proc.outputTail()}`);
}
