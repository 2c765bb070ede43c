/**
 * The memory scenario: portcullis on its real ports (bench/servers/portcullis.ts --scenario
 * real-ports) against the wire fakes in another process, with N installations in the watched
 * index, then N users' PluginTokens checked once each on the plugin-proxy route (a verified-token
 * entry and a can_view entry per user). The server's RSS
 * is read from /proc before and after, and its heap after a full GC (SIGUSR2 report).
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { authorizationClient } from "../src/envoy/protos.ts";
import { pluginClaims, sign } from "../test/support/tokens.ts";
import { rssBytes } from "./ghz.ts";
import type { MemoryReport } from "./servers/common.ts";
import { startProcess } from "./processes.ts";
import { BENCH_CLUSTER, benchWorld, envoyCheck, userId } from "./workload.ts";

export interface MemoryScenario {
  readonly users: number;
  readonly installations: number;
  readonly allowed: number;
  readonly failed: number;
  readonly fillSeconds: number;
  /** VmRSS of the idle server once its index has synced. */
  readonly rssIdleBytes: number;
  /** VmRSS right after the last check. */
  readonly rssFilledBytes: number;
  /** After a full GC. */
  readonly afterGc: MemoryReport;
  readonly idleAfterGc: MemoryReport;
}

export async function runMemoryScenario(options: {
  workDir: string;
  users: number;
  installations: number;
  serverCore: string;
  loadCore: string;
  /** Diagnostics: called with the server's pid once the checks are done, before the GC report. */
  onFilled?: (pid: number) => Promise<void>;
}): Promise<MemoryScenario> {
  const { workDir } = options;
  const world = benchWorld(options.installations);
  const worldFile = join(workDir, "world-memory.json");
  writeFileSync(worldFile, JSON.stringify(world));
  const node = process.execPath;
  const fakes = await startProcess({
    name: "upstream-fakes",
    core: options.loadCore,
    command: [node, join(import.meta.dirname, "servers/upstream-fakes.ts"), "--ready-file", "{READY}", "--world", worldFile],
    workDir,
  });
  const memoryFile = join(workDir, "memory-report.json");
  const server = await startProcess({
    name: "portcullis-real-ports",
    core: options.serverCore,
    command: [
      node,
      "--expose-gc",
      join(import.meta.dirname, "servers/portcullis.ts"),
      "--ready-file",
      "{READY}",
      "--world",
      worldFile,
      "--scenario",
      "real-ports",
      "--upstream",
      join(workDir, "upstream-fakes.ready.json"),
      "--memory-file",
      memoryFile,
    ],
    workDir,
    timeoutMs: 120_000,
  });
  const report = async (): Promise<MemoryReport> => {
    rmSync(memoryFile, { force: true });
    process.kill(server.pid, "SIGUSR2");
    while (!existsSync(memoryFile)) await sleep(50);
    return JSON.parse(readFileSync(memoryFile, "utf8")) as MemoryReport;
  };
  try {
    await sleep(1_000);
    const rssIdleBytes = rssBytes(server.pid);
    const idleAfterGc = await report();
    const client = authorizationClient(`127.0.0.1:${server.port}`);
    let next = 0;
    let allowed = 0;
    let failed = 0;
    const started = performance.now();
    const exp = Math.floor(Date.now() / 1000) + 3600;
    const worker = async () => {
      for (;;) {
        const i = next++;
        if (i >= options.users) return;
        const inst = world.installations[i % world.installations.length]!;
        const token = await sign(
          pluginClaims({ sub: userId(i), cluster_id: BENCH_CLUSTER, installation_id: inst.uid, installation_name: inst.name, plugin_name: inst.pluginName }),
          { exp },
        );
        const request = envoyCheck("GET", `/installations/${inst.uid}/runtime/api/v1/status`, { authorization: `Bearer ${token}` }, "plugin-proxy");
        // proto-loader encodes Timestamps from {seconds, nanos}, not from ghz's JSON string form.
        delete ((request["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
        try {
          const res = (await client.check(request)) as { status?: { code?: number } };
          if (res.status?.code === 0) allowed++;
          else failed++;
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: 128 }, worker));
    const fillSeconds = (performance.now() - started) / 1000;
    client.close();
    const rssFilledBytes = rssBytes(server.pid);
    await options.onFilled?.(server.pid);
    const afterGc = await report();
    return { users: options.users, installations: options.installations, allowed, failed, fillSeconds, rssIdleBytes, rssFilledBytes, afterGc, idleAfterGc };
  } finally {
    await server.stop();
    await fakes.stop();
  }
}
