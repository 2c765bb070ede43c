/**
 * Per-cluster isolation (issue 16): a cluster whose API server hangs affects only its own checks.
 * portcullis runs as a real process with two clusters, each a wire-level fake API server; the
 * neighbour answers its PluginInstallation watch (so its index stays synced and every check of it
 * reaches the SubjectAccessReview) and then hangs every review: connections accepted, requests
 * read, never answered. Both clusters get a steady open-loop stream of PluginToken checks (one
 * every 20 ms each), in alternating phases of the same run — neighbour healthy, neighbour hung —
 * so the healthy cluster's latency is measured side by side with and without the hung neighbour.
 *
 * Asserted: the hung cluster's checks all answer 503 within their deadline; the healthy cluster's
 * checks are all allowed in every phase; /readyz stays 200. The latency figures are printed; only a
 * very generous sanity bound is asserted (performance is measured in bench/, not asserted here).
 *
 * The clusters are static `clusters:` entries: the fakes speak plain HTTP, which a kubeconfig
 * allows with insecure-skip-tls-verify; a cluster registered through the live registry (an https
 * URL) that never answers is in test/e2e/cluster-registry.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type AuthorizationClient, authorizationClient } from "../../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, spawnPortcullisFile } from "../support/portcullis-process.ts";
import { ids, PINNED_HASH, pluginToken } from "../support/tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "../support/wire-fakes/openfga.ts";
import { until } from "../support/wire-fakes/wired.ts";

const HEALTHY = ids.cluster;
const NEIGHBOUR = ids.otherCluster;
/**
 * Deadlines above the production defaults (300 ms reviews): the two cores are shared, and a stall
 * of the machine longer than a review's deadline would fail a healthy check closed, which is not
 * what this suite is about.
 */
const CHECK_TIMEOUT_MS = 2_000;
const SAR_TIMEOUT_MS = 1_000;
const EVERY_MS = 20;
const PHASE_MS = 3_000;
/**
 * Checks sent within this of a change of the neighbour's fault belong to neither phase: before it,
 * their reviews may reach the fake after it; after it, they may queue behind reviews sent before
 * it, still hanging until their deadline.
 */
const AROUND_CHANGE_MS = SAR_TIMEOUT_MS + 300;
const ROUNDS = 3;

let dir: string;
let openfga: FakeOpenFga;
let healthy: FakeKubeApi;
let neighbour: FakeKubeApi;
let portcullis: PortcullisProcess;
let client: AuthorizationClient;
const tokens = new Map<string, string>();

function fakeCluster(installation: string): Promise<FakeKubeApi> {
  return new FakeKubeApi().start().then((kube) => {
    kube.put({ uid: installation, name: "cert-manager", definitionHash: PINNED_HASH });
    kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
    return kube;
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-cluster-isolation-"));
  openfga = await new FakeOpenFga().start();
  healthy = await fakeCluster(ids.installation);
  neighbour = await fakeCluster(ids.otherInstallation);
  const addresses = await freeAddresses();
  const config = join(dir, "portcullis.yaml");
  // Caches of a millisecond: every check reaches its cluster's API server, as a cold check would.
  writeFileSync(
    config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
logLevel: warn
shutdown: { drainMs: 0 }
check: { timeoutMs: ${CHECK_TIMEOUT_MS} }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
openfga: { apiUrl: "${openfga.url}", storeId: "${openfga.storeId}", timeoutMs: 500, allowTtlMs: 1, denyTtlMs: 1 }
kube:
  sar: { timeoutMs: ${SAR_TIMEOUT_MS}, allowTtlMs: 1, denyTtlMs: 1 }
  tokenRequest: { timeoutMs: 300 }
clusters:
  - { id: "${HEALTHY}", kubeconfig: "${healthy.writeKubeconfig(dir)}" }
  - { id: "${NEIGHBOUR}", kubeconfig: "${neighbour.writeKubeconfig(dir)}" }
`,
  );
  portcullis = spawnPortcullisFile(config, addresses);
  client = authorizationClient(addresses.grpc);
  tokens.set(HEALTHY, await pluginToken({ cluster_id: HEALTHY, installation_id: ids.installation }));
  tokens.set(NEIGHBOUR, await pluginToken({ cluster_id: NEIGHBOUR, installation_id: ids.otherInstallation }));
  await until(async () => (await readyz().catch(() => 0)) === 200, 30_000, "portcullis to be ready");
  await until(async () => (await check(HEALTHY)) === "allowed" && (await check(NEIGHBOUR)) === "allowed", 10_000, "both clusters to be served");
}, 60_000);

afterAll(async () => {
  client?.close();
  if (portcullis !== undefined) {
    portcullis.child.kill("SIGTERM");
    await Promise.race([portcullis.exited, sleep(5_000)]);
    portcullis.kill();
  }
  await Promise.all([openfga?.stop(), healthy?.stop(), neighbour?.stop()]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

async function readyz(): Promise<number> {
  const res = await fetch(`http://${portcullis.addresses.admin}/readyz`);
  await res.body?.cancel();
  return res.status;
}

/**
 * "allowed", "<http status> <reason>" or "error <gRPC failure>" for one PluginToken check on
 * `cluster`. Each asks about a pod never asked before: its review is its own (none coalesced with
 * another's), so the hung neighbour holds as many reviews open as it is sent checks — more than
 * one API server's connection pool — as a busy cluster would.
 */
let sent = 0;
async function check(cluster: string): Promise<string> {
  try {
    const res = summarize(
      (await client.check(
        envoyCheckRequest({
          path: `/clusters/${cluster}/api/v1/namespaces/team-a/pods/pod-${++sent}`,
          headers: { authorization: `Bearer ${tokens.get(cluster)!}` },
          policy: "kube-api-proxy",
        }),
        { deadline: Date.now() + 10_000 },
      )) as CheckResponse,
    );
    return res.allowed ? "allowed" : `${res.http} ${res.reason}`;
  } catch (err) {
    return `error ${(err as Error).message}`;
  }
}

type Phase = "neighbour healthy" | "neighbour hung";

interface Answer {
  readonly cluster: string;
  /** The phase the check was sent in; undefined around a change. */
  readonly phase: Phase | undefined;
  readonly ms: number;
  readonly outcome: string;
}

/** Open loop: a check on each cluster every EVERY_MS whatever the previous ones are doing (no coordinated omission). */
function load(phaseNow: () => Phase | undefined): { stop(): Promise<Answer[]> } {
  const answers: Answer[] = [];
  const inFlight = new Set<Promise<void>>();
  const timer = setInterval(() => {
    for (const cluster of [HEALTHY, NEIGHBOUR]) {
      const phase = phaseNow();
      const at = performance.now();
      const sent = check(cluster).then((outcome) => {
        answers.push({ cluster, phase, ms: performance.now() - at, outcome });
      });
      inFlight.add(sent);
      void sent.finally(() => inFlight.delete(sent));
    }
  }, EVERY_MS);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all(inFlight);
      return answers;
    },
  };
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? Number.NaN;
}

function tally(answers: readonly Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) counts[a.outcome] = (counts[a.outcome] ?? 0) + 1;
  return counts;
}

