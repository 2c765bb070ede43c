/**
 * What freshness by events (issue 45) buys at equal load: a REAL portcullis process against the REAL
 * OpenFGA and kube-apiserver (test/harness), one PluginToken workload at one fixed offered rate, run
 * alternately "before" — TTL only: `openfga.safetyNetTtlMs` and `kube.sar.safetyNetTtlMs` at the deny
 * TTL (2 s), so every answer is kept for exactly its own short TTL (5 s allow, 2 s deny) as before
 * a549c7c (src/cache/cached-lookup.ts: kept = max(ttl, safety net) = ttl, held bare, served for
 * its TTL) — and "after" — the shipped defaults (60 s safety nets) with the change feeds synced.
 * Per run: each cache's hit rate, OpenFGA Check / SubjectAccessReview / ReadChanges calls per
 * second, portcullis's CPU per check, the invalidations seen. With `--churn`, a pair more in which
 * one RoleBinding of a namespace no request names changes every second.
 *
 *   npx node bench/freshness-load.ts [--rate 200] [--seconds 60] [--warmup 60] [--pairs 2]
 *                                    [--users 300] [--installations 30] [--churn | --only-churn] [--churn-namespace churn]
 *                                    [--out FILE.md]
 *
 * Not part of `npm run bench`; takes ~(warmup + seconds + ~15 s) per run. portcullis runs with the
 * shipped Node flags, pinned to core 1; this process (the load) to core 0.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { OpenFgaClient } from "@openfga/sdk";
import { NODE_ENV, NODE_FLAGS } from "../src/cli/node-flags.ts";
import { authorizationClient, type AuthorizationClient } from "../src/envoy/protos.ts";
import { CRD_FILES, MODEL_FILE } from "../test/e2e/fundament-world.ts";
import { makeTempDir } from "../test/harness/binaries.ts";
import { applyManifests, kubeConfig, type KubeApiserver, type OpenFGA, startKubeApiserver, startOpenFGA } from "../test/harness/index.ts";
import { type CheckResponse, summarize } from "../test/support/envoy.ts";
import { freeAddresses, MAIN, NODE, type PortcullisAddresses } from "../test/support/portcullis-process.ts";
import { pluginClaims, SECRET, sign } from "../test/support/tokens.ts";
import { BENCH_CLUSTER, BENCH_TOKEN_SECONDS, benchUuid, envoyCheck, PINNED, userId } from "./workload.ts";
// Seeded: both modes get the same requests in the same order.
import { prng } from "../test/support/prng.ts";

const { values: args } = parseArgs({
  options: {
    rate: { type: "string", default: "200" },
    seconds: { type: "string", default: "60" },
    warmup: { type: "string", default: "60" },
    pairs: { type: "string", default: "2" },
    users: { type: "string", default: "300" },
    installations: { type: "string", default: "30" },
    churn: { type: "boolean", default: false },
    "churn-namespace": { type: "string", default: "churn" },
    "only-churn": { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const RATE = Number(args.rate);
const MEASURE_S = Number(args.seconds);
const WARMUP_S = Number(args.warmup);
const PAIRS = Number(args.pairs);
const USERS = Number(args.users);
const INSTALLATIONS = Number(args.installations);
const CHURN_NAMESPACE = args["churn-namespace"];
const PROJECTS = 10;
const SERVER_CORE = "1";
const LOAD_CORE = "0";
/** Checks in flight past which the load skips a send (counted: the offered rate was not met); 20 s of sends, past every deadline. */
const MAX_IN_FLIGHT = 4_096;
/** The deny TTL: a safety net at it keeps every answer for exactly its own TTL (see the header). */
const TTL_ONLY_SAFETY_NET_MS = 2_000;

// ---------------------------------------------------------------------------------------------
// The workload: users in projects, installations they use, a handful of Kubernetes requests each.

const team = (i: number) => `team-${i % PROJECTS}`;
const installationName = (k: number) => `tool-${k}`;
/** Every 25th user is no member of the organization: OpenFGA denies can_view. */
const isMember = (u: number) => u % 25 !== 24;
/** Editors may read everything a project holds; every third user only views certificates. */
const isEditor = (u: number) => u % 3 !== 2;
/** The projects a user is bound in: one, every second user two. */
const projectsOf = (u: number) => (u % 2 === 0 ? [team(u), team(u * 7 + 3)] : [team(u)]);

