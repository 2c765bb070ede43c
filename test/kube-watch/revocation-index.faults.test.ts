/**
 * The deny-list's source cut at the wire (issue 17): the REAL RevocationIndex (client-node list and
 * watch) reads a fake management API server. While a plugin is revoked, cutting the source and
 * failing every relist must never let it through: each answer is the 403 `revoked` it had, or a
 * 503, never an allow; it is 503 within a moment, and `revoked` again once the source is back. A
 * replica whose source is down from the start answers PluginToken requests 503, is not ready, and
 * still serves UserTokens. A source hung (stream open, nothing sent: issue 52) closes the plugin
 * path within kube.watch.freshnessBoundMs, whatever was revoked meanwhile, and readiness says why;
 * a hung stream is given up past its timeout and watched again, so a source whose new connections
 * work is followed again within seconds.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ids, pluginToken, userToken } from "../support/tokens.ts";
import { FakeRevocationApi } from "../support/wire-fakes/revocations.ts";
import { startWired, until, type Wired } from "../support/wire-fakes/wired.ts";
import { processReadiness } from "../../src/server/readiness.ts";
import { STALL_GRACE_MS, WATCH_TIMEOUT_SECONDS } from "../../src/kube-watch/change-feed-watch.ts";

/** kube.watch.freshnessBoundMs here: its least. */
const BOUND_MS = 6_000;

let dir: string;
let source: FakeRevocationApi;
let wired: Wired;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-revocation-source-"));
  source = await new FakeRevocationApi().start();
  const kubeconfig = source.writeKubeconfig(dir);
  wired = await startWired({}, { config: (c) => ({ ...c, revocations: { kubeconfig }, kube: { ...c.kube, watch: { ...c.kube.watch, freshnessBoundMs: BOUND_MS } } }) });
  await until(() => wired.ports.revocations !== undefined && wired.ports.ready(), 5_000, "the revocation index to sync");
});

