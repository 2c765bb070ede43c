/**
 * portcullis with its REAL ports (OpenFGA SDK, client-node SubjectAccessReview, TokenRequest and
 * ListWatch) pointed at the wire fakes, served over real gRPC by startTestServer.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import type { Config } from "../../../src/config/schema.ts";
import { connectPorts, type ConnectedPorts } from "../../../src/server/ports.ts";
import { startTestServer, testConfig, type TestServer } from "../server.ts";
import { ids, PINNED_HASH } from "../tokens.ts";
import { FakeKubeApi } from "./kube-apiserver.ts";
import { FakeOpenFga } from "./openfga.ts";

export interface Wired {
  readonly openfga: FakeOpenFga;
  readonly kube: FakeKubeApi;
  readonly config: Config;
  readonly ports: ConnectedPorts;
  readonly server: TestServer;
  /** What connectPorts logged (the index's watch restarts go to this logger). */
  readonly portLog: () => string;
  stop(): Promise<void>;
}

/** The numbers every wired test relies on; caches are kept short so each check reaches the fakes. */
export const WIRED_TIMEOUTS = { checkMs: 600, openfgaMs: 250, sarMs: 250, tokenRequestMs: 300 } as const;

export function wiredConfig(openfga: FakeOpenFga, kubeconfig: string, overrides: Record<string, unknown> = {}): Config {
  return testConfig({
    check: { timeoutMs: WIRED_TIMEOUTS.checkMs, retryAfterSeconds: 1 },
    openfga: { apiUrl: openfga.url, storeId: openfga.storeId, timeoutMs: WIRED_TIMEOUTS.openfgaMs, allowTtlMs: 1, denyTtlMs: 1 },
    clusters: [{ id: ids.cluster, kubeconfig }],
    kube: {
      sar: { timeoutMs: WIRED_TIMEOUTS.sarMs, allowTtlMs: 1, denyTtlMs: 1 },
      tokenRequest: { timeoutMs: WIRED_TIMEOUTS.tokenRequestMs },
    },
    ...overrides,
  });
}

/** A cluster with the test installation and both ServiceAccounts in place, everything healthy. */
export interface WiredOptions {
  /** Wait for the installation index before serving (default true). */
  readonly waitForSync?: boolean;
  /** Sets the fakes up before portcullis first connects (e.g. an index that never syncs). */
  readonly before?: (fakes: { kube: FakeKubeApi; openfga: FakeOpenFga }) => void;
  /** Adjusts the configuration built around the fakes' addresses. */
  readonly config?: (config: Config) => Config;
}

export async function startWired(overrides: Record<string, unknown> = {}, options: WiredOptions = {}): Promise<Wired> {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-wired-"));
  const openfga = await new FakeOpenFga().start();
  const kube = await new FakeKubeApi().start();
  kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
  kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
  kube.serviceAccounts.add(`fundament-system/fundament-${ids.user}`);
  options.before?.({ kube, openfga });
  const built = wiredConfig(openfga, kube.writeKubeconfig(dir), overrides);
  const config = options.config?.(built) ?? built;

  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(String(chunk));
      cb();
    },
  });
  const ports = await connectPorts(config, pino({ level: config.logLevel }, sink));
  if (options.waitForSync ?? true) await until(() => indexAnswers(ports), 5_000, "the installation index to sync");
  const server = await startTestServer(ports, config);
  return {
    openfga,
    kube,
    config,
    ports,
    server,
    portLog: () => chunks.join(""),
    async stop() {
      await server.stop();
      await Promise.all([openfga.stop(), kube.stop()]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Whether the cluster's installation index answers right now. Readiness (`ports.ready()`) only
 * says it synced once; lookups are what refuse a view that may be stale.
 */
export function indexAnswers(ports: ConnectedPorts): boolean {
  try {
    ports.installations.byUid(ids.cluster, ids.installation);
    return true;
  } catch {
    return false;
  }
}

/** Polls `condition` every 10 ms; the elapsed milliseconds when it holds, or a failure naming what was awaited. */
export async function until(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<number> {
  const started = performance.now();
  while (!(await condition())) {
    if (performance.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now() - started;
}
