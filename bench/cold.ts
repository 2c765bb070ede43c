/**
 * Scenario 6, the cold path against the real dependencies (test/e2e/fundament-world.ts: a real
 * kube-apiserver + OpenFGA with Fundament's demo RBAC): the latency of a first check with every
 * cache empty, each remote call's own latency (the `portcullis:dependency` channel), and what 100
 * concurrent identical cold checks cost upstream. Every sample runs on a fresh portcullis (fresh
 * ports, so fresh caches) over real gRPC on 127.0.0.1.
 *
 *   node bench/cold.ts --out FILE [--samples N]
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { DependencyCall } from "../src/metrics/events.ts";
import { connectPorts } from "../src/server/ports.ts";
import { createLogging } from "../src/server/logging.ts";
import { startFundamentWorld, users, waitFor } from "../test/e2e/fundament-world.ts";
import { startTestServer, testConfig } from "../test/support/server.ts";
import { ids, pluginToken } from "../test/support/tokens.ts";

export interface ColdSample {
  readonly checkMs: number;
  readonly allowed: boolean;
  /** Each remote call this check made, with its own latency. */
  readonly calls: Array<{ dependency: string; ms: number; ok: boolean }>;
}

export interface ColdResult {
  readonly samples: ColdSample[];
  readonly concurrent: {
    readonly checks: number;
    readonly allowed: number;
    readonly wallMs: number;
    readonly upstreamCalls: Record<string, number>;
  };
  readonly worldStartSeconds: number;
}

const PATH = `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`;

export async function runCold(samples: number): Promise<ColdResult> {
  const t0 = performance.now();
  const world = await startFundamentWorld({ allowTtlMs: 600_000, denyTtlMs: 600_000 });
  const worldStartSeconds = (performance.now() - t0) / 1000;
  const config = testConfig({
    logLevel: "warn",
    clusters: [{ id: ids.cluster, kubeconfig: world.api.kubeconfigPath }],
    openfga: { apiUrl: world.fga.apiUrl, storeId: world.fga.storeId, authorizationModelId: world.fga.modelId, timeoutMs: 2_000, allowTtlMs: 600_000 },
    kube: { sar: { timeoutMs: 2_000, allowTtlMs: 600_000 }, tokenRequest: { timeoutMs: 2_000 } },
    check: { timeoutMs: 5_000 },
  });
  const fresh = async () => {
    const ports = await connectPorts(config, createLogging("warn").logger);
    await waitFor(async () => ports.ready());
    const server = await startTestServer(ports, config);
    // The gRPC connection is set up by a check that needs no dependency, so it is not counted.
    await server.check({ path: "/plugins/sdk/1.0.0/sdk.js", policy: "plugin-assets" });
    return server;
  };
  let calls: Array<{ dependency: string; ms: number; ok: boolean }> = [];
  const onCall = (m: unknown) => {
    const c = m as DependencyCall;
    calls.push({ dependency: c.dependency, ms: c.seconds * 1000, ok: c.ok });
  };
  subscribe("portcullis:dependency", onCall);
  try {
    const result: ColdSample[] = [];
    for (let i = 0; i < samples; i++) {
      const server = await fresh();
      const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
      calls = [];
      const started = performance.now();
      const res = await server.check({ path: PATH, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
      result.push({ checkMs: performance.now() - started, allowed: res.allowed, calls });
      await server.stop();
    }

    const server = await fresh();
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    calls = [];
    const started = performance.now();
    const answers = await Promise.all(
      Array.from({ length: 100 }, () => server.check({ path: PATH, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" })),
    );
    const wallMs = performance.now() - started;
    const upstreamCalls: Record<string, number> = {};
    for (const c of calls) upstreamCalls[c.dependency] = (upstreamCalls[c.dependency] ?? 0) + 1;
    await server.stop();
    return {
      samples: result,
      concurrent: { checks: answers.length, allowed: answers.filter((a) => a.allowed).length, wallMs, upstreamCalls },
      worldStartSeconds,
    };
  } finally {
    unsubscribe("portcullis:dependency", onCall);
    await world.stop();
  }
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { out: { type: "string" }, samples: { type: "string", default: "10" } } });
  const result = await runCold(Number(values.samples));
  if (values.out === undefined) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else writeFileSync(values.out, JSON.stringify(result));
  process.exit(0);
}
