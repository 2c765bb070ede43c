/**
 * The /readyz verdict and its verbose lines: a table over one process's states, and the primary's
 * verdict over its workers (ready only with every one of them listening and ready).
 */
import { describe, expect, it } from "vitest";
import { type IndexState, processReadiness, renderReadiness, workersReadiness } from "../../src/server/readiness.ts";

const index = (clusterId: string, synced: boolean, hasSynced?: boolean, lastSyncedAt?: Date): IndexState => ({
  index: "plugininstallations",
  clusterId,
  size: 2,
  synced,
  ...(hasSynced === undefined ? {} : { hasSynced }),
  lastSyncedAt,
});

describe("one process", () => {
  it.each([
    { name: "serving, all synced", serving: true, shuttingDown: false, indexes: [index("a", true, true)], lines: ["[+]shutdown: not begun", "[+]index plugininstallations cluster=a: synced, 2 objects"], verdict: "ready" },
    {
      name: "one cluster lost after its first sync",
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true), index("b", false, true)],
      lines: ["[-]index plugininstallations cluster=b: unsynced, synced before: this cluster's checks answer 503 until its watch recovers (does not gate readiness)"],
      verdict: "ready",
    },
    {
      name: "with the time of the last sync",
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true, new Date("2026-12-01T00:40:00.000Z")), index("b", false, true, new Date("2026-12-01T00:30:00.000Z"))],
      lines: [
        "[+]index plugininstallations cluster=a: synced, 2 objects, last synced 2026-12-01T00:40:00.000Z",
        "[-]index plugininstallations cluster=b: unsynced, last synced 2026-12-01T00:30:00.000Z: this cluster's checks answer 503 until its watch recovers (does not gate readiness)",
      ],
      verdict: "ready",
    },
    {
      name: "first list failed while another cluster synced",
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true), { ...index("b", false, false), attempted: true }],
      lines: ["[-]index plugininstallations cluster=b: never synced, its first list failed: this cluster's checks answer 503 until it syncs (does not gate readiness)"],
      verdict: "ready",
    },
    { name: "first list failed, no cluster synced", serving: false, shuttingDown: false, indexes: [{ ...index("b", false, false), attempted: true }], lines: ["[-]index plugininstallations cluster=b: never synced: not ready until it has"], verdict: "not ready" },
    { name: "never synced", serving: false, shuttingDown: false, indexes: [index("a", false, false)], lines: ["[-]index plugininstallations cluster=a: never synced: not ready until it has"], verdict: "not ready" },
    { name: "an index that does not say hasSynced counts as never synced while unsynced", serving: false, shuttingDown: false, indexes: [index("r", false)], lines: ["[-]index plugininstallations cluster=r: never synced: not ready until it has"], verdict: "not ready" },
    { name: "shutting down", serving: false, shuttingDown: true, indexes: [], lines: ["[-]shutdown: begun: not serving"], verdict: "not ready" },
    // The cluster registry (issue 16).
    {
      name: "a cluster registered while serving, not synced yet",
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true), { ...index("n", false, false), gatesReadiness: false }],
      lines: ["[-]index plugininstallations cluster=n: not synced yet, registered while serving: this cluster's checks answer 503 until it syncs (does not gate readiness)"],
      verdict: "ready",
    },
    {
      name: "the registry's watch lost after its first list: the clusters are kept",
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true), { ...index("cluster-registry", false, true), index: "clusterregistry", outage: "the clusters it registered are kept and served" }],
      lines: ["[-]index clusterregistry cluster=cluster-registry: unsynced, synced before: the clusters it registered are kept and served (does not gate readiness)"],
      verdict: "ready",
    },
    // Issue 42: a cluster id two Secrets claim is served by neither; the replica stays in service for the others.
    {
      name: "a cluster id claimed by two cluster Secrets",
      serving: true,
      shuttingDown: false,
      indexes: [
        index("a", true, true),
        { ...index("cluster-registry", true, true), index: "clusterregistry", conflicts: [{ clusterId: "x", secrets: ["ns/aaa-cluster-prod-1", "ns/cluster-prod-1"] }] },
      ],
      lines: [
        "[+]index clusterregistry cluster=cluster-registry: synced, 2 objects",
        "[-]cluster id conflict cluster=x: claimed by 2 cluster Secrets (ns/aaa-cluster-prod-1, ns/cluster-prod-1): served by none of them, its checks answer 404 unknown-cluster until all but one are deleted (does not gate readiness)",
      ],
      verdict: "ready",
    },
    {
      name: "the registry never listed",
      serving: false,
      shuttingDown: false,
      indexes: [index("a", true, true), { ...index("cluster-registry", false, false), index: "clusterregistry" }],
      lines: ["[-]index clusterregistry cluster=cluster-registry: never synced: not ready until it has"],
      verdict: "not ready",
    },
  ])("$name → $verdict", ({ serving, shuttingDown, indexes, lines, verdict }) => {
    const readiness = processReadiness({ serving, shuttingDown, indexes, dependencies: [{ name: "openfga store", ok: false, state: "unresolved" }] });
    expect(renderReadiness(readiness, false)).toBe(`${verdict}\n`);
    const verbose = renderReadiness(readiness, true).split("\n");
    for (const line of lines) expect(verbose).toContain(line);
    expect(verbose).toContain("[-]openfga store: unresolved (does not gate readiness)");
    expect(verbose.at(-2)).toBe(verdict);
  });
});

