/**
 * portcullis as a real child process (`node src/cli/main.ts --config FILE`, the pinned Node from
 * node_modules/.bin) against the wire fakes: for the suites about the process itself (signals,
 * drain, watchdog, a taken port). Fixed loopback ports, because the log stream is buffered and the
 * "listening" line cannot be waited for.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { freePort } from "../harness/ports.ts";
import { FakeKubeApi } from "./wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "./wire-fakes/openfga.ts";
import { ids, OLD_SECRET, PINNED_HASH, SECRET } from "./tokens.ts";

export const NODE = resolve(import.meta.dirname, "../../node_modules/.bin/node");
export const MAIN = resolve(import.meta.dirname, "../../src/cli/main.ts");

/** The fakes and ports one or more portcullis processes run against. */
export interface ProcessWorld {
  readonly dir: string;
  readonly openfga: FakeOpenFga;
  readonly kube: FakeKubeApi;
  readonly kubeconfig: string;
  stop(): Promise<void>;
}

export async function startProcessWorld(prefix: string): Promise<ProcessWorld> {
  const dir = mkdtempSync(join(tmpdir(), `portcullis-${prefix}-`));
  const openfga = await new FakeOpenFga().start();
  const kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  return {
    dir,
    openfga,
    kube,
    kubeconfig: kube.writeKubeconfig(dir),
    async stop() {
      await Promise.all([openfga.stop(), kube.stop()]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface PortcullisAddresses {
  readonly grpc: string;
  readonly admin: string;
  readonly internal: string;
}

export async function freeAddresses(): Promise<PortcullisAddresses> {
  return { grpc: `127.0.0.1:${await freePort()}`, admin: `127.0.0.1:${await freePort()}`, internal: `127.0.0.1:${await freePort()}` };
}

export interface PortcullisProcess {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly addresses: PortcullisAddresses;
  readonly stdout: () => string;
  readonly stderr: () => string;
  /** JSON lines written to stdout. */
  readonly lines: () => Array<Record<string, unknown>>;
  /** Resolves with the exit code and signal, and when (performance.now()). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  /** SIGKILL if still running. */
  kill(): void;
}

/**
 * Starts one portcullis. `extra` is appended to the configuration file (YAML, top-level keys);
 * `nodeArgs` go before the script (e.g. `--inspect=127.0.0.1:0`); `command`, when given, replaces
 * `node NODE_ARGS main.ts` (e.g. the image's ENTRYPOINT in a PID namespace of its own); with
 * `processGroup` it leads a process group of its own, which a test may signal as a whole.
 */
export function spawnPortcullis(
  world: ProcessWorld,
  addresses: PortcullisAddresses,
  options: { name: string; extra?: string; nodeArgs?: string[]; command?: readonly string[]; checkTimeoutMs?: number; openfgaTimeoutMs?: number; processGroup?: boolean },
): PortcullisProcess {
  const config = join(world.dir, `${options.name}.yaml`);
  writeFileSync(
    config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
logLevel: info
check: { timeoutMs: ${options.checkTimeoutMs ?? 4000} }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
openfga: { apiUrl: "${world.openfga.url}", storeId: "${world.openfga.storeId}", timeoutMs: ${options.openfgaTimeoutMs ?? 3000}, allowTtlMs: 1, denyTtlMs: 1 }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${world.kubeconfig}" }]
${options.extra ?? ""}
`,
  );
  return spawnPortcullisFile(config, addresses, options.command ?? [NODE, ...(options.nodeArgs ?? []), MAIN], options.processGroup);
}

/**
 * Starts one portcullis with a configuration file of the caller's (secrets in PORTCULLIS_SECRET,
 * PORTCULLIS_OLD_SECRET): `command --config FILE`.
 */
export function spawnPortcullisFile(config: string, addresses: PortcullisAddresses, command: readonly string[] = [NODE, MAIN], processGroup = false): PortcullisProcess {
  const [program, ...args] = command;
  const child = spawn(program!, [...args, "--config", config], {
    env: { PATH: process.env["PATH"] ?? "", PORTCULLIS_SECRET: SECRET, PORTCULLIS_OLD_SECRET: OLD_SECRET },
    stdio: ["ignore", "pipe", "pipe"],
    detached: processGroup,
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolveExit) =>
    child.once("exit", (code, signal) => resolveExit({ code, signal, at: performance.now() })),
  );
  return {
    child,
    addresses,
    stdout: () => stdout,
    stderr: () => stderr,
    lines: () =>
      stdout
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    exited,
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    },
  };
}
