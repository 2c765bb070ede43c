/**
 * The Project index of a registered Konfidence cluster (src/konfidence/registered-projects.ts):
 * unattached it answers 503 and holds no readiness; attached, it serves only what the attached
 * cluster's own watch listed (503 until then), gating readiness only for a cluster of the registry's
 * first list; a re-attach replaces the index, a detach drops it. What the watch serves from a real
 * API server, and the re-point between two of them, is test/e2e/konfidence-registered-cluster.test.ts.
 */
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { RegisteredProjects } from "../../src/konfidence/registered-projects.ts";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { connectCluster } from "../../src/kube-fleet/clusters.ts";

const K = "a1a1a1a1-0000-4000-8000-00000000000a";
/** Nothing listens on port 1: the watch's list fails, its index never syncs. */
const unreachable = () => connectCluster({ id: K, server: "https://127.0.0.1:1", credential: { token: "t" } }).cluster;

let projects: RegisteredProjects;
afterEach(async () => projects?.stop());

function lookups(p: RegisteredProjects): Array<() => unknown> {
  return [() => p.byName("alpha"), () => p.namesProvider("https://idp.example"), () => p.namesAudience("https://idp.example", ["a"])];
}

describe("RegisteredProjects", () => {
  it("unattached: every lookup is 503 (not registered), readiness is not held, the index is listed as such", () => {
    projects = new RegisteredProjects(K, { logger: pino({ level: "silent" }), trusts: () => true });
    for (const lookup of lookups(projects)) expect(lookup).toThrow(new DependencyUnavailable("konfidence-project-index", "its cluster is not registered"));
    expect(projects.hasSynced).toBe(true);
    expect(projects.sizes()).toEqual([{ clusterId: K, size: 0, contested: 0, synced: false, hasSynced: false, gatesReadiness: false, lastSyncedAt: undefined }]);
  });

  it("attach → 503 until synced, readiness held only for a first-list cluster; re-attach replaces; detach → not registered again", () => {
    projects = new RegisteredProjects(K, { logger: pino({ level: "silent" }), trusts: () => true });
    projects.attach(unreachable(), { gatesReadiness: true });
    for (const lookup of lookups(projects)) expect(lookup).toThrow(new DependencyUnavailable("konfidence-project-index", "not synced"));
    expect(projects.hasSynced).toBe(false);
    expect(projects.sizes()).toMatchObject([{ clusterId: K, synced: false, hasSynced: false, gatesReadiness: true }]);

    // Registered again while serving (a changed Secret after a delete): the new index, not the old one, decides.
    projects.attach(unreachable(), { gatesReadiness: false });
    expect(projects.hasSynced).toBe(true);
    expect(projects.sizes()).toMatchObject([{ clusterId: K, synced: false, gatesReadiness: false }]);
    for (const lookup of lookups(projects)) expect(lookup).toThrow(new DependencyUnavailable("konfidence-project-index", "not synced"));

    projects.detach();
    for (const lookup of lookups(projects)) expect(lookup).toThrow(new DependencyUnavailable("konfidence-project-index", "its cluster is not registered"));
    expect(projects.sizes()).toMatchObject([{ clusterId: K, synced: false, gatesReadiness: false }]);
  });
});
