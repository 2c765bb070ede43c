/**
 * The fields docs/operations.md promises are on the lines (issue 13). A real portcullis process
 * against the wire fakes is taken through start, a denial, an OpenFGA outage, a watch failure and
 * SIGTERM; every line it writes is read back: the common fields on every line but the audit lines,
 * and on each line whose message the Logs table lists, every field of its row. An `err` keeps its
 * cause (type, message, status).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, type ProcessWorld, spawnPortcullisFile, startProcessWorld } from "../support/portcullis-process.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const doc = readFileSync(resolve(import.meta.dirname, "../../docs/operations.md"), "utf8");

interface Row {
  /** The message, or its beginning when the table abbreviates it with `…`. */
  readonly message: string;
  readonly prefix: boolean;
  /** Each entry: the line has at least one of these fields (most entries name one). */
  readonly fields: ReadonlyArray<readonly string[]>;
}

/** The Logs table: `| \`message\` | level | \`field\`, \`a\` or \`b\` (note) | meaning |`. */
function logsTable(): Row[] {
  const logs = doc.slice(doc.indexOf("## Logs"), doc.indexOf("## The audit line"));
  return logs
    .split("\n")
    .filter((line) => line.startsWith("| `"))
    .map((line) => {
      const [messageCell, , fieldsCell] = line.split(" | ");
      const message = /`([^`]+)`/.exec(messageCell!)![1]!;
      const fields = fieldsCell!
        .split(", ")
        .map((part) => [...part.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!))
        .filter((names) => names.length > 0);
      return { message: message.replace(/…$/, "").trimEnd(), prefix: message.endsWith("…"), fields };
    });
}

const COMMON = ["level", "time", "pid", "hostname", "msg"];

async function until(condition: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let world: ProcessWorld;
let portcullis: PortcullisProcess;
let lines: Array<Record<string, unknown>>;

beforeAll(async () => {
  world = await startProcessWorld("log-fields");
  const addresses = await freeAddresses();
  const config = join(world.dir, "log-fields.yaml");
  writeFileSync(
    config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
logLevel: debug
check: { timeoutMs: 4000 }
shutdown: { drainMs: 0 }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }]
openfga: { apiUrl: "${world.openfga.url}", storeId: "${world.openfga.storeId}", timeoutMs: 1000, allowTtlMs: 1, denyTtlMs: 1 }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${world.kubeconfig}" }]
plugins: { allowUnpinned: true }
`,
  );
  portcullis = spawnPortcullisFile(config, addresses);
  await until(async () => (await fetch(`http://${addresses.admin}/readyz`).catch(() => undefined))?.status === 200, 30_000, "ready");
  const client = authorizationClient(addresses.grpc);
  const kube = (headers: Record<string, string>) => client.check(envoyCheckRequest({ path: `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`, headers, policy: "kube-api-proxy" }));
  // A denial (debug), then an OpenFGA answering 500: a 503 with its cause.
  await kube({});
  world.openfga.fault = "status-500";
  await kube({ authorization: `Bearer ${await pluginToken()}` });
  // The watch breaks and the list fails: the index's restart line.
  world.kube.faults.list = "status-500";
  world.kube.faults.watch = "status-500";
  world.kube.cutWatches();
  await until(async () => portcullis.lines().some((l) => String(l["msg"]).includes("watch failed")), 20_000, "the watch failure line");
  client.close();
  portcullis.child.kill("SIGTERM");
  await portcullis.exited;
  lines = portcullis.lines();
}, 120_000);

afterAll(async () => {
  portcullis?.kill();
  await world?.stop();
});

describe("the Logs table of docs/operations.md", () => {
  const rows = logsTable();

  it("is read (sanity: the rows and their fields)", () => {
    expect(rows.find((r) => r.message === "dependency unavailable")?.fields).toEqual([["reason"], ["error"], ["request_id"], ["policy"]]);
    expect(rows.find((r) => r.message === "plugin installation index synced")?.fields).toEqual([["cluster_id"], ["installations", "projects"]]);
  });

  it("every line but the audit lines carries the common fields", () => {
    const logLines = lines.filter((l) => l["audit"] === undefined);
    expect(logLines.length).toBeGreaterThan(5);
    for (const line of logLines) for (const field of COMMON) expect(line, `${field} on ${JSON.stringify(line)}`).toHaveProperty(field);
  });

  it.each([
    "portcullis listening",
    "UNPINNED PLUGIN INSTALLATIONS ARE ACCEPTED:",
    "plugin installation index synced",
    "denied",
    "dependency unavailable",
    "plugin installation watch failed; restarting",
    "shutting down: NOT_SERVING, still answering checks for the drain period",
    "drain period over: no longer accepting, answering checks in flight",
  ])("%s: written here, with every field its row promises", (message) => {
    const row = rows.find((r) => r.message === message);
    expect(row, `a Logs row for ${message}`).toBeDefined();
    const written = lines.filter((l) => (row!.prefix ? String(l["msg"]).startsWith(message) : l["msg"] === message));
    expect(written.length, `lines "${message}" in:\n${portcullis.stdout()}`).toBeGreaterThan(0);
    for (const line of written) {
      for (const names of row!.fields) expect(names.some((n) => n in line), `${names.join(" or ")} on ${JSON.stringify(line)}`).toBe(true);
    }
  });

  it("an err keeps its cause: the 503's OpenFGA status, the watch's API server status", () => {
    const unavailable = lines.find((l) => l["msg"] === "dependency unavailable")!;
    expect(unavailable["error"]).toMatch(/^openfga: FgaApiInternalError 500/);
    const watch = lines.find((l) => l["msg"] === "plugin installation watch failed; restarting")!;
    // Cut mid-watch: undici's "fetch failed" keeps the socket error under it.
    expect(watch["err"]).toMatchObject({ type: expect.any(String), message: expect.stringContaining("cause"), cause: { type: expect.any(String) } });
    expect(JSON.stringify(watch["err"])).not.toContain('"type":"string"');
  });
});