afterAll(async () => {
  await wired?.stop();
  await source?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;
const RUNTIME = `/installations/${ids.installation}/runtime/api`;

async function answers(): Promise<string[]> {
  const authorization = `Bearer ${await pluginToken()}`;
  const results = await Promise.all([
    wired.server.check({ path: PODS, headers: { authorization }, policy: "kube-api-proxy" }),
    wired.server.check({ path: RUNTIME, headers: { authorization }, policy: "plugin-proxy" }),
  ]);
  return results.map((r) => (r.allowed ? "allowed" : `${r.http} ${r.reason}`));
}

describe("the revocation source cut", () => {
  it("a revoked plugin is never allowed while the source is cut and failing: revoked, then 503, then revoked again", async () => {
    expect(await answers()).toEqual(["allowed", "allowed"]);
    source.put("installation-x", { reason: "INC", installation: { id: ids.installation } });
    await until(async () => (await answers()).every((a) => a === "403 revoked"), 2_000, "the revocation to arrive");

    source.faults.list = "status-500";
    source.faults.watch = "reset";
    source.cutWatches();
    const seen = new Set<string>();
    const started = performance.now();
    let unavailableAfterMs: number | undefined;
    while (performance.now() - started < 1_500) {
      const now = await answers();
      for (const a of now) seen.add(a);
      if (unavailableAfterMs === undefined && now.every((a) => a === "503 dependency-unavailable")) unavailableAfterMs = performance.now() - started;
    }
    expect([...seen].filter((a) => a !== "403 revoked" && a !== "503 dependency-unavailable")).toEqual([]);
    expect(unavailableAfterMs, "503 once the cut was seen").toBeLessThan(500);
    // /readyz?verbose agrees with the verdict (the replica stays ready, Ports.ready): the list synced before.
    const listed = processReadiness({ shuttingDown: false, serving: true, indexes: wired.ports.indexSizes(), dependencies: [] }).checks.find((c) => c.name.startsWith("index revocations"));
    expect(listed).toMatchObject({ ok: false, gates: false });
    expect(listed?.state).toMatch(/^unsynced/);

    // Hung rather than failing: still no allow.
    source.faults.list = "hang";
    for (let i = 0; i < 20; i++) expect(await answers()).toEqual(["503 dependency-unavailable", "503 dependency-unavailable"]);

    source.faults.list = "healthy";
    source.faults.watch = "healthy";
    await until(async () => (await answers()).every((a) => a === "403 revoked"), 10_000, "the index to relist and refuse again");
    source.remove("installation-x");
    await until(async () => (await answers()).every((a) => a === "allowed"), 2_000, "the lifted revocation");
  });

  it("garbage from the source is unsynced too, never an empty list", async () => {
    source.put("user-x", { reason: "INC", user: { id: ids.user } });
    await until(async () => (await answers()).every((a) => a === "403 revoked"), 2_000, "the revocation to arrive");
    source.faults.list = "garbage";
    source.faults.watch = "garbage";
    source.cutWatches();
    for (let i = 0; i < 30; i++) expect(["403 revoked", "503 dependency-unavailable"]).toEqual(expect.arrayContaining(await answers()));
    source.faults.list = "healthy";
    source.faults.watch = "healthy";
    source.remove("user-x");
    await until(async () => (await answers()).every((a) => a === "allowed"), 10_000, "recovery");
  });
});

describe("the revocation source hung (streams open, nothing sent) and its lists failing", () => {
  it("a revocation made meanwhile: the plugin path answers 503 within the freshness bound, never allowed past it; UserTokens served; readiness says why", { timeout: 40_000 }, async () => {
    await until(async () => (await answers()).every((a) => a === "allowed"), 10_000, "a healthy source");
    source.hangWatches();
    // Lists answered would prove the index afresh once the hung watch is given up (the next describe).
    source.faults.list = "status-500";
    const hungAt = performance.now();
    source.put("installation-y", { reason: "INC", installation: { id: ids.installation } });
    const allowedAt: number[] = [];
    let closedAfterMs: number | undefined;
    while (closedAfterMs === undefined && performance.now() - hungAt < BOUND_MS + 5_000) {
      const now = await answers();
      if (now.includes("allowed")) allowedAt.push(performance.now() - hungAt);
      if (now.every((a) => a === "503 dependency-unavailable")) closedAfterMs = performance.now() - hungAt;
      else expect(now.every((a) => a === "allowed" || a === "403 revoked")).toBe(true);
    }
    // The view served until then was proven at most BOUND_MS before it was served.
    expect(closedAfterMs).toBeDefined();
    expect(closedAfterMs!).toBeLessThan(BOUND_MS + 500);
    expect(Math.max(0, ...allowedAt)).toBeLessThan(BOUND_MS + 100);
    for (let i = 0; i < 5; i++) expect(await answers()).toEqual(["503 dependency-unavailable", "503 dependency-unavailable"]);
    const user = await wired.server.check({ path: PODS, headers: { authorization: `Bearer ${await userToken()}` }, policy: "kube-api-proxy" });
    expect(user.allowed).toBe(true);
    const listed = processReadiness({ shuttingDown: false, serving: true, indexes: wired.ports.indexSizes(), dependencies: [] }).checks.find((c) => c.name.startsWith("index revocations"));
    expect(listed).toMatchObject({ ok: false, gates: false });
    expect(listed?.state).toMatch(/^unsynced/);
    expect(wired.ports.ready()).toBe(true);

    source.faults.list = "healthy";
    source.releaseWatches();
    await until(async () => (await answers()).every((a) => a === "403 revoked"), 10_000, "the revocation, once the stream flows");
    source.remove("installation-y");
    await until(async () => (await answers()).every((a) => a === "allowed"), 10_000, "the lifted revocation");
  });
});

describe("the revocation watch hung, new watches served (a frozen connection)", () => {
  it("is given up STALL_GRACE_MS past its timeout and watched again: a revocation made meanwhile is refused `revoked` within seconds, not 503 until the silence probe (70 s)", { timeout: 40_000 }, async () => {
    await until(async () => (await answers()).every((a) => a === "allowed"), 10_000, "a healthy source");
    // Hung mid-cycle, as the freeze proxy hangs every open stream: the stall bound runs from its last byte.
    source.hangOpenWatches();
    source.put("installation-z", { reason: "INC", installation: { id: ids.installation } });
    const stallMs = WATCH_TIMEOUT_SECONDS * 1_000 + STALL_GRACE_MS;
    const ms = await until(async () => (await answers()).every((a) => a === "403 revoked"), stallMs + 5_000, "the revocation, from a new watch");
    expect(ms).toBeLessThan(stallMs + 3_000);
    source.remove("installation-z");
    await until(async () => (await answers()).every((a) => a === "allowed"), 10_000, "the lifted revocation");
  });
});

describe("a replica whose revocation source is down from the start", () => {
  it("answers PluginToken requests 503, is not ready, and still serves UserTokens", async () => {
    const down = await new FakeRevocationApi().start();
    await down.down();
    const kubeconfig = down.writeKubeconfig(dir);
    const cold = await startWired({}, { config: (c) => ({ ...c, revocations: { kubeconfig } }) });
    try {
      expect(cold.ports.ready()).toBe(false);
      const authorization = `Bearer ${await pluginToken()}`;
      for (const policy of ["kube-api-proxy", "plugin-proxy"] as const) {
        const res = await cold.server.check({ path: policy === "kube-api-proxy" ? PODS : RUNTIME, headers: { authorization }, policy });
        expect(res).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
      }
      const user = await cold.server.check({ path: PODS, headers: { authorization: `Bearer ${await userToken()}` }, policy: "kube-api-proxy" });
      expect(user.allowed).toBe(true);
    } finally {
      await cold.stop();
    }
  });
});