function figures(answers: readonly Answer[]): string {
  const ms = answers.map((a) => a.ms);
  return `n=${ms.length} p50 ${percentile(ms, 0.5).toFixed(1)} ms, p99 ${percentile(ms, 0.99).toFixed(1)} ms, max ${Math.max(...ms).toFixed(1)} ms`;
}

it("a neighbour whose API server hangs its reviews: its checks 503 within their deadline, the healthy cluster's all allowed, readiness stays", async () => {
  let phase: Phase | undefined = "neighbour healthy";
  const readiness: number[] = [];
  let probe = true;
  const probing = (async () => {
    while (probe) {
      readiness.push(await readyz().catch(() => 0));
      await sleep(100);
    }
  })();
  let current: Phase = "neighbour healthy";
  const run = load(() => phase);
  const enter = async (next: Phase) => {
    phase = undefined;
    await sleep(AROUND_CHANGE_MS);
    const fault = next === "neighbour hung" ? "hang" : "healthy";
    neighbour.faults.sar = fault;
    neighbour.faults.tokenRequest = fault;
    current = next;
    await sleep(AROUND_CHANGE_MS);
    phase = current;
    await sleep(PHASE_MS);
  };
  for (let round = 0; round < ROUNDS; round++) {
    await enter("neighbour healthy");
    await enter("neighbour hung");
  }
  phase = undefined;
  await sleep(AROUND_CHANGE_MS);
  neighbour.faults.sar = "healthy";
  neighbour.faults.tokenRequest = "healthy";
  const answers = await run.stop();
  probe = false;
  await probing;
  const loadAverage = loadavg().map((l) => l.toFixed(2)).join(" ");

  const of = (cluster: string, p: Phase) => answers.filter((a) => a.cluster === cluster && a.phase === p);
  const rows = {
    "healthy cluster, neighbour healthy": of(HEALTHY, "neighbour healthy"),
    "healthy cluster, neighbour hung": of(HEALTHY, "neighbour hung"),
    "neighbour, healthy": of(NEIGHBOUR, "neighbour healthy"),
    "neighbour, hung": of(NEIGHBOUR, "neighbour hung"),
  };
  console.log(
    [
      `cluster isolation, ${ROUNDS} rounds of ${PHASE_MS} ms per phase, one check per cluster every ${EVERY_MS} ms (load average ${loadAverage}):`,
      ...Object.entries(rows).map(([name, a]) => `  ${name.padEnd(36)} ${figures(a)} ${JSON.stringify(tally(a))}`),
      `  /readyz ${JSON.stringify(readiness.reduce<Record<string, number>>((c, s) => ({ ...c, [s]: (c[s] ?? 0) + 1 }), {}))}`,
    ].join("\n"),
  );

  // The healthy cluster is served on every check, hung neighbour or not.
  for (const name of ["healthy cluster, neighbour healthy", "healthy cluster, neighbour hung"] as const) {
    expect(rows[name].length).toBeGreaterThan(100);
    expect(tally(rows[name])).toEqual({ allowed: rows[name].length });
  }
  // The neighbour is served again once its API server answers (the control phase is a real one).
  expect(tally(rows["neighbour, healthy"])).toEqual({ allowed: rows["neighbour, healthy"].length });
  // The hung neighbour: refused, fail-closed, within the check's deadline (plus a loaded machine's slack).
  expect(rows["neighbour, hung"].length).toBeGreaterThan(50);
  expect(tally(rows["neighbour, hung"])).toEqual({ "503 dependency-unavailable": rows["neighbour, hung"].length });
  expect(Math.max(...rows["neighbour, hung"].map((a) => a.ms))).toBeLessThan(CHECK_TIMEOUT_MS + 1_000);
  // Sanity only: a healthy check never waits out a deadline the neighbour's reviews run into.
  expect(percentile(rows["healthy cluster, neighbour hung"].map((a) => a.ms), 0.99)).toBeLessThan(CHECK_TIMEOUT_MS);
  expect(readiness.every((s) => s === 200)).toBe(true);
  expect(portcullis.child.exitCode).toBeNull();
}, 120_000);
