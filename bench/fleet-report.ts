/** The "Fleet" section of bench/RESULTS.md, from one runFleet() result (bench/fleet.ts). */
import { cdsBytesLines } from "./cds-bytes.ts";
import type { CallCounts, FleetResult, ProcessMemory } from "./fleet.ts";

const MiB = 2 ** 20;
const n0 = (v: number) => v.toLocaleString("en-US", { maximumFractionDigits: 0 });
const f1 = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : "–");
const f2 = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : "–");
const ratio = (v: number, base: number) => (Number.isFinite(v) && Number.isFinite(base) && base !== 0 ? `${(v / base).toFixed(2)}×` : "–");

function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const s = values.toSorted((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Calls per unique key of each cache: 1.00 means each key reached its dependency once. */
function perKey(c: CallCounts): { openfga: number; sar: number; tokenRequest: number } {
  return {
    openfga: c.counts.openfgaChecks / c.unique.openfga,
    sar: c.counts.subjectAccessReviews / c.unique.subjectAccessReviews,
    tokenRequest: c.counts.tokenRequests / c.unique.tokenRequests,
  };
}

export function fleetSection(r: FleetResult): string {
  const out: string[] = [];
  const w = (...lines: string[]) => out.push(...lines);
  const N = n0(r.clusters);
  const { one, fleet } = r.memory;
  const perCluster = (pick: (m: ProcessMemory) => number) => (pick(fleet) - pick(one)) / (fleet.clusters - one.clusters);

  w(
    `## Fleet: ${N} registered clusters, and replicas`,
    "",
    `bench/fleet.ts (\`npx node bench/fleet.ts --out F.json${r.mode === "quick" ? " --quick" : ""}\`), ${r.mode} run of ${r.date}; 1-minute load average ${r.loadAverage.start} at its start, ${r.loadAverage.end} at its end`,
    "(ghz and portcullis each keep a core busy during the load phases; more than ~2 means other work shared the cores).",
    "",
    ...(Number(r.loadAverage.start.split(" ")[0]) > 3
      ? [
          `> Other work shared this machine (load average ${r.loadAverage.start.split(" ")[0]} at the start): throughput, CPU per check and start times are noisy and`,
          "> the servers did not get a whole core; the memory figures, watch and connection counts and calls per key do not depend on it.",
          "",
        ]
      : []),
    "What is real and what is a fake:",
    "",
    "- **Real**: portcullis itself (bench/servers/fleet-portcullis.ts: the configuration loader, `connectPorts` and the server, as",
    "  `portcullis --config` runs them), with " +
      (r.registration === "secrets"
        ? `the live cluster registry: every cluster is a labelled Secret (\`portcullis.fundament.io/secret-type: cluster\`) in the management cluster's namespace, watched;`
        : "the static `clusters:` list (one kubeconfig per cluster; the live registry was not in this tree when this ran);") +
      " per cluster its own connection pool, API clients and PluginInstallation list+watch; the OpenFGA SDK; ghz; every CPU and memory figure.",
    "- **Wire-level fakes** (bench/servers/fleet-fakes.ts, one process on the load core): the management cluster's Secrets API; OpenFGA",
    `  (always allowed); and **one** HTTPS API server that stands in for all ${N} clusters — each cluster id has its own bearer token, so`,
    `  the fake tells them apart and counts per cluster; it serves ${r.installationsPerCluster} PluginInstallations to every cluster, SubjectAccessReview (allowed),`,
    "  TokenRequest and /readyz. A fake answers in microseconds: registration and cold-call figures exclude a real API server's latency.",
    `- Caches: OpenFGA and SubjectAccessReview answers are kept an hour here (the defaults are 5 s allowed, 2 s denied), so a key is fetched once per`,
    "  replica and the counts below are calls per unique key; with the default TTLs every figure repeats once per TTL per replica.",
    "",
    `Request sets: ${n0(r.requestsPerSet)} users' PluginTokens on the kube-api-proxy route, one request each (GET a certificate, list pods, a deployment, pod logs),`,
    `request j on cluster j mod ${N} (\`1 cluster\`: all on one), installations spread over ${r.installationsPerCluster / 2}.`,
    "",
  );

  w(
    "### Memory and watches per replica",
    "",
    `Each in a fresh process on core 1, idle once every cluster's index has synced, after a full GC (\`--expose-gc\`, SIGUSR2 report).`,
    "",
    `| | 1 cluster | ${N} clusters | per added cluster |`,
    "| --- | ---: | ---: | ---: |",
    `| RSS after GC | ${f1(one.afterGc.rssBytes / MiB)} MiB | ${f1(fleet.afterGc.rssBytes / MiB)} MiB | ${f1(perCluster((m) => m.afterGc.rssBytes) / 1024)} KiB |`,
    `| V8 heap used after GC | ${f1(one.afterGc.heapUsedBytes / MiB)} MiB | ${f1(fleet.afterGc.heapUsedBytes / MiB)} MiB | ${f1(perCluster((m) => m.afterGc.heapUsedBytes) / 1024)} KiB |`,
    `| V8 heap committed | ${f1(one.afterGc.heapTotalBytes / MiB)} MiB | ${f1(fleet.afterGc.heapTotalBytes / MiB)} MiB | ${f1(perCluster((m) => m.afterGc.heapTotalBytes) / 1024)} KiB |`,
    `| external (Buffers, TLS, native) | ${f1(one.afterGc.externalBytes / MiB)} MiB | ${f1(fleet.afterGc.externalBytes / MiB)} MiB | ${f1(perCluster((m) => m.afterGc.externalBytes) / 1024)} KiB |`,
    `| start → every index synced | ${f2(one.syncMs / 1000)} s | ${f2(fleet.syncMs / 1000)} s | |`,
    `| PluginInstallation lists answered during the start | ${n0(one.installationLists)} | ${n0(fleet.installationLists)} | |`,
    `| CPU while idle (watches open, a bookmark per watch every ~${r.settings["bookmarkMs"]! / 1000} s) | ${f2(one.idleCores * 100)}% of a core | ${f2(fleet.idleCores * 100)}% of a core | |`,
    "",
    "More lists than clusters mean lists that timed out (10 s) and were retried with backoff: every cluster registered at once starts its TLS",
    "handshake and list together, so on a starved core they can all miss the deadline and retry together.",
    "",
    `Sizing from these figures: about ${f1(perCluster((m) => m.afterGc.rssBytes) * 100 / MiB)} MiB of RSS per 100 clusters per replica, before any cached user.`,
    "",
    `Watch connections of the ${N}-cluster replica, idle: ${n0(r.watches.openWatches)} PluginInstallation watches open at the fake, on ${n0(r.watches.watchedClusters)} distinct clusters;`,
    `${n0(r.watches.socketsToClusters)} TCP connections from the replica to the clusters' API server (its /proc/<pid>/fd sockets, a few seconds after the start: one per watch,`,
    "plus the list's connection kept alive in the cluster's pool until 30 s idle — in steady state one per cluster, plus those the checks keep warm);",
    `${n0(r.watches.registryWatches)} Secret watch(es) on the management cluster. Every replica holds the same set: ${n0(r.watches.openWatches)} watches × replicas on the API servers.`,
    "",
  );

  const { noop } = r.warm;
  const ref = r.warm.reference;
  const row = (label: string, l: FleetResult["warm"]["noop"], at: FleetResult["warm"]["noop"] | undefined) =>
    `| ${label} | ${n0(l.rps)} | ${ratio(l.rps, noop.rps)} | ${f1(l.cpuUsPerRequest)} | ${ratio(l.cpuUsPerRequest, noop.cpuUsPerRequest)} | ${f2(l.cpuCores)} | ${f2(l.p50Ms)} | ${f2(l.p99Ms)} | ${at === undefined ? "–" : `${n0(at.rps)}/s: ${f1(at.cpuUsPerRequest)}`} | ${at === undefined || ref === undefined ? "–" : ratio(at.cpuUsPerRequest, ref.noop.cpuUsPerRequest)} |`;
  w(
    "### Warm path: 1 cluster against the whole fleet",
    "",
    `ghz on core ${"0"}, ${r.settings["concurrency"]} requests in flight over ${r.settings["connections"]} connections, ${r.settings["saturationSeconds"]} s runs, best of ${r.settings["saturationRepeats"]} after a ${r.settings["warmupSeconds"]} s warm-up that filled every cache;`,
    "the server alone on core 1; CPU per check from /proc/<pid>/stat as in the main table. The same requests (same users and paths) in all three; only the",
    "clusters they name differ.",
    "",
    `Then one run at a fixed ${n0(r.settings["referenceRps"] ?? 3_000)} checks/s offered (${r.settings["referenceConcurrency"] ?? 8} in flight at most), the main report's reference rate: CPU per check at the same load for all three.`,
    "",
    "| server | checks/s at saturation | × no-op | CPU µs/check | × no-op | cores used | p50 ms | p99 ms | at the reference rate: achieved, CPU µs/check | × no-op |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    row("no-op ext_authz", noop, ref?.noop),
    row("portcullis, 1 cluster", r.warm.one, ref?.one),
    row(`portcullis, ${N} clusters, requests spread over all`, r.warm.fleet, ref?.fleet),
    "",
    `${N} clusters against 1: ${ratio(r.warm.fleet.rps, r.warm.one.rps)} the throughput at saturation, ${ratio(r.warm.fleet.cpuUsPerRequest, r.warm.one.cpuUsPerRequest)} the CPU per check` +
      (ref === undefined ? "." : `; ${ratio(ref.fleet.cpuUsPerRequest, ref.one.cpuUsPerRequest)} the CPU per check at the reference rate.`),
    "",
  );

  w("### Registration and removal in a running fleet", "");
  if (r.registrationMs.length === 0) {
    w("Not measured: this run registered clusters through the static `clusters:` list, which needs a restart for a new cluster.", "");
  } else {
    w(
      `A cluster's Secret created in the management fake while the ${N}-cluster replica runs, then one PluginToken check for it every 5 ms until the first is`,
      `allowed (its clients built, its PluginInstallation index synced, OpenFGA, SubjectAccessReview and TokenRequest made cold); then the Secret deleted,`,
      "until the first 404 `unknown-cluster`. Against the fakes, so a real API server's list and call latencies come on top.",
      "",
      "| | samples | median ms | max ms | all, ms |",
      "| --- | ---: | ---: | ---: | --- |",
      `| Secret created → first allowed check | ${r.registrationMs.length} | ${f1(median(r.registrationMs))} | ${f1(Math.max(...r.registrationMs))} | ${r.registrationMs.map((m) => m.toFixed(0)).join(", ")} |`,
      `| Secret deleted → 404 unknown-cluster | ${r.removalMs.length} | ${f1(median(r.removalMs))} | ${f1(Math.max(...r.removalMs))} | ${r.removalMs.map((m) => m.toFixed(0)).join(", ")} |`,
      "",
    );
  }

  const base = perKey(r.oneReplica);
  w(
    "### Replicas behind one load generator",
    "",
    `Each replica is its own process with its own caches and its own watches (as pods are), serving ${n0(r.replicaClusters)} registered clusters (fewer than`,
    `${N}: calls per unique key do not depend on it, and several replicas starting ${N} clusters each on one shared core would take minutes), all`,
    "pinned to core 1 together. This machine has one core for servers, so combined throughput cannot grow here: what the rows show is the cost of",
    "more replicas — CPU per check, memory, calls to OpenFGA and the API servers. With a core per replica, capacity is replicas × 1,000,000 ÷ CPU µs per check.",
    "Calls are counted at the fakes while fresh replicas answer a cold pass of the request set (every answer read and allowed):",
    "- **spread**: every replica is asked every request once — what a round-robin or least-request balancer does once each key has been asked",
    "  a few times within a cache TTL (the upper bound);",
    "- **hashed by cluster**: each request to one replica, chosen by a hash of its cluster id (a fresh request set, so the caches are cold",
    "  again) — what a balancer hashing on the cluster would do.",
    "Then one ghz per replica, all on core 0, in-flight requests split evenly between them, the whole (warm) set to each.",
    "",
    "| replicas | start, all synced, s | checks/s combined | CPU µs/check | cores used | p99 ms (worst replica) | RSS, all replicas MiB | OpenFGA calls per (user, cluster) | SubjectAccessReviews per (cluster, user, request) | TokenRequests per (cluster, ServiceAccount) | hashed by cluster: the same three |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
  );
  for (const run of r.replicaRuns) {
    const s = perKey(run.spread);
    const h = perKey(run.hashed);
    w(
      `| ${run.replicas} | ${f2(run.startMs / 1000)} | ${n0(run.saturation.rps)} | ${f1(run.saturation.cpuUsPerCheck)} | ${f2(run.saturation.cpuCores)} | ${f2(run.saturation.p99Ms)} | ${f1(run.rssBytes.reduce((a, b) => a + b, 0) / MiB)} | ${f2(s.openfga)} | ${f2(s.sar)} | ${f2(s.tokenRequest)} | ${f2(h.openfga)}, ${f2(h.sar)}, ${f2(h.tokenRequest)} |`,
    );
  }
  w(
    "",
    `The ${N}-cluster replica's own cold pass (the warm-path phase) made ${f2(base.openfga)} OpenFGA calls, ${f2(base.sar)} SubjectAccessReviews and ${f2(base.tokenRequest)} TokenRequests per unique key.`,
  );
  const unique = r.replicaRuns[0]?.spread.unique ?? r.oneReplica.unique;
  w(
    `Unique keys per request set: ${n0(unique.openfga)} (user, cluster), ${n0(unique.subjectAccessReviews)} (cluster, user, request), ${n0(unique.tokenRequests)} (cluster, ServiceAccount).`,
    "",
    "**The cost.** Caches are per replica, so N replicas make up to N× the cold calls of one: each replica asks OpenFGA once per (user, cluster) per",
    "TTL (5 s allowed, 2 s denied by default), the API server once per (cluster, user, request) per TTL (5 s / 2 s), and once per (cluster,",
    "ServiceAccount) per 80% of a token's lifetime (48 min by default) for TokenRequest. So the bound is N × keys ÷ TTL per second, whatever the request",
    "rate: 4 replicas serving 10,000 active users on 1,000 clusters cost at most 4× what one would, i.e. at most 4 SubjectAccessReviews per active",
    "(user, request) per 5 s on that user's cluster. Within a replica, concurrent misses for one key share one call (lru-cache fetch), so a burst",
    "adds nothing. What removes the multiplier is sending each cluster's (or each user's) checks to one replica: the hashed column.",
    "",
    "**What could bound it in Envoy (a proposal, not measured here; `portcullis envoy-config`'s output is unchanged).** The shipped `portcullis` cluster balances",
    "round-robin over the headless Service's endpoints. A route's `hash_policy` does not help: it steers the router's upstream request, not",
    "the ext_authz filter's gRPC call to portcullis. Envoy 1.37 adds a cluster-level `hash_policy` to `HttpProtocolOptions` (envoyproxy/envoy#41928,",
    "written for ext_authz and rate-limit services) — with `lb_policy: RING_HASH` or `MAGLEV` on the `portcullis` cluster it would pin each key to",
    "a replica while the endpoint set is stable. Hashing on `authorization` pins each user (OpenFGA and SubjectAccessReview calls back to 1× per",
    "key; TokenRequests stay up to N× per (cluster, ServiceAccount), which are few and long-lived); hashing on the cluster id pins everything",
    "to 1× but needs the id in a header before ext_authz runs (the kube-api-proxy routes carry it only inside `:path`) and puts a busy",
    "cluster on one replica. Which request headers the cluster-level hash sees for an ext_authz call must be checked on the deployed Envoy",
    "version before relying on it. Without it, the cost above is bounded by the TTLs and is what a fleet pays.",
    "",
  );
  if (r.cdsBytes !== undefined) {
    w(
      "### CDS bytes per change: State of the World against Delta",
      "",
      "bench/cds-bytes.ts, in the same run: the serialized CDS responses one change causes, as a real gRPC client that ACKs every response",
      "receives them (each cluster with a 2048-bit RSA CA inline). SotW resends every cluster on every version; Delta sends the one that changed.",
      "",
      ...cdsBytesLines(r.cdsBytes),
      "",
    );
  }
  return out.join("\n");
}
