/**
 * Graceful shutdown of the real process: `node src/cli/main.ts --config FILE` (the pinned Node from
 * node_modules/.bin, what `npx node` runs) against wire fakes, with OpenFGA slow so that checks are
 * in flight when SIGTERM lands. Health must turn NOT_SERVING before any in-flight check is answered,
 * every in-flight check must be answered, every audit line written, the exit status 0, and neither
 * stdout nor stderr may hold a credential.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { afterAll, beforeAll, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "../support/wire-fakes/openfga.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { freePort } from "../harness/ports.ts";
import { ids, OLD_SECRET, PINNED_HASH, pluginToken, SECRET } from "../support/tokens.ts";
import { healthStatus, watchHealth } from "./grpc-health.ts";
import { signatureOf } from "./jwt-craft.ts";

const NODE = resolve(import.meta.dirname, "../../node_modules/.bin/node");
const MAIN = resolve(import.meta.dirname, "../../src/cli/main.ts");
const IN_FLIGHT = 50;
/** OpenFGA answers after this, inside the configured deadlines: the checks are slow, not failing. */
const OPENFGA_DELAY_MS = 1_500;

let dir: string;
let openfga: FakeOpenFga;
let kube: FakeKubeApi;
let child: ChildProcessByStdio<null, Readable, Readable>;
let stdout = "";
let stderr = "";
let grpcPort: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-shutdown-"));
  openfga = await new FakeOpenFga().start();
  kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  const config = join(dir, "portcullis.yaml");
  // Fixed ports: the log stream is buffered, so the "listening" line cannot be waited for.
  grpcPort = await freePort();
  writeFileSync(
    config,
    `listen: { grpc: "127.0.0.1:${grpcPort}", admin: "127.0.0.1:${await freePort()}", internal: "127.0.0.1:${await freePort()}" }
logLevel: info
check: { timeoutMs: 4000 }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
openfga: { apiUrl: "${openfga.url}", storeId: "${openfga.storeId}", timeoutMs: 3000, allowTtlMs: 1, denyTtlMs: 1 }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${kube.writeKubeconfig(dir)}" }]
`,
  );
  child = spawn(NODE, [MAIN, "--config", config], {
    env: { PATH: process.env["PATH"] ?? "", PORTCULLIS_SECRET: SECRET, PORTCULLIS_OLD_SECRET: OLD_SECRET },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
});

afterAll(async () => {
  if (child.exitCode === null) child.kill("SIGKILL");
  await Promise.all([openfga.stop(), kube.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const lines = () =>
  stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

it("SIGTERM with checks in flight: NOT_SERVING first, every check answered and audited, exit 0, no credential on stdout or stderr", { timeout: 60_000 }, async () => {
  const address = `127.0.0.1:${grpcPort}`;
  await until(async () => (await healthStatus(address)) === "SERVING", 20_000, "portcullis to start and its index to sync (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${stderr}`);
  });

  const health = watchHealth(address);
  await until(() => health.statuses.includes("SERVING"), 2_000, "the health watch to report SERVING");
  const events: Array<{ at: number; what: string }> = [];
  health.statuses.length = 0;
  const recordHealth = setInterval(() => {
    while (health.statuses.length > 0) events.push({ at: performance.now(), what: `health ${health.statuses.shift()}` });
  }, 1);

  openfga.slowMs = OPENFGA_DELAY_MS;
  openfga.fault = "slow";
  const client = authorizationClient(address);
  const token = await pluginToken();
  const requestIds = Array.from({ length: IN_FLIGHT }, (_, i) => `shutdown-${i}`);
  const answers = requestIds.map((id) =>
    client
      .check(envoyCheckRequest({ path: `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`, headers: { authorization: `Bearer ${token}`, "x-request-id": id }, policy: "kube-api-proxy" }))
      .then((res) => {
        events.push({ at: performance.now(), what: "answer" });
        return summarize(res as CheckResponse);
      }),
  );
  // Every check is waiting on OpenFGA (one coalesced Check per user and cluster) before the signal.
  await until(() => openfga.pendingRequests > 0, 2_000, "the checks to reach OpenFGA");
  const exited = new Promise<number | null>((r) =>
    child.once("exit", (code) => {
      events.push({ at: performance.now(), what: "exit" });
      r(code);
    }),
  );
  child.kill("SIGTERM");

  const results = await Promise.all(answers);
  const code = await exited;
  clearInterval(recordHealth);
  while (health.statuses.length > 0) events.push({ at: performance.now(), what: `health ${health.statuses.shift()}` });
  health.close();
  client.close();

  expect(results.map((r) => (r.allowed ? "allowed" : r.reason))).toEqual(requestIds.map(() => "allowed"));
  const notServing = events.findIndex((e) => e.what === "health NOT_SERVING");
  const firstAnswer = events.findIndex((e) => e.what === "answer");
  expect(notServing, JSON.stringify(events.slice(0, 5))).toBeGreaterThanOrEqual(0);
  expect(notServing).toBeLessThan(firstAnswer);
  expect(code).toBe(0);
  // Nothing (an open health Watch included) holds the process once the last check is answered.
  expect(events.find((e) => e.what === "exit")!.at - events.findLast((e) => e.what === "answer")!.at).toBeLessThan(2_000);

  const audits = lines().filter((l) => l["audit"] === "plugin_request");
  expect(audits.map((a) => a["request_id"]).sort()).toEqual([...requestIds].sort());
  expect(audits.every((a) => a["decision"] === "allowed")).toBe(true);

  for (const secret of [SECRET, OLD_SECRET, token, signatureOf(token), kube.bearer, ...kube.issuedTokens]) {
    expect(stdout).not.toContain(secret);
    expect(stderr).not.toContain(secret);
  }
  expect(stderr).toBe("");
  console.log(
    `shutdown: ${IN_FLIGHT} checks in flight at SIGTERM, ${results.length} answered, ${audits.length} audit lines, exit ${String(code)}, NOT_SERVING ${(events[firstAnswer]!.at - events[notServing]!.at).toFixed(0)} ms before the first answer, exit ${(events.find((e) => e.what === "exit")!.at - events.findLast((e) => e.what === "answer")!.at).toFixed(0)} ms after the last`,
  );
});