/** What plugins ask on a user's behalf; `ns` is the project asked about. */
const REQUESTS: ReadonlyArray<(ns: string) => string> = [
  (ns) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificates/web`,
  (ns) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificates?limit=500`,
  (ns) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificaterequests?watch=true&resourceVersion=12345`,
  (ns) => `/api/v1/namespaces/${ns}/pods?labelSelector=app%3Dweb`,
  (ns) => `/api/v1/namespaces/${ns}/secrets/cert-manager-webhook-ca`,
  (ns) => `/api/v1/namespaces/${ns}/pods/web-0/log?container=app`,
  (ns) => `/apis/apps/v1/namespaces/${ns}/deployments/web`,
  () => `/version`,
];

interface Client {
  readonly user: number;
  readonly installation: number;
  readonly path: string;
  readonly weight: number;
}

/**
 * Each user uses one or two installations (popular ones more often) and asks 3–6 distinct requests,
 * mostly in its own projects, one of them often in a project it is not bound in (denied). Users are
 * Zipf-popular (s = 1), and so are a user's requests.
 */
function buildClients(): Client[] {
  const random = prng(45);
  const zipfPick = (n: number) => {
    const total = Array.from({ length: n }, (_, k) => 1 / (k + 1)).reduce((a, b) => a + b, 0);
    let r = random() * total;
    for (let k = 0; k < n; k += 1) {
      r -= 1 / (k + 1);
      if (r <= 0) return k;
    }
    return n - 1;
  };
  const clients: Client[] = [];
  for (let u = 0; u < USERS; u += 1) {
    const installations = [...new Set([zipfPick(INSTALLATIONS), ...(u % 3 === 0 ? [zipfPick(INSTALLATIONS)] : [])])];
    const candidates = projectsOf(u).flatMap((ns) => REQUESTS.map((r) => r(ns)));
    const chosen = new Set<string>();
    const count = 3 + (u % 4);
    while (chosen.size < count - 1) chosen.add(candidates[Math.floor(random() * candidates.length)]!);
    chosen.add(random() < 0.5 ? REQUESTS[0]!(team(u + 5)) : REQUESTS.at(-1)!(""));
    [...chosen].forEach((path, j) => {
      for (const installation of installations) {
        clients.push({ user: u, installation, path, weight: 1 / (u + 1) / (j + 1) / installations.length });
      }
    });
  }
  return clients;
}

/** The client of every send, in order: the same sequence for every run. */
function schedule(clients: readonly Client[], count: number): Uint32Array {
  const random = prng(4545);
  const cumulative = new Float64Array(clients.length);
  let sum = 0;
  clients.forEach((c, i) => (cumulative[i] = sum += c.weight));
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i += 1) {
    const r = random() * sum;
    let lo = 0;
    let hi = clients.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < r) lo = mid + 1;
      else hi = mid;
    }
    out[i] = lo;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The world: the cluster's projects, RBAC and installations; the organization in OpenFGA.

interface World {
  readonly api: KubeApiserver;
  readonly fga: OpenFGA;
  readonly dir: string;
  /** metadata.uid per installation index. */
  readonly installationUids: string[];
  stop(): Promise<void>;
}

async function inBatches<T>(items: readonly T[], size: number, each: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each));
}

async function startWorld(): Promise<World> {
  const [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE })]);
  const admin = kubeConfig(api);
  const core = admin.makeApiClient(CoreV1Api);
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  const custom = admin.makeApiClient(CustomObjectsApi);
  await applyManifests(api, CRD_FILES);

  const namespaces = [...Array.from({ length: PROJECTS }, (_, i) => team(i)), CHURN_NAMESPACE, ...Array.from({ length: INSTALLATIONS }, (_, k) => `plugin-${installationName(k)}`)];
  await inBatches([...new Set(namespaces)], 10, (name) => core.createNamespace({ body: { metadata: { name } } }));
  const rule = (apiGroups: string[], resources: string[]) => ({ apiGroups, resources, verbs: ["get", "list", "watch"] });
  await rbac.createClusterRole({
    body: {
      metadata: { name: "project-editor" },
      rules: [
        rule(["cert-manager.io"], ["certificates", "certificaterequests"]),
        rule([""], ["pods", "pods/log", "secrets", "configmaps"]),
        rule(["apps"], ["deployments"]),
      ],
    },
  });
  await rbac.createClusterRole({ body: { metadata: { name: "project-viewer" }, rules: [rule(["cert-manager.io"], ["certificates"])] } });
  const bindings = Array.from({ length: USERS }, (_, u) => projectsOf(u).map((ns) => ({ u, ns }))).flat();
  await inBatches(bindings, 20, ({ u, ns }) =>
    rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: `member-${userId(u)}` },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: isEditor(u) ? "project-editor" : "project-viewer" },
        subjects: [{ kind: "ServiceAccount", name: `fundament-${userId(u)}`, namespace: "fundament-system" }],
      },
    }),
  );
  await rbac.createNamespacedRoleBinding({ namespace: CHURN_NAMESPACE, body: churnBinding(0) });

  const installationUids: string[] = [];
  await inBatches(
    Array.from({ length: INSTALLATIONS }, (_, k) => k),
    10,
    async (k) => {
      const name = installationName(k);
      await core.createNamespacedServiceAccount({ namespace: `plugin-${name}`, body: { metadata: { name: `plugin-${name}` } } });
      const created = (await custom.createClusterCustomObject({
        group: "plugins.fundament.io",
        version: "v1",
        plural: "plugininstallations",
        body: {
          apiVersion: "plugins.fundament.io/v1",
          kind: "PluginInstallation",
          metadata: { name },
          spec: { organizationId: "org-acme", definitionRef: { pluginName: name, pluginVersion: "1.4.0", definitionHash: PINNED } },
        },
      })) as { metadata: { uid: string } };
      installationUids[k] = created.metadata.uid;
    },
  );

  const fgaClient = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.modelId });
  const tuples = [
    { user: "organization:acme", relation: "owner", object: `cluster:${BENCH_CLUSTER}` },
    ...Array.from({ length: USERS }, (_, u) => u)
      .filter(isMember)
      .map((u) => ({ user: `user:${userId(u)}`, relation: "viewer", object: "organization:acme" })),
  ];
  for (let i = 0; i < tuples.length; i += 50) await fgaClient.write({ writes: tuples.slice(i, i + 50) });

  return {
    api,
    fga,
    dir: makeTempDir("portcullis-freshness-load"),
    installationUids,
    async stop() {
      await Promise.all([api.stop(), fga.stop()]);
    },
  };
}

/** The churned RoleBinding: its subject changes with every step (a real RBAC change, in a namespace no request names). */
function churnBinding(step: number) {
  return {
    metadata: { name: "churn" },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "project-viewer" },
    subjects: [{ kind: "ServiceAccount", name: `churner-${step % 2}`, namespace: "fundament-system" }],
  };
}

// ---------------------------------------------------------------------------------------------
// portcullis, one process per run (fresh caches).

type Mode = "before" | "after";

function portcullisConfig(world: World, mode: Mode, listen: PortcullisAddresses): object {
  const net = mode === "before" ? { safetyNetTtlMs: TTL_ONLY_SAFETY_NET_MS } : {};
  return {
    listen,
    logLevel: "warn",
    check: { timeoutMs: 5_000 },
    tokens: { secrets: [{ env: "PORTCULLIS_SECRET" }], maxLifetimeSeconds: { plugin: BENCH_TOKEN_SECONDS } },
    // Deadlines above a shared, noisy machine's worst call; the TTLs are the shipped ones.
    openfga: { apiUrl: world.fga.apiUrl, storeId: world.fga.storeId, authorizationModelId: world.fga.modelId, timeoutMs: 2_000, ...net },
    clusters: [{ id: BENCH_CLUSTER, kubeconfig: world.api.kubeconfigPath }],
    kube: { sar: { timeoutMs: 2_000, ...net }, tokenRequest: { timeoutMs: 2_000 } },
  };
}

interface Portcullis {
  readonly child: ChildProcess;
  readonly addresses: PortcullisAddresses;
  readonly logFile: string;
  metrics(): Promise<Metrics>;
  stop(): Promise<void>;
}

async function startPortcullis(world: World, mode: Mode, name: string): Promise<Portcullis> {
  const addresses = await freeAddresses();
  const configFile = join(world.dir, `${name}.json`);
  writeFileSync(configFile, JSON.stringify(portcullisConfig(world, mode, addresses), null, 2));
  const logFile = join(world.dir, `${name}.log`);
  // The audit line of every check goes where the benchmark's goes: /dev/null.
  const out = openSync("/dev/null", "w");
  const err = openSync(logFile, "w");
  const child = spawn("taskset", ["-c", SERVER_CORE, NODE, ...NODE_FLAGS, MAIN, "--config", configFile], {
    env: { PATH: process.env["PATH"] ?? "", ...NODE_ENV, PORTCULLIS_SECRET: SECRET },
    stdio: ["ignore", out, err],
  });
  closeSync(out);
  closeSync(err);
  const exited = new Promise<void>((resolveExit) => child.once("exit", () => resolveExit()));
  const self: Portcullis = {
    child,
    addresses,
    logFile,
    async metrics() {
      const res = await fetch(`http://${addresses.admin}/metrics`, { signal: AbortSignal.timeout(10_000) });
      return parseMetrics(await res.text());
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      if (!(await Promise.race([exited.then(() => true), sleep(15_000).then(() => false)]))) {
        child.kill("SIGKILL");
        await exited;
      }
    },
  };
  const deadline = performance.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`portcullis exited ${child.exitCode}: ${readFileSync(logFile, "utf8").slice(-4_000)}`);
    const ready = await fetch(`http://${addresses.admin}/readyz`, { signal: AbortSignal.timeout(1_000) })
      .then(async (res) => (await res.body?.cancel(), res.status === 200))
      .catch(() => false);
    if (ready) return self;
    if (performance.now() > deadline) {
      await self.stop();
      throw new Error(`portcullis not ready after 60 s: ${readFileSync(logFile, "utf8").slice(-4_000)}`);
    }
    await sleep(100);
  }
}

