/**
 * Fail fast, one validator (issue 13): each broken configuration of the issue, run as the real CLI
 * in a child process both as `validate-config FILE` and as the server (`--config FILE`), exits 2
 * naming the field and what it expects, and leaves no process behind after 5 s (its whole process
 * group, workers included, is gone). Every configuration file the repo ships passes validate-config
 * (as shipped: --file-only; with this machine's local stack in place of the cluster's addresses:
 * every start check) and starts, ready, against the real kube-apiserver and OpenFGA.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { applyManifests, freePort, type KubeApiserver, type OpenFGA, startKubeApiserver, startOpenFGA } from "../harness/index.ts";
import { credentials, type ServiceError, status as grpcStatus } from "@grpc/grpc-js";
import { installationServiceConstructor } from "../../src/server/installation-service.ts";
import { MAIN, NODE } from "../support/portcullis-process.ts";
import { MODEL_FILE } from "./fundament-world.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const CLUSTER = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const SECRET = "a-secret-long-enough-for-hs256-0123456789";
/** The environment the rows run in: no in-cluster variables, so only what a row names is missing. */
const BASE_ENV = { PORTCULLIS_JWT_SECRET: SECRET, KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" };

let api: KubeApiserver;
let fga: OpenFGA;
const dir = mkdtempSync(join(tmpdir(), "portcullis-start-checks-"));

beforeAll(async () => {
  // The shipped configurations name their store "fundament".
  [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE, storeName: "fundament" })]);
  const crds = resolve(ROOT, "deploy/k8s/crds");
  const files = readdirSync(crds).map((f) => join(crds, f));
  await applyManifests(api, files.filter((f) => /^kind: CustomResourceDefinition$/m.test(readFileSync(f, "utf8"))));
});

