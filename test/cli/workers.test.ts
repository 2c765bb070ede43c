/**
 * `workers: N`: the primary forks N workers that share the gRPC port; each answers checks; SIGTERM
 * to the primary drains every worker (each for shutdown.drainMs) and the primary exits 0. A worker that cannot start stops the
 * whole server with a non-zero exit, as a single process would, and so does an admin port the
 * primary cannot bind. (A configuration error, an unset secret among them, ends the primary before
 * any worker is forked: test/cli/config-commands.test.ts.)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { freePort } from "../harness/ports.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const dir = mkdtempSync(join(tmpdir(), "portcullis-workers-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** `secretEnv` names the environment variable holding the token secret; an unset one fails every worker's start. */
async function config(secretEnv = "WORKERS_TEST_SECRET"): Promise<{ file: string; grpc: number; admin: number }> {
  const [grpc, admin, internal] = [await freePort(), await freePort(), await freePort()];
  const file = join(dir, `config-${grpc}.yaml`);
  writeFileSync(
    file,
    [
      "workers: 2",
      `listen: { grpc: "127.0.0.1:${grpc}", admin: "127.0.0.1:${admin}", internal: "127.0.0.1:${internal}" }`,
      `tokens: { secrets: [{ env: ${secretEnv} }] }`,
      'openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" }',
      "",
    ].join("\n"),
  );
  return { file, grpc, admin };
}

/** Holds a port, as another process would, until closed. */
function occupy(port: number): Promise<Server> {
  return new Promise((resolveListen) => {
    const srv = createServer().listen(port, "127.0.0.1", () => resolveListen(srv));
  });
}

function run(file: string): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ["src/cli/main.ts", "--config", file], {
    cwd: ROOT,
    env: { ...process.env, WORKERS_TEST_SECRET: "a-secret-that-is-long-enough-for-hs256-0123456789" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  return { child, output: () => out, exited };
}

async function until(condition: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("workers", () => {
  it("two workers share the port, both answer, SIGTERM drains them and the primary exits 0", async () => {
    const { file, grpc } = await config();
    const server = run(file);
    try {
      await until(() => (server.output().match(/portcullis listening/g) ?? []).length === 2, 20_000);
      const client = authorizationClient(`127.0.0.1:${grpc}`);
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => client.check(envoyCheckRequest({ path: "/plugins/sdk/1.0.0/sdk.js", policy: "plugin-assets" }))),
      );
      client.close();
      expect(answers.every((a) => (a as { status: { code: number } }).status.code === 0)).toBe(true);
      const pids = new Set([...server.output().matchAll(/"pid":(\d+)[^\n]*portcullis listening/g)].map((m) => m[1]));
      expect(pids.size).toBe(2);
      server.child.kill("SIGTERM");
      expect(await server.exited).toBe(0);
      expect((server.output().match(/still answering checks for the drain period/g) ?? []).length).toBe(2);
    } finally {
      server.child.kill("SIGKILL");
    }
  }, 40_000);

  it.each([
    { name: "a worker that cannot start (its gRPC port taken) stops the server", port: "grpc" as const, line: /a worker failed to start/ },
    { name: "an admin port the primary cannot bind stops it before any worker starts", port: "admin" as const, line: /the admin port cannot be bound/ },
  ])("$name with a non-zero exit", async ({ port, line }) => {
    const ports = await config();
    const taken = await occupy(ports[port]);
    const server = run(ports.file);
    try {
      expect(await server.exited).not.toBe(0);
      expect(server.output()).toMatch(line);
      expect(server.output()).not.toMatch(/portcullis listening/);
    } finally {
      server.child.kill("SIGKILL");
      taken.close();
    }
  }, 60_000);
});