/** The sources whose proof lets the two caches measured keep answers past their short TTLs. */
const FEEDS = ["openfga-changes", "kube-rbac"] as const;

/**
 * Waits until both FEEDS are reported and every source reported is synced (at most `ms`); the
 * sources and their state. A tree whose feeds are not wired reports none: nothing to wait for.
 */
async function untilSourcesSynced(p: Portcullis, ms: number): Promise<{ text: string; names: string[] }> {
  const started = performance.now();
  for (;;) {
    const synced = series(await p.metrics(), "portcullis_event_source_synced");
    const all = FEEDS.every((f) => synced.some((s) => s.labels["source"] === f)) && synced.every((s) => s.value === 1);
    const noneWired = synced.length === 0 && performance.now() > started + 5_000;
    if (all || noneWired || performance.now() > started + ms) {
      const names = [...new Set(synced.map((s) => s.labels["source"] ?? ""))].sort();
      const unsynced = synced.filter((s) => s.value !== 1).map((s) => s.labels["source"]);
      const text = synced.length === 0 ? "none reported" : unsynced.length === 0 ? `all ${synced.length} synced` : `NOT synced: ${unsynced.join(", ")}`;
      return { text, names };
    }
    await sleep(250);
  }
}

// ---------------------------------------------------------------------------------------------
// /metrics, read as flat series.

interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}
type Metrics = readonly Sample[];

function parseMetrics(text: string): Metrics {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

const series = (metrics: Metrics, name: string) => metrics.filter((s) => s.name === name);
const sum = (metrics: Metrics, name: string, match: Record<string, string> = {}) =>
  series(metrics, name)
    .filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);

/** The counter's increase between two scrapes, per distinct value of `by`'s labels. */
function deltaBy(before: Metrics, after: Metrics, name: string, by: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  const add = (metrics: Metrics, sign: number) => {
    for (const s of series(metrics, name)) {
      const key = by.map((b) => s.labels[b] ?? "").join(" ");
      out.set(key, (out.get(key) ?? 0) + sign * s.value);
    }
  };
  add(after, 1);
  add(before, -1);
  return out;
}

/** utime + stime of a process (all its threads), in seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 14 and 15 of stat(5); the slice starts at field 3.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

// ---------------------------------------------------------------------------------------------
// The load: a fixed offered rate, open loop (sends are due by the clock, not by answers).

interface LoadCounts {
  sent: number;
  skipped: number;
  allowed: number;
  denied: number;
  errors: number;
  latenciesMs: number[];
  reasons: Map<string, number>;
}

async function offer(
  client: AuthorizationClient,
  requests: readonly Record<string, unknown>[],
  order: Uint32Array,
  from: number,
  to: number,
  counts: LoadCounts,
): Promise<void> {
  const started = performance.now();
  let next = from;
  let inFlight = 0;
  const pending = new Set<Promise<void>>();
  while (next < to) {
    const due = Math.min(to, from + Math.floor(((performance.now() - started) / 1000) * RATE));
    while (next < due) {
      const index = order[next]!;
      next += 1;
      if (inFlight >= MAX_IN_FLIGHT) {
        counts.skipped += 1;
        continue;
      }
      inFlight += 1;
      counts.sent += 1;
      const t0 = performance.now();
      const p: Promise<void> = client
        .check(requests[index]!, { deadline: Date.now() + 10_000 })
        .then(
          (res) => {
            const verdict = summarize(res as CheckResponse);
            counts.latenciesMs.push(performance.now() - t0);
            if (verdict.allowed) counts.allowed += 1;
            else {
              counts.denied += 1;
              const reason = verdict.reason ?? `http ${verdict.http}`;
              counts.reasons.set(reason, (counts.reasons.get(reason) ?? 0) + 1);
            }
          },
          (err: unknown) => {
            counts.errors += 1;
            if (counts.errors === 1) process.stderr.write(`first error: ${(err as Error).message}\n`);
          },
        )
        .finally(() => {
          inFlight -= 1;
          pending.delete(p);
        });
      pending.add(p);
    }
    await sleep(2);
  }
  await Promise.all(pending);
}

const newCounts = (): LoadCounts => ({ sent: 0, skipped: 0, allowed: 0, denied: 0, errors: 0, latenciesMs: [], reasons: new Map() });

// ---------------------------------------------------------------------------------------------
// One run.

interface RunResult {
  readonly label: string;
  readonly mode: Mode;
  readonly churn: boolean;
  readonly sources: string;
  readonly sourceNames: readonly string[];
  readonly counts: LoadCounts;
  readonly seconds: number;
  readonly cpuSeconds: number;
  readonly lookups: Map<string, number>;
  readonly calls: Map<string, number>;
  readonly invalidations: Map<string, number>;
  readonly invalidatedEntries: Map<string, number>;
  readonly loadAverage: string;
}

const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");

async function run(world: World, requests: readonly Record<string, unknown>[], order: Uint32Array, mode: Mode, churn: boolean, index: number): Promise<RunResult> {
  const label = `${mode}${churn ? " + churn" : ""}`;
  const loadAtStart = load();
  const p = await startPortcullis(world, mode, `run-${index}-${mode}${churn ? "-churn" : ""}`);
  const client = authorizationClient(p.addresses.grpc);
  let churning = churn;
  const churner = (async () => {
    const rbac = kubeConfig(world.api).makeApiClient(RbacAuthorizationV1Api);
    for (let step = 1; churning; step += 1) {
      const t0 = performance.now();
      await rbac.replaceNamespacedRoleBinding({ name: "churn", namespace: CHURN_NAMESPACE, body: churnBinding(step) });
      await sleep(Math.max(0, 1_000 - (performance.now() - t0)));
    }
  })();
  try {
    // Feeds synced before the load starts, so "after" measures the shipped steady state.
    const { text: sources, names: sourceNames } = await untilSourcesSynced(p, 30_000);
    const warm = WARMUP_S * RATE;
    process.stderr.write(`${label}: warm-up ${WARMUP_S} s (sources: ${sources}; load average ${loadAtStart})\n`);
    await offer(client, requests, order, 0, warm, newCounts());
    const m0 = await p.metrics();
    const cpu0 = cpuSeconds(p.child.pid!);
    const t0 = performance.now();
    const counts = newCounts();
    await offer(client, requests, order, warm, warm + MEASURE_S * RATE, counts);
    const seconds = (performance.now() - t0) / 1000;
    const cpu1 = cpuSeconds(p.child.pid!);
    const m1 = await p.metrics();
    const result: RunResult = {
      label,
      mode,
      churn,
      sources,
      sourceNames,
      counts,
      seconds,
      cpuSeconds: cpu1 - cpu0,
      lookups: deltaBy(m0, m1, "portcullis_cache_lookups_total", ["cache", "outcome"]),
      calls: deltaBy(m0, m1, "portcullis_dependency_duration_seconds_count", ["dependency"]),
      invalidations: deltaBy(m0, m1, "portcullis_cache_invalidations_total", ["cache", "source", "cause"]),
      invalidatedEntries: deltaBy(m0, m1, "portcullis_cache_invalidated_entries_total", ["cache", "source"]),
      loadAverage: `${loadAtStart} → ${load()}`,
    };
    process.stderr.write(`${label}: ${summaryLine(result)}\n`);
    return result;
  } finally {
    churning = false;
    await churner;
    client.close();
    await p.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// Reporting.

const CACHES = ["openfga_can_view", "subject_access_review", "service_account_token"] as const;
const DEPENDENCIES = ["openfga", "kube-subjectaccessreview", "kube-tokenrequest", "openfga-changes", "kube-readyz"] as const;

function hitRate(r: RunResult, cache: string): string {
  let hits = 0;
  let total = 0;
  for (const [key, n] of r.lookups) {
    const [c, outcome] = key.split(" ");
    if (c !== cache) continue;
    total += n;
    if (outcome === "hit") hits += n;
  }
  return total === 0 ? "–" : `${((100 * hits) / total).toFixed(1)} %`;
}

const perSecond = (r: RunResult, dependency: string) => ((r.calls.get(dependency) ?? 0) / r.seconds).toFixed(1);
const answered = (r: RunResult) => r.counts.allowed + r.counts.denied;
const cpuPerCheckUs = (r: RunResult) => ((r.cpuSeconds * 1e6) / Math.max(1, answered(r))).toFixed(0);

function percentile(values: number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function invalidationsText(r: RunResult): string {
  const parts = [...r.invalidations].filter(([, n]) => n > 0).map(([key, n]) => `${key.replaceAll(" ", "/")} ×${n}`);
  const dropped = [...r.invalidatedEntries].reduce((a, [, n]) => a + n, 0);
  return parts.length === 0 ? "none" : `${parts.join(", ")}; ${dropped} entries dropped`;
}

function summaryLine(r: RunResult): string {
  return [
    `${(answered(r) / r.seconds).toFixed(0)} checks/s answered (${r.counts.skipped} skipped, ${r.counts.errors} errors)`,
    ...CACHES.map((c) => `${c} ${hitRate(r, c)}`),
    ...DEPENDENCIES.map((d) => `${d} ${perSecond(r, d)}/s`),
    `CPU ${cpuPerCheckUs(r)} µs/check`,
    `invalidations: ${invalidationsText(r)}`,
  ].join("; ");
}

function markdown(results: readonly RunResult[]): string {
  const lines = [
    "| run | sources | checks/s answered | allowed | can_view hit | SAR hit | SA token hit | OpenFGA Check/s | SAR/s | TokenRequest/s | ReadChanges/s | CPU µs/check | p50 / p99 ms | invalidations (measured window) | load avg (1, 5, 15) |",
    "| --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- | --- |",
  ];
  for (const r of results) {
    lines.push(
      `| ${r.label} | ${r.sources} | ${(answered(r) / r.seconds).toFixed(0)}${r.counts.skipped + r.counts.errors > 0 ? ` (${r.counts.skipped} skipped, ${r.counts.errors} errors)` : ""} | ${((100 * r.counts.allowed) / Math.max(1, answered(r))).toFixed(0)} % | ${hitRate(r, "openfga_can_view")} | ${hitRate(r, "subject_access_review")} | ${hitRate(r, "service_account_token")} | ${perSecond(r, "openfga")} | ${perSecond(r, "kube-subjectaccessreview")} | ${perSecond(r, "kube-tokenrequest")} | ${perSecond(r, "openfga-changes")} | ${cpuPerCheckUs(r)} | ${percentile(r.counts.latenciesMs, 0.5).toFixed(1)} / ${percentile(r.counts.latenciesMs, 0.99).toFixed(1)} | ${invalidationsText(r)} | ${r.loadAverage} |`,
    );
  }
  return lines.join("\n");
}

// ---------------------------------------------------------------------------------------------

const started = new Date();
const loadBefore = load();
const clients = buildClients();
const world = await startWorld();
// The load on its own core, apart from portcullis's (kube-apiserver, etcd and OpenFGA, started before, keep theirs).
spawnSync("taskset", ["-pc", LOAD_CORE, String(process.pid)], { stdio: "ignore" });
const results: RunResult[] = [];
try {
  const tokens = new Map<string, string>();
  for (const c of clients) {
    const key = `${c.user}/${c.installation}`;
    if (tokens.has(key)) continue;
    const name = installationName(c.installation);
    tokens.set(
      key,
      await sign(
        pluginClaims({
          sub: userId(c.user),
          cluster_id: BENCH_CLUSTER,
          installation_id: world.installationUids[c.installation],
          installation_name: name,
          plugin_name: name,
          plugin_version: "1.4.0",
          definition_hash: PINNED,
        }),
        { exp: Math.floor(Date.now() / 1000) + BENCH_TOKEN_SECONDS },
      ),
    );
  }
  const now = { seconds: Math.floor(Date.now() / 1000), nanos: 0 };
  const requests = clients.map((c) => {
    const check = envoyCheck("GET", `/clusters/${BENCH_CLUSTER}${c.path}`, { authorization: `Bearer ${tokens.get(`${c.user}/${c.installation}`)}` }, "kube-api-proxy");
    // envoyCheck writes the time as ghz's JSON form; the gRPC client takes a Timestamp message.
    (check as { attributes: { request: { time: unknown } } }).attributes.request.time = now;
    return check;
  });
  const order = schedule(clients, (WARMUP_S + MEASURE_S) * RATE);
  process.stderr.write(
    `${USERS} users, ${INSTALLATIONS} installations, ${clients.length} distinct (user, installation, request), ${new Set(clients.map((c) => `${c.user} ${c.path}`)).size} distinct reviews; ${RATE}/s offered\n`,
  );
  let index = 0;
  if (!args["only-churn"]) {
    for (let pair = 0; pair < PAIRS; pair += 1) {
      // Alternated, and the order swapped every pair, so a slow spell of the machine touches both.
      for (const mode of (pair % 2 === 0 ? ["before", "after"] : ["after", "before"]) as Mode[]) {
        results.push(await run(world, requests, order, mode, false, index++));
      }
    }
  }
  if (args.churn || args["only-churn"]) {
    for (const mode of ["before", "after"] as Mode[]) results.push(await run(world, requests, order, mode, true, index++));
  }
} finally {
  await world.stop();
}

const churnNamed = clients.some((c) => c.path.includes(`/namespaces/${CHURN_NAMESPACE}/`));
const report = [
  `Measured ${started.toISOString()} by \`npx node bench/freshness-load.ts ${process.argv.slice(2).join(" ")}\`: ${USERS} users (every 25th no member: can_view denied), ${INSTALLATIONS} installations, ${clients.length} (user, installation, request) clients, users and each user's requests Zipf-popular (s = 1); ${RATE} checks/s offered for ${MEASURE_S} s after a ${WARMUP_S} s warm-up, one fresh portcullis process per run (shipped Node flags, core ${SERVER_CORE}); before = both safety nets at ${TTL_ONLY_SAFETY_NET_MS} ms (TTL only), after = shipped defaults.${args.churn || args["only-churn"] ? ` Churn: RoleBinding ${CHURN_NAMESPACE}/churn replaced every second (${churnNamed ? "a namespace the requests name" : "a namespace no request names"}).` : ""} Event sources reported: ${[...new Set(results.flatMap((r) => r.sourceNames))].join(", ") || "none"}. ${cpus().length} cores, shared; load average ${loadBefore} at the start, ${load()} at the end.`,
  "",
  markdown(results),
].join("\n");
console.log(report);
if (args.out !== undefined) writeFileSync(args.out, `${report}\n`);
process.exit(0);
