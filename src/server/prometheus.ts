/**
 * The Prometheus registry served on the admin port: decisions by policy and outcome, Check latency,
 * gRPC calls handled by method and code, cache lookups, dependency calls and errors, index sizes,
 * OIDC provider failure backoff, the build, and the runtime's health (event-loop delay, memory
 * outside the V8 heap).
 *
 * With `workers: N` the primary serves the sum over every worker (prom-client's AggregatorRegistry,
 * src/server/workers.ts): counters and histograms add up; a metric that must not be summed names
 * its aggregator ("min" for synced, "max" for what every worker holds alike).
 */
import { subscribe } from "node:diagnostics_channel";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type {
  CacheInvalidation,
  CacheLookup,
  CheckDecision,
  ClusterRegistryEvent,
  DependencyCall,
  InvalidSubject,
  PluginTokenReplay,
  ProviderBackoffChange,
  ProviderFetchRefused,
  RevokedRequest,
  BoundedStream,
  TokenVerified,
} from "../metrics/events.ts";

import type { GrpcCallHandled } from "../metrics/grpc-server.ts";
import { FLEET_LIST_SLOTS, type ListSlots, MAX_CONCURRENT_FLEET_LISTS } from "../kube-fleet/list-slots.ts";
import type { FeedState } from "../cache/freshness.ts";
import { BUILD } from "../metrics/build-info.ts";

const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export interface IndexSizes {
  (): Array<{
    index: string;
    clusterId: string;
    size: number;
    synced: boolean;
    hasSynced?: boolean;
    attempted?: boolean;
    gatesReadiness?: boolean;
    outage?: string;
    lastSyncedAt?: Date | undefined;
    /** The cluster registry's cluster ids claimed by more than one Secret (readiness lists them). */
    conflicts?: ReadonlyArray<{ clusterId: string; secrets: readonly string[] }>;
    /** Names or uids more than one of its objects claims (src/kube-watch/sole-claims.ts); absent where none can be. */
    contested?: number;
    /** Since when every change is proven applied (issue 52), for the indexes PluginToken decisions depend on; absent elsewhere. */
    provenLagSeconds?: number | undefined;
  }>;
}

/**
 * The clusters served, by where they came from, the registry's watch (undefined: no registry
 * configured), and the cluster ids more than one of its Secrets claim.
 */
export interface FleetState {
  (): { registered: { static: number; registry: number }; registrySynced: boolean | undefined; registryConflicts?: number };
}

/**
 * Every `dependency` label value withDeadline is called with (test/server/metrics.test.ts holds this
 * list to the code): their error series exist at 0 from the first scrape, so rate() and alerts see
 * the first failure.
 */
export const DEPENDENCIES = [
  "openfga",
  "openfga-changes",
  "kube-subjectaccessreview",
  "kube-tokenrequest",
  "kube-readyz",
  "kube-selfsubjectrulesreview",
  "kube-selfsubjectaccessreview",
  "oidc-provider",
  "authn-api-jwks",
] as const;

/** What the metrics read from the ports at scrape time. */
export interface MetricSources {
  readonly indexSizes: IndexSizes;
  readonly fleet?: FleetState | undefined;
  /** The event sources that keep the caches fresh, per source and scope (issue 45). */
  readonly changeFeeds?: (() => readonly FeedState[]) | undefined;
  /** The fleet's list limiter (a test hands its own). */
  readonly listSlots?: ListSlots;
}

