/**
 * The Prometheus registry served on the admin port: decisions by policy and outcome, Check latency,
 * cache lookups, dependency calls and errors, index sizes.
 */
import { subscribe } from "node:diagnostics_channel";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { CacheLookup, CheckDecision, DependencyCall, InvalidSubject } from "./events.ts";

const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export interface IndexSizes {
  (): Array<{ index: string; clusterId: string; size: number; synced: boolean }>;
}

export function createMetrics(indexSizes: IndexSizes): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const decisions = new Counter({
    name: "portcullis_decisions_total",
    help: "Check decisions by policy and outcome (allowed or the denial reason code)",
    labelNames: ["policy", "outcome"],
    registers: [registry],
  });
  const checkSeconds = new Histogram({
    name: "portcullis_check_duration_seconds",
    help: "Time to decide one Check",
    labelNames: ["policy"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const cacheLookups = new Counter({
    name: "portcullis_cache_lookups_total",
    help: "Cache lookups by cache and outcome (hit, miss, inflight, stale)",
    labelNames: ["cache", "outcome"],
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
  new Gauge({
    name: "portcullis_index_objects",
    help: "Objects in each watched index, per cluster",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    collect() {
      for (const i of indexSizes()) this.set({ index: i.index, cluster_id: i.clusterId }, i.size);
    },
  });
  new Gauge({
    name: "portcullis_index_synced",
    help: "1 when the index has synced and its watch is healthy",
    labelNames: ["index", "cluster_id"],
    registers: [registry],
    collect() {
      for (const i of indexSizes()) this.set({ index: i.index, cluster_id: i.clusterId }, i.synced ? 1 : 0);
    },
  });

  subscribe("portcullis:decision", (message) => {
    const m = message as CheckDecision;
    decisions.inc({ policy: m.policy, outcome: m.outcome });
    checkSeconds.observe({ policy: m.policy }, m.seconds);
  });
  subscribe("portcullis:cache", (message) => {
    const m = message as CacheLookup;
    cacheLookups.inc({ cache: m.cache, outcome: m.outcome });
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
  return registry;
}
