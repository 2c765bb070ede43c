/**
 * Soak: portcullis as a real process (`node src/cli/main.ts --config …`) against the wire fakes,
 * first driven to saturation to find its ceiling, then held at 70% of it for --minutes (default
 * 10). Passes when no request errs (every answer is the one its kind expects) and the process's
 * RSS and open file descriptors (/proc/<pid>/fd) stay flat. Loopback only; bounded (at most 60
 * minutes); stops by itself and takes its child down with it. Not part of CI:
 *
 *   npx node bench/soak.ts [--minutes 10] [--probe-seconds 15]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { authorizationClient, type AuthorizationClient } from "../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../test/support/envoy.ts";
import { ids, OLD_SECRET, PINNED_HASH, pluginToken, SECRET, userToken } from "../test/support/tokens.ts";
import { FakeKubeApi } from "../test/support/wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "../test/support/wire-fakes/openfga.ts";
import { freePort } from "../test/harness/ports.ts";

const { values: args } = parseArgs({
  options: { minutes: { type: "string", default: "10" }, "probe-seconds": { type: "string", default: "15" } },
});
const MINUTES = Math.min(Number(args.minutes), 60);
const PROBE_SECONDS = Math.min(Number(args["probe-seconds"]), 120);
const LOAD_SHARE = 0.7;
const USERS = 200;
const SAMPLE_EVERY_MS = 10_000;
/** Above this many unanswered checks the generator counts an error rather than queue without bound. */
const MAX_IN_FLIGHT = 5_000;
const COOL_DOWN_MS = 10_000;

const ROOT = resolve(import.meta.dirname, "..");
const now = () => Math.floor(Date.now() / 1000);
/** Every token the soak mints lives this long: past the soak's longest run and its saturation probe. */
const TOKEN_SECONDS = 7200;

// ---------------------------------------------------------------- the world: fakes and a child process
const dir = mkdtempSync(join(tmpdir(), "portcullis-soak-"));
const openfga = await new FakeOpenFga().start();
const kube = await new FakeKubeApi().start();
kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
kube.serviceAccounts.add("plugin-cert-manager/plugin-cert-manager");
// Short-lived ServiceAccount tokens so the TokenRequest cache refreshes during the soak.
kube.tokenLifetimeSeconds = 600;

