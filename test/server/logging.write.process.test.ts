/**
 * A batch of audit lines handed to stdout is in the kernel when the write returns (src/server/logging.ts):
 * one write(2) from the event loop, nothing left in the process. A process that writes a batch and is
 * SIGKILLed at once, in the same turn of the event loop, still leaves every line on its stdout; with the
 * thread-pool destination the lines were still queued in the process and were lost.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect, it } from "vitest";

const LOGGING = resolve(import.meta.dirname, "../../src/server/logging.ts");

it("a batch written is on stdout even when the process is SIGKILLed right after", () => {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-logging-write-"));
  const file = join(dir, "stdout");
  const out = openSync(file, "w");
  const script = `
    const { createLogging } = await import(${JSON.stringify(LOGGING)});
    const logging = createLogging("info");
    for (let i = 0; i < 200; i++) logging.audit.pluginRequest({ audit: "plugin_request", user: "u", cluster_id: "c", installation_id: "i", plugin_name: "p",
      plugin_version: "1", definition_hash: "h", pinned_definition_hash: "h", verb: "get", api_group: "", resource: "pods", subresource: "", namespace: "n",
      name: String(i), path: "", decision: "allowed", request_id: "r" + i });
    logging.writeAuditBatch();
    process.kill(process.pid, "SIGKILL");
  `;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", out, "pipe"], timeout: 30_000 });
  closeSync(out);
  expect(run.signal).toBe("SIGKILL");
  const lines = readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
  expect(lines).toHaveLength(200);
  expect(lines.map((l) => (JSON.parse(l) as { name: string }).name)).toEqual(Array.from({ length: 200 }, (_, i) => String(i)));
});
