/**
 * `workers: 2`: the primary serves the admin port for both workers. Checks over real gRPC land on
 * both (one connection per client, handed round-robin); one /metrics scrape sums both workers'
 * decisions and gRPC calls, however often it is repeated; /readyz?verbose lists each worker.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { freePort } from "../harness/ports.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const dir = mkdtempSync(join(tmpdir(), "portcullis-workers-admin-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function start(file: string): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ["src/cli/main.ts", "--config", file], {
    cwd: ROOT,
    env: { ...process.env, WORKERS_ADMIN_SECRET: "a-secret-that-is-long-enough-for-hs256-0123456789" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  return { child, output: () => out, exited };
}

/** Waits for `condition`; on timeout the error carries the server's output, which says why (a port taken, a worker that failed). */
async function until(condition: () => boolean, ms: number, output: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out; the server's output ends:\n${output().slice(-4_000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The sample's value for a metric name and exact label set, or undefined when the scrape lacks it. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    const match = /^([a-z0-9_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const got = Object.fromEntries([...(match[2] ?? "").matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (JSON.stringify(Object.entries(got).sort()) === JSON.stringify(Object.entries(labels).sort())) return Number(match[3]);
  }
  return undefined;
}

describe("workers: 2, the primary's admin port", () => {
  it("sums both workers' decisions and gRPC calls in one scrape, and is ready only with both listed", async () => {
    const [grpc, admin, internal] = [await freePort(), await freePort(), await freePort()];
    const file = join(dir, "config.yaml");
    writeFileSync(
      file,
      [
        "workers: 2",
        "logLevel: debug",
        `listen: { grpc: "127.0.0.1:${grpc}", admin: "127.0.0.1:${admin}", internal: "127.0.0.1:${internal}" }`,
        "tokens: { secrets: [{ env: WORKERS_ADMIN_SECRET }] }",
        'openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" }',
        "",
      ].join("\n"),
    );
    const server = start(file);
    try {
      await until(() => (server.output().match(/portcullis listening/g) ?? []).length === 2, 30_000, server.output);
      const workerPids = [...server.output().matchAll(/"pid":(\d+)[^\n]*portcullis listening/g)].map((m) => m[1]!);
      expect(new Set(workerPids).size).toBe(2);

      // One connection per client (no shared subchannel pool): the primary hands connections to the
      // workers in turn, so both answer. A request without a token is denied (logged at debug, by pid).
      const CLIENTS = 6;
      const PER_CLIENT = 5;
      const clients = Array.from({ length: CLIENTS }, () => authorizationClient(`127.0.0.1:${grpc}`, undefined, { "grpc.use_local_subchannel_pool": 1 }));
      for (const client of clients) {
        const answers = await Promise.all(
          Array.from({ length: PER_CLIENT }, () => client.check(envoyCheckRequest({ path: "/clusters/c/api/v1/pods", policy: "kube-api-proxy" }))),
        );
        expect(answers.every((a) => (a as { status: { code: number } }).status.code !== 0)).toBe(true);
      }
      for (const client of clients) client.close();
      const total = CLIENTS * PER_CLIENT;
      await until(() => (server.output().match(/"msg":"denied"/g) ?? []).length === total, 5_000, server.output);
      const deniedBy = (pid: string) => (server.output().match(new RegExp(`"pid":${pid}[^\\n]*"msg":"denied"`, "g")) ?? []).length;
      const perWorker = workerPids.map(deniedBy);
      expect(perWorker.every((n) => n > 0), `denials per worker ${perWorker.join(", ")}`).toBe(true);
      expect(perWorker[0]! + perWorker[1]!).toBe(total);

      // Any scrape, not just one that happens to reach the busier worker, shows the sum.
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`http://127.0.0.1:${admin}/metrics`);
        expect(res.status).toBe(200);
        const text = await res.text();
        const decisions = text
          .split("\n")
          .filter((l) => l.startsWith('portcullis_decisions_total{policy="kube-api-proxy"'))
          .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
        expect(decisions).toBe(total);
        expect(sample(text, "portcullis_grpc_server_handled_total", { method: "envoy.service.auth.v3.Authorization/Check", code: "OK" })).toBe(total);
        expect(sample(text, "portcullis_grpc_server_handling_seconds_count", { method: "envoy.service.auth.v3.Authorization/Check" })).toBe(total);
        // Not summed: one build, however many workers run it.
        expect(text).toMatch(/^portcullis_build_info\{version="[^"]+",node="v24\.[^"]+"\} 1$/m);
        expect(sample(text, "portcullis_dependency_errors_total", { dependency: "kube-subjectaccessreview" })).toBe(0);
      }

      const ready = await fetch(`http://127.0.0.1:${admin}/readyz?verbose`);
      const body = await ready.text();
      expect(ready.status, body).toBe(200);
      expect(body).toContain("[+]workers: 2 of 2 listening");
      for (const pid of workerPids) expect(body).toContain(`[+]worker ${pid} shutdown: not begun`);
      expect(body.endsWith("ready\n")).toBe(true);
      expect(await (await fetch(`http://127.0.0.1:${admin}/readyz`)).text()).toBe("ready\n");

      server.child.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill("SIGKILL");
    }
  }, 60_000);
});