const users = Array.from({ length: USERS }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`);
for (const u of users) kube.serviceAccounts.add(`fundament-system/fundament-${u}`);
const deniedUsers = new Set(users.slice(0, USERS / 10));
openfga.allowed = (t) => !deniedUsers.has(t.user.slice("user:".length));

const [grpcPort, adminPort, internalPort] = [await freePort(), await freePort(), await freePort()];
const configPath = join(dir, "portcullis.yaml");
writeFileSync(
  configPath,
  `listen: { grpc: "127.0.0.1:${grpcPort}", admin: "127.0.0.1:${adminPort}", internal: "127.0.0.1:${internalPort}" }
logLevel: warn
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
  # The soak's tokens outlive it (up to 60 minutes), FUN-17's 15-minute PluginToken would not.
  maxLifetimeSeconds: { plugin: ${TOKEN_SECONDS} }
openfga: { apiUrl: "${openfga.url}", storeId: "${openfga.storeId}" }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${kube.writeKubeconfig(dir)}" }]
`,
);
const child: ChildProcess = spawn(join(ROOT, "node_modules/.bin/node"), [join(ROOT, "src/cli/main.ts"), "--config", configPath], {
  env: { PATH: process.env["PATH"] ?? "", PORTCULLIS_SECRET: SECRET, PORTCULLIS_OLD_SECRET: OLD_SECRET },
  stdio: ["ignore", "pipe", "inherit"],
});
const pid = child.pid!;
/** What portcullis itself logged at warn or above (logLevel: warn), by message and error: the why of any 503. */
const warnings = new Map<string, number>();
createInterface({ input: child.stdout! }).on("line", (line) => {
  try {
    const entry = JSON.parse(line) as { level?: number; msg?: string; error?: string; err?: string };
    if ((entry.level ?? 0) < 40) return;
    const key = `${entry.msg ?? ""}: ${entry.error ?? entry.err ?? ""}`;
    warnings.set(key, (warnings.get(key) ?? 0) + 1);
  } catch {
    // Not a log line.
  }
});
let stopping = false;
const cleanup = async () => {
  stopping = true;
  if (child.exitCode === null) child.kill("SIGTERM");
  await Promise.all([openfga.stop(), kube.stop()]);
  rmSync(dir, { recursive: true, force: true });
};
process.on("SIGINT", () => void cleanup().then(() => process.exit(130)));

// ---------------------------------------------------------------- the mix of requests, each with its expected answer
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;
const tokens = await Promise.all(
  users.map(async (u) => ({
    user: u,
    plugin: await pluginToken({ sub: u }, { exp: now() + TOKEN_SECONDS }),
    session: await userToken({ sub: u }, { exp: now() + TOKEN_SECONDS }),
  })),
);
const badToken = await pluginToken({}, { secret: "not-the-secret-0123456789abcdef0123456789ab", exp: now() + TOKEN_SECONDS });

interface Kind {
  readonly name: string;
  readonly weight: number;
  build(i: number): { request: object; expect: string };
}
const viewOutcome = (user: string) => (deniedUsers.has(user) ? "can-view-denied" : "allowed");
const KINDS: Kind[] = [
  {
    name: "plugin kube-api-proxy",
    weight: 40,
    build: (i) => {
      const t = tokens[i % USERS]!;
      return { request: envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${t.plugin}` }, policy: "kube-api-proxy" }), expect: viewOutcome(t.user) };
    },
  },
  {
    name: "user kube-api-proxy",
    weight: 25,
    build: (i) => {
      const t = tokens[i % USERS]!;
      return { request: envoyCheckRequest({ path: PODS, headers: { cookie: `fundament_auth=${t.session}`, "sec-fetch-site": "same-origin" }, policy: "kube-api-proxy" }), expect: viewOutcome(t.user) };
    },
  },
  {
    name: "plugin-proxy",
    weight: 15,
    build: (i) => {
      const t = tokens[i % USERS]!;
      return {
        request: envoyCheckRequest({ path: `/installations/${ids.installation}/runtime/app.js`, headers: { authorization: `Bearer ${t.plugin}` }, policy: "plugin-proxy" }),
        expect: viewOutcome(t.user),
      };
    },
  },
  { name: "plugin-assets", weight: 10, build: () => ({ request: envoyCheckRequest({ path: "/plugins/cert-manager/1.4.0/console/index.html", policy: "plugin-assets" }), expect: "allowed" }) },
  { name: "invalid token", weight: 5, build: () => ({ request: envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${badToken}` }, policy: "kube-api-proxy" }), expect: "invalid-token" }) },
  { name: "no token", weight: 5, build: () => ({ request: envoyCheckRequest({ path: PODS, policy: "kube-api-proxy" }), expect: "missing-token" }) },
];
const schedule = KINDS.flatMap((k) => Array.from({ length: k.weight }, () => k));

// ---------------------------------------------------------------- load
interface Window {
  sent: number;
  ok: number;
  errors: number;
  latencies: number[];
}
const errorsByCause = new Map<string, number>();
let inFlight = 0;
let counter = 0;
let window: Window = { sent: 0, ok: 0, errors: 0, latencies: [] };

function fire(client: AuthorizationClient): Promise<void> {
  const i = counter++;
  const kind = schedule[i % schedule.length]!;
  const { request, expect } = kind.build(Math.floor(i / schedule.length));
  const started = performance.now();
  const w = window;
  w.sent++;
  inFlight++;
  return client.check(request, { deadline: Date.now() + 5_000 }).then(
    (res) => {
      const s = summarize(res as CheckResponse);
      const got = s.allowed ? "allowed" : (s.reason ?? "none");
      if (got === expect) w.ok++;
      else countError(`${kind.name}: expected ${expect}, got ${got}`, w);
      w.latencies.push(performance.now() - started);
    },
    (err: unknown) => countError(`${kind.name}: gRPC ${(err as { code?: number }).code ?? "?"}`, w),
  ).finally(() => inFlight--);
}

function countError(cause: string, w: Window): void {
  w.errors++;
  errorsByCause.set(cause, (errorsByCause.get(cause) ?? 0) + 1);
}

/** Closed loop, `concurrency` checks always outstanding, for `seconds`: the throughput ceiling. */
async function saturate(client: AuthorizationClient, concurrency: number, seconds: number): Promise<number> {
  const until = performance.now() + seconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        await fire(client);
        done++;
      }
    }),
  );
  return done / seconds;
}

/** Open loop at `rate` checks per second until `until` (ms, performance clock), with samples. */
async function hold(client: AuthorizationClient, rate: number, until: number, onSample: () => void): Promise<void> {
  const tickMs = 10;
  let owed = 0;
  let nextSample = performance.now() + SAMPLE_EVERY_MS;
  let nextEvent = performance.now() + 5_000;
  while (performance.now() < until && !stopping) {
    owed += (rate * tickMs) / 1000;
    for (; owed >= 1; owed--) {
      if (inFlight >= MAX_IN_FLIGHT) countError("shed: too many unanswered checks", window);
      else void fire(client);
    }
    if (performance.now() >= nextEvent) {
      // Keep the watch busy: the installation is re-put (same pin) every few seconds.
      kube.put({ uid: ids.installation, name: "cert-manager", definitionHash: PINNED_HASH });
      nextEvent += 5_000;
    }
    if (performance.now() >= nextSample) {
      // The fakes keep every request for tests to inspect; a soak must not grow its own memory.
      for (const list of [openfga.requests, openfga.checks, kube.requests, kube.sarSpecs, kube.issuedTokens]) list.length = 0;
      onSample();
      nextSample += SAMPLE_EVERY_MS;
    }
    await new Promise((r) => setTimeout(r, tickMs));
  }
}

// ---------------------------------------------------------------- measurement
interface Sample {
  readonly t: number;
  readonly rssMb: number;
  readonly heapMb: number;
  readonly heapTotalMb: number;
  readonly externalMb: number;
  readonly fds: number;
  readonly rate: number;
  readonly errors: number;
  readonly p50: number;
  readonly p99: number;
}

function rssMb(): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:")) ?? "VmRSS: 0 kB";
  return Number(/(\d+)/.exec(line)?.[1] ?? 0) / 1024;
}
const fds = () => readdirSync(`/proc/${pid}/fd`).length;
/** From portcullis's own /metrics: V8 heap in use and reserved, and memory outside it (buffers). */
async function memoryMb(): Promise<{ used: number; total: number; external: number }> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  const metric = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? 0) / 2 ** 20;
  return { used: metric("nodejs_heap_size_used_bytes"), total: metric("nodejs_heap_size_total_bytes"), external: metric("nodejs_external_memory_bytes") };
}
const percentile = (xs: number[], p: number) => (xs.length === 0 ? 0 : [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!);

// ---------------------------------------------------------------- run
const client = authorizationClient(`127.0.0.1:${grpcPort}`);
const startedAt = performance.now();
try {
  // Ready when the first check is allowed (listening, index synced).
  for (;;) {
    if (performance.now() - startedAt > 30_000) throw new Error("portcullis did not become ready within 30 s");
    const probe = await client.check(KINDS[0]!.build(USERS - 1).request).then((r) => summarize(r as CheckResponse), () => undefined);
    if (probe?.allowed) break;
    await new Promise((r) => setTimeout(r, 200));
  }

  const ceiling = await saturate(client, 256, PROBE_SECONDS);
  const probeErrors = window.errors;
  const rate = Math.round(ceiling * LOAD_SHARE);
  console.log(`saturation: ${ceiling.toFixed(0)} checks/s with 256 outstanding (${probeErrors} errors); holding ${rate}/s (70%) for ${MINUTES} min`);
  // The fakes share this process with the generator: let the probe's backlog and garbage clear
  // first, or a stalled fake OpenFGA shows up as portcullis 503s in the first window.
  await new Promise((r) => setTimeout(r, COOL_DOWN_MS));
  console.log("  t(s)   rss(MB)  heap used/total(MB)  external(MB)  fds  checks/s  errors  p50(ms)  p99(ms)");

  const samples: Sample[] = [];
  const holdStarted = performance.now();
  window = { sent: 0, ok: 0, errors: 0, latencies: [] };
  let windowStarted = performance.now();
  let memory = { used: 0, total: 0, external: 0 };
  await hold(client, rate, holdStarted + MINUTES * 60_000, () => {
    void memoryMb().then((m) => (memory = m), () => undefined);
    const seconds = (performance.now() - windowStarted) / 1000;
    const s: Sample = {
      t: (performance.now() - holdStarted) / 1000,
      rssMb: rssMb(),
      heapMb: memory.used,
      heapTotalMb: memory.total,
      externalMb: memory.external,
      fds: fds(),
      rate: window.sent / seconds,
      errors: window.errors,
      p50: percentile(window.latencies, 0.5),
      p99: percentile(window.latencies, 0.99),
    };
    samples.push(s);
    console.log(
      `  ${s.t.toFixed(0).padStart(4)}  ${s.rssMb.toFixed(1).padStart(7)}  ${s.heapMb.toFixed(1).padStart(9)} / ${s.heapTotalMb.toFixed(1).padStart(6)}  ${s.externalMb.toFixed(1).padStart(12)}  ${String(s.fds).padStart(3)}  ${s.rate.toFixed(0).padStart(8)}  ${String(s.errors).padStart(6)}  ${s.p50.toFixed(2).padStart(7)}  ${s.p99.toFixed(2).padStart(7)}`,
    );
    window = { sent: 0, ok: 0, errors: 0, latencies: [] };
    windowStarted = performance.now();
  });
  while (inFlight > 0) await new Promise((r) => setTimeout(r, 10));

  // Flat: the last quarter of the samples against the second quarter (the first is warm-up).
  const quarter = Math.max(1, Math.floor(samples.length / 4));
  const median = (xs: number[]) => percentile(xs, 0.5);
  const early = samples.slice(quarter, 2 * quarter);
  const late = samples.slice(-quarter);
  const rssGrowth = median(late.map((s) => s.rssMb)) - median(early.map((s) => s.rssMb));
  const fdGrowth = median(late.map((s) => s.fds)) - median(early.map((s) => s.fds));
  const totalErrors = samples.reduce((n, s) => n + s.errors, 0) + probeErrors;
  const flat = rssGrowth < 0.1 * median(early.map((s) => s.rssMb)) && fdGrowth <= 5;
  console.log(
    JSON.stringify({
      soak: MINUTES,
      saturationPerSecond: Math.round(ceiling),
      heldPerSecond: rate,
      checks: counter,
      errors: totalErrors,
      errorCauses: Object.fromEntries(errorsByCause),
      portcullisWarnings: Object.fromEntries(warnings),
      rssMb: { early: median(early.map((s) => s.rssMb)), late: median(late.map((s) => s.rssMb)), max: Math.max(...samples.map((s) => s.rssMb)) },
      heapMb: { early: median(early.map((s) => s.heapMb)), late: median(late.map((s) => s.heapMb)) },
      heapTotalMb: { early: median(early.map((s) => s.heapTotalMb)), late: median(late.map((s) => s.heapTotalMb)) },
      externalMb: { early: median(early.map((s) => s.externalMb)), late: median(late.map((s) => s.externalMb)) },
      fds: { early: median(early.map((s) => s.fds)), late: median(late.map((s) => s.fds)), max: Math.max(...samples.map((s) => s.fds)) },
      p99Ms: Math.max(...samples.map((s) => s.p99)),
      flat,
    }),
  );
  process.exitCode = totalErrors === 0 && flat ? 0 : 1;
} finally {
  client.close();
  await cleanup();
}