export function createMetrics(sources: MetricSources): Registry {
  const { indexSizes, fleet, changeFeeds, listSlots = FLEET_LIST_SLOTS } = sources;
  const registry = new Registry();
  new Gauge({
    name: "portcullis_build_info",
    help: "Always 1; the labels name the portcullis version and the Node version it runs on",
    labelNames: ["version", "node"],
    registers: [registry],
    // Every worker runs the same build: 1 across workers too, not their number.
    aggregator: "max",
  }).set(BUILD, 1);
  // Includes the event-loop delay (perf_hooks.monitorEventLoopDelay: nodejs_eventloop_lag_p99_seconds,
  // …_max_seconds, since the previous scrape), nodejs_external_memory_bytes and the process's RSS.
  collectDefaultMetrics({ register: registry });
  // The one memory figure the defaults leave out: Buffers and ArrayBuffers (part of external memory),
  // where a runaway of network buffers shows first.
  new Gauge({
    name: "portcullis_memory_array_buffers_bytes",
    help: "Memory held by ArrayBuffers and Buffers (process.memoryUsage().arrayBuffers)",
    registers: [registry],
    collect() {
      this.set(process.memoryUsage().arrayBuffers);
    },
  });

  // Counted per event into plain numbers and handed to prom-client at scrape time: prom-client's
  // inc() hashes and validates the label set on every call, several times per Check.
  const decisionCounts = new LabelledCounts<"policy", "outcome">("policy", "outcome");
  new Counter({
    name: "portcullis_decisions_total",
    help: "Check decisions by policy and outcome (allowed or the denial reason code)",
    labelNames: ["policy", "outcome"],
    registers: [registry],
    collect() {
      decisionCounts.drain((labels, delta) => this.inc(labels, delta));
    },
  });
  const checkSeconds = new ObservationCounts("policy", LATENCY_BUCKETS);
  new Histogram({
    name: "portcullis_check_duration_seconds",
    help: "Time to decide one Check",
    labelNames: ["policy"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
    collect() {
      checkSeconds.drainInto(this);
    },
  });
  const cacheCounts = new LabelledCounts<"cache", "outcome">("cache", "outcome");
  new Counter({
    name: "portcullis_cache_lookups_total",
    help: "Cache lookups by cache and outcome (hit, miss, inflight, stale)",
    labelNames: ["cache", "outcome"],
    registers: [registry],
    collect() {
      cacheCounts.drain((labels, delta) => this.inc(labels, delta));
    },
  });
  const invalidations = new Counter({
    name: "portcullis_cache_invalidations_total",
    help: "Events that dropped a cache's answers they may have changed, by cache, event source and cause (issue 45)",
    labelNames: ["cache", "source", "cause"],
    registers: [registry],
  });
  const invalidatedEntries = new Counter({
    name: "portcullis_cache_invalidated_entries_total",
    help: "Cached answers dropped by events, by cache and event source",
    labelNames: ["cache", "source"],
    registers: [registry],
  });
  const dependencySeconds = new Histogram({
    name: "portcullis_dependency_duration_seconds",
    help: "Calls to OpenFGA, API servers and OIDC providers",
    labelNames: ["dependency"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const dependencyErrors = new Counter({
    name: "portcullis_dependency_errors_total",
    help: "Dependency calls that failed or timed out",
    labelNames: ["dependency"],
    registers: [registry],
  });
  for (const dependency of DEPENDENCIES) dependencyErrors.inc({ dependency }, 0);
  // Per call, like the decisions: counted into plain numbers, handed over at scrape time.
  const grpcHandledCounts = new LabelledCounts<"method", "code">("method", "code");
  new Counter({
    name: "portcullis_grpc_server_handled_total",
    help: "Unary gRPC calls answered, by method (package.Service/Method) and gRPC status code name",
    labelNames: ["method", "code"],
    registers: [registry],
    collect() {
      grpcHandledCounts.drain((labels, delta) => this.inc(labels, delta));
    },
  });
  const grpcSeconds = new ObservationCounts("method", LATENCY_BUCKETS);
  new Histogram({
    name: "portcullis_grpc_server_handling_seconds",
    help: "Time from a unary gRPC call's arrival to its answer, by method",
    labelNames: ["method"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
    collect() {
      grpcSeconds.drainInto(this);
    },
  });
  subscribe("portcullis:grpc-handled", (message) => {
    const m = message as GrpcCallHandled;
    grpcHandledCounts.add(m.method, m.code);
    grpcSeconds.observe(m.method, m.seconds);
  });
  new Gauge({
    name: "portcullis_index_objects",
    help: "Objects in each watched index, per cluster",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    // Each worker holds the whole index.
    aggregator: "max",
    collect() {
      for (const i of indexSizes()) this.set({ index: i.index, cluster_id: i.clusterId }, i.size);
    },
  });
  new Gauge({
    name: "portcullis_index_synced",
    help: "1 when the index has synced and its watch is healthy (with workers: in every worker)",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    aggregator: "min",
    collect() {
      for (const i of indexSizes()) this.set({ index: i.index, cluster_id: i.clusterId }, i.synced ? 1 : 0);
    },
  });
  new Gauge({
    name: "portcullis_index_proven_lag_seconds",
    help: "How long ago every change to the index was proven applied (Revocations, PluginInstallations): past kube.watch.freshnessBoundMs its PluginToken requests answer 503",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    aggregator: "max",
    collect() {
      // A removed cluster's index leaves no series frozen at its last, small, lag.
      this.reset();
      for (const i of indexSizes()) if (i.provenLagSeconds !== undefined) this.set({ index: i.index, cluster_id: i.clusterId }, i.provenLagSeconds);
    },
  });
  new Gauge({
    name: "portcullis_index_conflicts",
    help: "Names or uids claimed by more than one object of a watched index: none of the objects claiming one is served until one is left",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    aggregator: "max",
    collect() {
      for (const i of indexSizes()) if (i.contested !== undefined) this.set({ index: i.index, cluster_id: i.clusterId }, i.contested);
    },
  });

  new Gauge({
    name: "portcullis_fleet_list_slots",
    help: `Lists of the clusters' PluginInstallations holding one of the fleet's list slots (in_use) and queued for one (waiting); ${MAX_CONCURRENT_FLEET_LISTS} slots per process`,
    labelNames: ["state"],
    registers: [registry],
    collect() {
      // A start-up or reconnect of many clusters shows here: waiting > 0 is indexes not synced yet, not failing.
      this.set({ state: "in_use" }, listSlots.running);
      this.set({ state: "waiting" }, listSlots.waiting);
    },
  });
  if (fleet !== undefined) fleetMetrics(registry, fleet);
  if (changeFeeds !== undefined) changeFeedMetrics(registry, changeFeeds);

  subscribe("portcullis:decision", (message) => {
    const m = message as CheckDecision;
    decisionCounts.add(m.policy, m.outcome);
    checkSeconds.observe(m.policy, m.seconds);
  });
  subscribe("portcullis:cache", (message) => {
    const m = message as CacheLookup;
    cacheCounts.add(m.cache, m.outcome);
  });
  subscribe("portcullis:cache-invalidation", (message) => {
    const m = message as CacheInvalidation;
    invalidations.inc({ cache: m.cache, source: m.source, cause: m.cause });
    invalidatedEntries.inc({ cache: m.cache, source: m.source }, m.entries);
  });
  subscribe("portcullis:dependency", (message) => {
    const m = message as DependencyCall;
    dependencySeconds.observe({ dependency: m.dependency }, m.seconds);
    if (!m.ok) dependencyErrors.inc({ dependency: m.dependency });
  });
  const invalidSubjects = new Counter({
    name: "portcullis_konfidence_invalid_subjects_total",
    help: "Konfidence roleBindings entries that never match (invalid or untrusted), counted each time their Project arrives",
    labelNames: ["problem"],
    registers: [registry],
  });
  subscribe("portcullis:konfidence-invalid-subject", (message) => {
    invalidSubjects.inc({ problem: (message as InvalidSubject).problem });
  });
  const providerBackoff = new Gauge({
    name: "portcullis_oidc_provider_backoff_seconds",
    help: "The pause in force after an OIDC provider's discovery or JWKS fetch failed (0: fetching normally)",
    labelNames: ["provider"],
    registers: [registry],
    aggregator: "max",
  });
  subscribe("portcullis:oidc-provider-backoff", (message) => {
    const m = message as ProviderBackoffChange;
    providerBackoff.set({ provider: m.provider }, m.seconds);
  });
  const providerRefusals = new Counter({
    name: "portcullis_oidc_provider_fetches_refused_total",
    help: "Fetches to an OIDC provider not made because it is backing off (the checks answered 503)",
    labelNames: ["provider"],
    registers: [registry],
  });
  subscribe("portcullis:oidc-provider-fetch-refused", (message) => {
    providerRefusals.inc({ provider: (message as ProviderFetchRefused).provider });
  });
  const replays = new Counter({
    name: "portcullis_plugin_token_replay_total",
    help: "PluginTokens refused by a platform API (FUN-17 §3: a cross-service replay), by service and method",
    labelNames: ["service", "method"],
    registers: [registry],
  });
  const replayMethods = new BoundedLabel(MAX_REPLAY_METHODS);
  subscribe("portcullis:plugin-token-replay", (message) => {
    const m = message as PluginTokenReplay;
    replays.inc({ service: m.service, method: replayMethods.of(m.method) });
  });
  const revoked = new Counter({
    name: "portcullis_revoked_total",
    help: "PluginToken requests and mints refused by the revocation list, by policy (or GetInstallationManifest) and the kind of entry that matched",
    labelNames: ["policy", "scope"],
    registers: [registry],
  });
  subscribe("portcullis:revoked", (message) => {
    const m = message as RevokedRequest;
    revoked.inc({ policy: m.policy, scope: m.scope });
  });
  const bounded = new Counter({
    name: "portcullis_bounded_streams_total",
    help: "Allowed requests bounded to end in time (kube-api-proxy's streams, every plugin-proxy request), by policy and how: watch-timeout (the watch's timeoutSeconds set) or stream-duration (Envoy ends it at the token's expiry)",
    labelNames: ["policy", "kind"],
    registers: [registry],
  });
  subscribe("portcullis:bounded-stream", (message) => {
    const m = message as BoundedStream;
    bounded.inc({ policy: m.policy, kind: m.kind });
  });
  // Per accepted token, cache hits included: the HS256 → asymmetric migration is watched draining here.
  const verifiedCounts = new LabelledCounts<"alg", "type">("alg", "type");
  new Counter({
    name: "portcullis_tokens_verified_total",
    help: "Fundament tokens accepted, by signing algorithm (HS256, EdDSA, ES256, RS256) and token type (user, plugin, other-audience)",
    labelNames: ["alg", "type"],
    registers: [registry],
    collect() {
      verifiedCounts.drain((labels, delta) => this.inc(labels, delta));
    },
  });
  subscribe("portcullis:token-verified", (message) => {
    const m = message as TokenVerified;
    verifiedCounts.add(m.alg, m.type);
  });
  return registry;
}

/** The event sources that keep the caches fresh: synced or not, and how far behind, per source and scope. */
function changeFeedMetrics(registry: Registry, changeFeeds: () => readonly FeedState[]): void {
  new Gauge({
    name: "portcullis_event_source_synced",
    help: "1 while an event source keeps its scope's cached answers fresh (synced and caught up); 0 while they are on the short TTLs",
    labelNames: ["source", "scope"],
    registers: [registry],
    aggregator: "min",
    collect() {
      this.reset();
      for (const f of changeFeeds()) this.set({ source: f.source, scope: f.scope }, f.synced ? 1 : 0);
    },
  });
  new Gauge({
    name: "portcullis_event_source_lag_seconds",
    help: "Seconds since the time up to which an event source has applied every change of its scope (absent while not synced)",
    labelNames: ["source", "scope"],
    registers: [registry],
    aggregator: "max",
    collect() {
      this.reset();
      for (const f of changeFeeds()) if (f.lagSeconds !== undefined) this.set({ source: f.source, scope: f.scope }, f.lagSeconds);
    },
  });
}

/** The clusters served by source, and the cluster registry's watch and the changes it made. */
function fleetMetrics(registry: Registry, fleet: FleetState): void {
  new Gauge({
    name: "portcullis_registered_clusters",
    help: "Clusters served, by source: static (clusters[] of the file) or registry (cluster Secrets)",
    labelNames: ["source"],
    registers: [registry],
    // Each worker serves the whole fleet.
    aggregator: "max",
    collect() {
      const { registered } = fleet();
      this.set({ source: "static" }, registered.static);
      this.set({ source: "registry" }, registered.registry);
    },
  });
  if (fleet().registrySynced === undefined) return;
  new Gauge({
    name: "portcullis_cluster_registry_synced",
    help: "1 while the cluster registry's watch of cluster Secrets is healthy (with workers: in every worker); 0 keeps the clusters already registered",
    registers: [registry],
    aggregator: "min",
    collect() {
      this.set(fleet().registrySynced === true ? 1 : 0);
    },
  });
  new Gauge({
    name: "portcullis_cluster_registry_conflicts",
    help: "Cluster ids claimed by more than one cluster Secret: each is served by none of them (404 unknown-cluster) until all but one are deleted",
    registers: [registry],
    // Every worker reads the same Secrets.
    aggregator: "max",
    collect() {
      this.set(fleet().registryConflicts ?? 0);
    },
  });
  const events = new Counter({
    name: "portcullis_cluster_registry_events_total",
    help: "Changes the cluster registry made: added, changed (clients rebuilt), removed, invalid (a Secret that registers no cluster), conflict (an id claimed by more than one Secret, or its claimants changed), conflict-resolved",
    labelNames: ["event"],
    registers: [registry],
  });
  for (const event of ["added", "changed", "removed", "invalid", "conflict", "conflict-resolved"]) events.inc({ event }, 0);
  subscribe("portcullis:cluster-registry", (message) => events.inc({ event: (message as ClusterRegistryEvent).event }));
}

/** Distinct paths a replaying plugin can make label values of; past this they count as `other`. */
const MAX_REPLAY_METHODS = 200;

/** A client-chosen label value, kept to a bounded set: the first `max` values seen, then `other`. */
class BoundedLabel {
  readonly #seen = new Set<string>();
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  of(value: string): string {
    if (this.#seen.has(value)) return value;
    if (this.#seen.size >= this.#max) return "other";
    this.#seen.add(value);
    return value;
  }
}

/** Counts by a pair of label values (both from closed sets), drained into a prom-client Counter when scraped. */
class LabelledCounts<A extends string, B extends string> {
  readonly #a: A;
  readonly #b: B;
  readonly #counts = new Map<string, Map<string, { labels: Record<A | B, string>; count: number; reported: number }>>();

  constructor(a: A, b: B) {
    this.#a = a;
    this.#b = b;
  }

  add(a: string, b: string): void {
    let inner = this.#counts.get(a);
    if (inner === undefined) this.#counts.set(a, (inner = new Map()));
    const entry = inner.get(b);
    if (entry !== undefined) entry.count++;
    else inner.set(b, { labels: { [this.#a]: a, [this.#b]: b } as Record<A | B, string>, count: 1, reported: 0 });
  }

  /** Hands over what was counted since the last drain. */
  drain(inc: (labels: Record<A | B, string>, delta: number) => void): void {
    for (const inner of this.#counts.values()) {
      for (const entry of inner.values()) {
        if (entry.count === entry.reported) continue;
        inc(entry.labels, entry.count - entry.reported);
        entry.reported = entry.count;
      }
    }
  }
}

/** One series of a prom-client Histogram as prom-client 15 holds it (Histogram.hashMap's values). */
interface HistogramSeries {
  labels: Record<string, string>;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/**
 * A histogram's observations by one label value (from a closed set), counted per check into plain
 * arrays and added to the prom-client Histogram when scraped: its observe() validates and hashes the
 * label set on every call, twice per Check. prom-client has no call that adds counted observations, so
 * they go into the series its own zero() creates (test/metrics/check-histograms.test.ts holds a scrape to prom-client's own).
 */
class ObservationCounts {
  readonly #label: string;
  readonly #bounds: readonly number[];
  readonly #pending = new Map<string, { buckets: number[]; sum: number; count: number }>();

  constructor(label: string, bounds: readonly number[]) {
    this.#label = label;
    this.#bounds = bounds;
  }

  observe(value: string, seconds: number): void {
    let pending = this.#pending.get(value);
    if (pending === undefined) this.#pending.set(value, (pending = { buckets: this.#bounds.map(() => 0), sum: 0, count: 0 }));
    pending.sum += seconds;
    pending.count++;
    // As prom-client counts it: in the first bucket whose bound it does not exceed, in none past the last (+Inf is the count).
    const bounds = this.#bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (seconds <= bounds[i]!) {
        pending.buckets[i]!++;
        break;
      }
    }
  }

  /** Adds what was observed since the last scrape to `histogram`'s series. */
  drainInto(histogram: Histogram): void {
    for (const [value, pending] of this.#pending) {
      if (pending.count === 0) continue;
      const series = this.#series(histogram, value);
      series.sum += pending.sum;
      series.count += pending.count;
      this.#bounds.forEach((bound, i) => {
        series.bucketValues[bound] = (series.bucketValues[bound] ?? 0) + pending.buckets[i]!;
        pending.buckets[i] = 0;
      });
      pending.sum = 0;
      pending.count = 0;
    }
  }

  #series(histogram: Histogram, value: string): HistogramSeries {
    const all = () => Object.values((histogram as unknown as { hashMap: Record<string, HistogramSeries> }).hashMap);
    const find = () => all().find((s) => s.labels[this.#label] === value);
    const found = find();
    if (found !== undefined) return found;
    histogram.zero({ [this.#label]: value });
    const created = find();
    if (created === undefined) throw new Error(`prom-client's Histogram no longer holds its series in hashMap (label ${this.#label})`);
    return created;
  }
}