describe("event sources", () => {
  it("are listed per source and scope, gating nothing: a source that is not synced leaves its answers on the short TTLs", () => {
    const readiness = processReadiness({
      serving: true,
      shuttingDown: false,
      indexes: [index("a", true, true)],
      dependencies: [],
      changeFeeds: [
        { source: "kube-rbac", scope: "a", synced: true, lagSeconds: 0.42 },
        { source: "openfga-changes", scope: "store-1", synced: false, detail: "changes endpoint answered 500" },
      ],
    });
    expect(readiness.ready).toBe(true);
    const verbose = renderReadiness(readiness, true).split("\n");
    expect(verbose).toContain("[+]event source kube-rbac scope=a: synced, every change applied up to 0.4 s ago: answers kept up to the safety-net TTL (does not gate readiness)");
    expect(verbose).toContain("[-]event source openfga-changes scope=store-1: not synced (changes endpoint answered 500): answers on the short TTLs (does not gate readiness)");
    expect(verbose.at(-2)).toBe("ready");
  });
});

describe("the primary over its workers", () => {
  const ready = { ready: true, checks: [{ name: "shutdown", ok: true, state: "not begun", gates: true }] };
  const notReady = { ready: false, checks: [{ name: "shutdown", ok: false, state: "begun: not serving", gates: true }] };
  it.each([
    { name: "both ready", expected: 2, workers: [{ pid: 1, readiness: ready }, { pid: 2, readiness: ready }], verdict: true, line: "[+]worker 2 shutdown: not begun" },
    { name: "one not ready", expected: 2, workers: [{ pid: 1, readiness: ready }, { pid: 2, readiness: notReady }], verdict: false, line: "[-]worker 2 shutdown: begun: not serving" },
    { name: "one did not answer", expected: 2, workers: [{ pid: 1, readiness: ready }, { pid: 2, readiness: undefined }], verdict: false, line: "[-]worker 2 answer: no answer in time" },
    { name: "one not listening (died, being replaced)", expected: 2, workers: [{ pid: 1, readiness: ready }], verdict: false, line: "[-]workers: 1 of 2 listening" },
    { name: "none", expected: 2, workers: [], verdict: false, line: "[-]workers: 0 of 2 listening" },
  ])("$name → ready: $verdict", ({ expected, workers, verdict, line }) => {
    const readiness = workersReadiness(expected, workers);
    expect(readiness.ready).toBe(verdict);
    expect(renderReadiness(readiness, true).split("\n")).toContain(line);
  });
});