afterAll(async () => {
  await Promise.all([api?.stop(), fga?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** Whether the process group still had a member 5 s after the start (it is killed then). */
  readonly lingered: boolean;
}

function spawnCli(args: string[], env: Record<string, string>) {
  const child = spawn(NODE, [MAIN, ...args], { cwd: ROOT, env: { ...process.env, ...env }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const output = { stdout: "", stderr: "" };
  child.stdout.on("data", (d) => (output.stdout += String(d)));
  child.stderr.on("data", (d) => (output.stderr += String(d)));
  return { child, output };
}

/**
 * Runs the CLI in its own process group until it exits; 5 s later the group (workers included)
 * must be empty. A CLI that has not exited after EXIT_BOUND_MS lingers: on a machine this loaded a
 * Node start alone can take seconds, so the 5 s are counted from the exit.
 */
const EXIT_BOUND_MS = 25_000;
function run(args: string[], env: Record<string, string>): Promise<Run> {
  const { child, output } = spawnCli(args, env);
  const settle = () => {
    const lingered = groupAlive(child.pid!);
    if (lingered) process.kill(-child.pid!, "SIGKILL");
    return { code: child.exitCode, ...output, lingered };
  };
  return new Promise((resolveRun) => {
    const bound = setTimeout(() => resolveRun(settle()), EXIT_BOUND_MS);
    child.once("exit", () => {
      clearTimeout(bound);
      setTimeout(() => resolveRun(settle()), 5_000);
    });
  });
}

/** Starts the server and waits for /readyz 200 (then runs `whileReady`); stops it with SIGTERM and expects exit 0. */
async function startsReady(path: string, env: Record<string, string>, whileReady?: (listen: { grpc: string; internal: string }) => Promise<void>): Promise<void> {
  const listen = (parse(readFileSync(path, "utf8")) as { listen: { admin: string; grpc: string; internal: string } }).listen;
  const admin = listen.admin;
  const { child, output } = spawnCli(["--config", path], env);
  try {
    await expect
      .poll(async () => (child.exitCode === null ? (await fetch(`http://${admin}/readyz`).catch(() => undefined))?.status : `exited: ${output.stderr}`), { timeout: 30_000, interval: 200 })
      .toBe(200);
    await whileReady?.(listen);
  } finally {
    child.kill("SIGTERM");
  }
  expect(await exitCode(child), output.stderr).toBe(0);
  expect(output.stdout).toContain('"msg":"portcullis listening"');
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

function write(name: string, config: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof config === "string" ? config : stringify(config));
  return path;
}

async function listen() {
  return { grpc: `127.0.0.1:${await freePort()}`, admin: `127.0.0.1:${await freePort()}`, internal: `127.0.0.1:${await freePort()}` };
}

/** A configuration that starts here: the rows break one thing each. */
async function valid(): Promise<Record<string, unknown>> {
  return {
    listen: await listen(),
    shutdown: { drainMs: 0 },
    tokens: { secrets: [{ env: "PORTCULLIS_JWT_SECRET" }] },
    openfga: { apiUrl: fga.apiUrl, storeId: fga.storeId },
    clusters: [{ id: CLUSTER, kubeconfig: api.kubeconfigPath }],
  };
}

const secretFile = () => write("short-secret", "x\n");

const rows: Array<{ name: string; config: (c: Record<string, unknown>) => Record<string, unknown>; env?: Record<string, string>; field: string; expected: string | (() => string) }> = [
  {
    name: "missing secret env var",
    config: (c) => c,
    env: { PORTCULLIS_JWT_SECRET: "" },
    field: "tokens.secrets[0]",
    expected: "environment variable PORTCULLIS_JWT_SECRET is not set",
  },
  {
    name: "missing secret file",
    config: (c) => ({ ...c, tokens: { secrets: [{ file: "/nonexistent/portcullis/jwt" }] } }),
    field: "tokens.secrets[0]",
    expected: "cannot read /nonexistent/portcullis/jwt (ENOENT)",
  },
  { name: "port 70000", config: (c) => ({ ...c, listen: { ...(c["listen"] as object), grpc: "127.0.0.1:70000" } }), field: "listen.grpc", expected: "expected a port from 1 to 65535" },
  {
    name: "a 1-byte HS256 secret (file)",
    config: (c) => ({ ...c, tokens: { secrets: [{ file: secretFile() }] } }),
    field: "tokens.secrets[0]",
    expected: "expected an HS256 secret of at least 32 bytes, got 1",
  },
  {
    name: "a 1-byte HS256 secret (env)",
    config: (c) => c,
    env: { PORTCULLIS_JWT_SECRET: "x" },
    field: "tokens.secrets[0]",
    expected: "expected an HS256 secret of at least 32 bytes, got 1",
  },
  { name: "timeoutMs 80000000000", config: (c) => ({ ...c, check: { timeoutMs: 80_000_000_000 } }), field: "check.timeoutMs", expected: "expected whole milliseconds from 1 to 60000 (60 s)" },
  {
    name: "missing kubeconfig",
    config: (c) => ({ ...c, clusters: [{ id: CLUSTER, kubeconfig: "/nonexistent/kubeconfig" }] }),
    field: "clusters[0]",
    expected: "kubeconfig: cannot read /nonexistent/kubeconfig (ENOENT)",
  },
  {
    name: "unknown context",
    config: (c) => ({ ...c, clusters: [{ id: CLUSTER, kubeconfig: api.kubeconfigPath, context: "prod" }] }),
    field: "clusters[0]",
    expected: () => `context: expected a context of ${api.kubeconfigPath}, got "prod" (it has: test)`,
  },
  {
    name: "in-cluster outside a pod",
    config: (c) => ({ ...c, clusters: [{ id: CLUSTER }] }),
    field: "clusters[0]",
    expected: "in-cluster configuration (no kubeconfig) needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set",
  },
  {
    name: "bad store id (the one once shipped)",
    config: (c) => ({ ...c, openfga: { apiUrl: fga.apiUrl, storeId: "01JFUNDAMENTSTORE000000000" } }),
    field: "openfga.storeId",
    expected: "expected an OpenFGA store id: a ULID",
  },
  { name: "OpenFGA URL of another scheme", config: (c) => ({ ...c, openfga: { apiUrl: "file:///etc/passwd", storeId: fga.storeId } }), field: "openfga.apiUrl", expected: "expected an http:// or https:// URL" },
  {
    name: "missing secret env var, workers: 2",
    config: (c) => ({ ...c, workers: 2 }),
    env: { PORTCULLIS_JWT_SECRET: "" },
    field: "tokens.secrets[0]",
    expected: "environment variable PORTCULLIS_JWT_SECRET is not set",
  },
];

describe("a broken configuration: validate-config and the server exit 2 naming the field, and nothing lingers", () => {
  it.each(rows)("$name", { timeout: 2 * (EXIT_BOUND_MS + 5_000) + 5_000 }, async ({ name, config, env, field, expected }) => {
    const path = write(`${name.replace(/\W+/g, "-")}.yaml`, config(await valid()));
    for (const args of [["validate-config", path], ["--config", path]]) {
      const res = await run(args, { ...BASE_ENV, ...env });
      expect(res.lingered, `${args[0]}: a process was left after 5 s`).toBe(false);
      expect(res.code, `${args[0]}: ${res.stderr}`).toBe(2);
      expect(res.stderr).toContain(`invalid configuration: ${path}:\n`);
      expect(res.stderr).toContain(`\n  ${field}: ${typeof expected === "function" ? expected() : expected}`);
      // Nothing started: no log line at all, let alone "portcullis listening".
      expect(res.stdout).toBe("");
      // The secret itself is never echoed.
      expect(res.stderr).not.toContain(SECRET);
    }
  });

  it("the control: the same configuration, unbroken, passes validate-config and starts", async () => {
    const path = write("control.yaml", await valid());
    expect((await run(["validate-config", path], BASE_ENV)).code).toBe(0);
    await startsReady(path, BASE_ENV);
  }, 90_000);
});

describe("a Konfidence-only configuration (no tokens, openfga or clusters)", () => {
  it("passes validate-config, starts ready, answers a Fundament route 403 no-policy and knows no installation", async () => {
    const path = write("konfidence-only.yaml", { listen: await listen(), shutdown: { drainMs: 0 }, konfidence: { cluster: { kubeconfig: api.kubeconfigPath } } });
    expect(await run(["validate-config", path], BASE_ENV)).toMatchObject({ code: 0, lingered: false });
    await startsReady(path, BASE_ENV, async ({ grpc, internal }) => {
      const denied = await run(["check", "--server", grpc, "--policy", "kube-api-proxy", "--path", `/clusters/${CLUSTER}/version`, "--token", "x"], {});
      expect(denied, denied.stderr).toMatchObject({ code: 1 });
      expect(denied.stdout).toMatch(/^decision: deny\nstatus: {3}403\nreason: {3}no-policy\n/);
      // The internal RPC watches no PluginInstallations here: every installation is unknown.
      expect(await installationManifestCode(internal)).toBe(grpcStatus.NOT_FOUND);
    });
  }, 90_000);
});

/** A shipped file with this machine's local stack in place of the cluster's addresses; nothing else changes. */
async function onLocalStack(file: string): Promise<{ path: string; changed: string[] }> {
  const config = parse(readFileSync(resolve(ROOT, file), "utf8")) as Record<string, any>;
  const changed = ["listen", "openfga.apiUrl"];
  config["listen"] = await listen();
  config["openfga"].apiUrl = fga.apiUrl;
  for (const [i, cluster] of (config["clusters"] as Array<Record<string, unknown>>).entries()) {
    cluster["kubeconfig"] = api.kubeconfigPath;
    changed.push(`clusters[${i}].kubeconfig`);
  }
  if (config["revocations"] !== undefined) {
    config["revocations"] = { kubeconfig: api.kubeconfigPath };
    changed.push("revocations");
  }
  if (config["clusterRegistry"] !== undefined) {
    config["clusterRegistry"] = { ...config["clusterRegistry"], kubeconfig: api.kubeconfigPath };
    changed.push("clusterRegistry.kubeconfig");
  }
  // Stops at once on SIGTERM; the drain itself is tested elsewhere (test/server/app.shutdown.process.test.ts).
  config["shutdown"] = { drainMs: 0 };
  changed.push("shutdown.drainMs");
  return { path: write(file.replace(/\W+/g, "-"), config), changed };
}

const SHIPPED = ["deploy/examples/portcullis.yaml", "deploy/k8s/portcullis.yaml"];

describe("every configuration file the repo ships", () => {
  it("is the list of shipped portcullis configurations (a new one joins this test)", () => {
    // envoy.yaml beside them is Envoy's: `envoy-config`'s output for portcullis.yaml.
    const examples = readdirSync(resolve(ROOT, "deploy/examples")).filter((f) => f.endsWith(".yaml") && f !== "envoy.yaml").map((f) => `deploy/examples/${f}`);
    const configMaps = (parse(readFileSync(resolve(ROOT, "deploy/k8s/kustomization.yaml"), "utf8")) as { configMapGenerator: Array<{ files: string[] }> }).configMapGenerator
      .flatMap((g) => g.files)
      .map((f) => `deploy/k8s/${f.split("=").at(-1)}`);
    expect([...examples, ...configMaps].sort()).toEqual([...SHIPPED].sort());
  });

  it.each(SHIPPED)("%s passes validate-config --file-only as shipped", { timeout: EXIT_BOUND_MS + 10_000 }, async (file) => {
    const res = await run(["validate-config", "--file-only", file], BASE_ENV);
    expect(res).toMatchObject({ code: 0, stdout: `${file}: ok\n`, stderr: "", lingered: false });
  });

  it.each(SHIPPED)("%s, on the local stack, passes every start check and starts ready", async (file) => {
    const { path, changed } = await onLocalStack(file);
    expect(changed.length).toBeGreaterThan(0);
    const checked = await run(["validate-config", path], BASE_ENV);
    expect(checked, checked.stderr).toMatchObject({ code: 0, stderr: "", lingered: false });
    await startsReady(path, BASE_ENV);
  }, 90_000);
});

function installationManifestCode(address: string): Promise<number> {
  const Service = installationServiceConstructor();
  const client = new Service(address, credentials.createInsecure());
  return new Promise((resolveCall) => {
    (client["GetInstallationManifest"] as (req: object, cb: (err: ServiceError | null) => void) => void).call(
      client,
      { cluster_id: CLUSTER, installation_id: "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f" },
      (err) => {
        client.close();
        resolveCall(err === null ? 0 : err.code);
      },
    );
  });
}

function exitCode(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolveExit) => child.once("exit", (code) => resolveExit(code)));
}
