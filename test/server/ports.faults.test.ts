/**
 * Fault injection against the REAL ports: the OpenFGA SDK, client-node's SubjectAccessReview,
 * TokenRequest and ListWatch talk over loopback HTTP to wire fakes that misbehave on cue. Every
 * fault must end in the documented denial (503 dependency-unavailable unless stated) within the
 * check deadline, must not leak sockets, and must heal by itself once the dependency is back; the
 * time from "healthy again" to "first allow" is printed per fault.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startTestServer } from "../support/server.ts";
import type { Fault } from "../support/wire-fakes/http-fake.ts";
import { indexAnswers, startWired, until, WIRED_TIMEOUTS, type Wired } from "../support/wire-fakes/wired.ts";
import { ids, PINNED_HASH, pluginToken, userToken } from "../support/tokens.ts";

/** Scheduling slack on a loaded CI machine; a missed deadline is still far above it. */
const MARGIN_MS = 300;
const DEADLINE_MS = WIRED_TIMEOUTS.checkMs + MARGIN_MS;
const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

const recoveries: Array<{ fault: string; denial: string; deniedInMs: number; recoveredInMs: number }> = [];

let w: Wired;
beforeAll(async () => {
  w = await startWired();
});
afterAll(async () => {
  await w.stop();
  console.log(`fault recovery (heal → first allow), check deadline ${WIRED_TIMEOUTS.checkMs} ms:\n${recoveries
    .map((r) => `  ${r.fault.padEnd(48)} ${r.denial.padEnd(24)} denied in ${r.deniedInMs.toFixed(0).padStart(4)} ms, recovered in ${r.recoveredInMs.toFixed(0).padStart(5)} ms`)
    .join("\n")}`);
});
beforeEach(async () => {
  w.openfga.fault = "healthy";
  Object.assign(w.kube.faults, { sar: "healthy", tokenRequest: "healthy", list: "healthy", watch: "healthy" });
  await until(() => indexAnswers(w.ports), 10_000, "the index to be synced before the next fault");
});

type Kind = "plugin" | "user" | "plugin-proxy";

/** A fresh user per TokenRequest fault: its ServiceAccount token is not cached yet. */
function freshUser(): string {
  const user = randomUUID();
  w.kube.serviceAccounts.add(`fundament-system/fundament-${user}`);
  return user;
}

async function timedCheck(kind: Kind, user: string = ids.user) {
  const started = performance.now();
  const res =
    kind === "plugin-proxy"
      ? await w.server.check({ path: `/installations/${ids.installation}/runtime/api`, headers: { authorization: `Bearer ${await pluginToken({ sub: user })}` }, policy: "plugin-proxy" })
      : await w.server.check({
          path: PODS,
          headers: { authorization: `Bearer ${await (kind === "plugin" ? pluginToken({ sub: user }) : userToken({ sub: user }))}` },
          policy: "kube-api-proxy",
        });
  return { res, ms: performance.now() - started };
}

interface FaultCase {
  name: string;
  kind: Kind;
  /** Turns the dependency bad (and waits until portcullis has noticed, where that takes a moment). */
  inject: (w: Wired) => void | Promise<void>;
  heal: (w: Wired) => void | Promise<void>;
  /** TokenRequest faults need a user whose token is not cached. */
  freshUser?: boolean;
}

const httpFaults: Fault[] = ["reset", "slow", "status-500", "garbage"];

const cases: FaultCase[] = [
  { name: "OpenFGA refuses connections", kind: "plugin", inject: (x) => x.openfga.down(), heal: (x) => x.openfga.up() },
  { name: "OpenFGA refuses connections (plugin-proxy)", kind: "plugin-proxy", inject: (x) => x.openfga.down(), heal: (x) => x.openfga.up() },
  ...httpFaults.map((f): FaultCase => ({ name: `OpenFGA Check: ${f}`, kind: "plugin", inject: (x) => void (x.openfga.fault = f), heal: (x) => void (x.openfga.fault = "healthy") })),
  ...httpFaults.map((f): FaultCase => ({ name: `OpenFGA Check: ${f} (user path)`, kind: "user", inject: (x) => void (x.openfga.fault = f), heal: (x) => void (x.openfga.fault = "healthy") })),
  ...httpFaults.map((f): FaultCase => ({ name: `SubjectAccessReview: ${f}`, kind: "plugin", inject: (x) => void (x.kube.faults.sar = f), heal: (x) => void (x.kube.faults.sar = "healthy") })),
  ...httpFaults.map((f): FaultCase => ({
    name: `TokenRequest: ${f}`,
    kind: "user",
    freshUser: true,
    inject: (x) => void (x.kube.faults.tokenRequest = f),
    heal: (x) => void (x.kube.faults.tokenRequest = "healthy"),
  })),
  {
    name: "API server refuses connections (SAR, TokenRequest, watch)",
    kind: "plugin",
    inject: async (x) => {
      await x.kube.down();
      await until(() => !indexAnswers(x.ports), 2_000, "the index to notice the broken watch");
    },
    heal: (x) => x.kube.up(),
  },
  {
    name: "watch cut mid-stream, relist failing",
    kind: "plugin",
    inject: async (x) => {
      x.kube.faults.list = "status-500";
      x.kube.cutWatches();
      await until(() => !indexAnswers(x.ports), 2_000, "the index to notice the cut watch");
    },
    heal: (x) => void (x.kube.faults.list = "healthy"),
  },
  {
    name: "watch answers 500 on reconnect",
    kind: "plugin",
    inject: async (x) => {
      x.kube.faults.watch = "status-500";
      x.kube.cutWatches();
      await until(() => !indexAnswers(x.ports), 2_000, "the index to notice the cut watch");
    },
    heal: (x) => void (x.kube.faults.watch = "healthy"),
  },
];

describe("each fault is a 503 within the deadline, and heals by itself", () => {
  it.each(cases)("$name", async ({ name, kind, inject, heal, freshUser: fresh }) => {
    const user: string = fresh ? freshUser() : ids.user;
    await inject(w);
    const first = await timedCheck(kind, user);
    const second = await timedCheck(kind, user);
    for (const { res, ms } of [first, second]) {
      expect(res).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable", headers: { "retry-after": "1" } });
      expect(ms).toBeLessThan(DEADLINE_MS);
    }
    // Calls we gave up on are aborted (give the client's own timer a moment to fire): a slow
    // dependency must not pile up one waiting socket per check.
    await until(() => w.openfga.pendingRequests + w.kube.pendingRequests === 0, 200, "abandoned calls to be aborted");

    const healed = performance.now();
    await heal(w);
    await until(async () => (await timedCheck(kind, user)).res.allowed, 15_000, `${name} to heal`);
    recoveries.push({ fault: name, denial: "503 dependency-unavailable", deniedInMs: Math.max(first.ms, second.ms), recoveredInMs: performance.now() - healed });
  });

  it("a missing ServiceAccount is a denial, not an outage: TokenRequest 404 → 403 user-unavailable", async () => {
    const { res } = await timedCheck("user", randomUUID());
    expect(res).toMatchObject({ allowed: false, http: 403, reason: "user-unavailable" });
  });
});

describe("the PluginInstallation watch", () => {
  it("410 Gone (history compacted): relists without going unready, and drops what was deleted meanwhile", async () => {
    const other = { uid: ids.otherInstallation, name: "grafana", definitionHash: PINNED_HASH };
    w.kube.put(other);
    w.kube.serviceAccounts.add("plugin-grafana/plugin-grafana");
    const grafana = async () =>
      w.server.check({
        path: PODS,
        headers: { authorization: `Bearer ${await pluginToken({ installation_id: other.uid, installation_name: other.name })}` },
        policy: "kube-api-proxy",
      });
    await until(async () => (await grafana()).allowed, 5_000, "grafana to be indexed");

    // Deleted without an event: only the relist that 410 forces can notice.
    w.kube.removeSilently(other.uid);
    expect(await grafana()).toMatchObject({ allowed: true });
    const compacted = performance.now();
    w.kube.compact();
    await until(async () => (await grafana()).allowed === false, 5_000, "the relist to drop grafana");
    recoveries.push({ fault: "watch 410 Gone (relist)", denial: "none (stays ready)", deniedInMs: 0, recoveredInMs: performance.now() - compacted });
    expect(await grafana()).toMatchObject({ allowed: false, http: 403, reason: "installation-unavailable" });
    expect(indexAnswers(w.ports)).toBe(true);
    expect((await timedCheck("plugin")).res).toMatchObject({ allowed: true });
  });

  it("a cut watch with a healthy API server resyncs by itself; no allow is served from a broken watch", async () => {
    const cut = performance.now();
    w.kube.cutWatches();
    const outcomes = new Set<string>();
    await until(
      async () => {
        const { res } = await timedCheck("plugin");
        outcomes.add(res.allowed ? "allowed" : `${res.http} ${res.reason}`);
        return res.allowed && w.kube.watchers > 0;
      },
      10_000,
      "the watch to be re-established",
    );
    recoveries.push({ fault: "watch cut mid-stream, API healthy", denial: [...outcomes].join(" / "), deniedInMs: 0, recoveredInMs: performance.now() - cut });
    expect([...outcomes].every((o) => o === "allowed" || o === "503 dependency-unavailable")).toBe(true);
  });
});

describe("an index that never syncs", () => {
  it.each<{ name: string; fault: Fault }>([
    { name: "list answers 500", fault: "status-500" },
    { name: "list hangs", fault: "slow" },
    { name: "list answers garbage", fault: "garbage" },
  ])("$name: 503 and NOT ready until it syncs, then allows", async ({ name, fault }) => {
    const fresh = await startWired(
      {},
      {
        waitForSync: false,
        before: ({ kube }) => {
          kube.faults.list = fault;
          // Far longer than any client timeout: only portcullis giving up on the list can heal this.
          kube.slowMs = 600_000;
        },
      },
    );
    try {
      const readyz = async () => (await fetch(`http://127.0.0.1:${fresh.server.server.adminPort}/readyz`)).status;
      const started = performance.now();
      const res = await fresh.server.check({ path: PODS, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" });
      expect(res).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
      expect(performance.now() - started).toBeLessThan(DEADLINE_MS);
      expect(await readyz()).toBe(503);
      expect(fresh.server.server.health.serving).toBe(false);

      fresh.kube.faults.list = "healthy";
      const healed = performance.now();
      await until(
        async () => (await fresh.server.check({ path: PODS, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" })).allowed,
        20_000,
        "the index to sync",
      );
      recoveries.push({ fault: `index never syncs: ${name}`, denial: "503 dependency-unavailable", deniedInMs: 0, recoveredInMs: performance.now() - healed });
      expect(await readyz()).toBe(200);
    } finally {
      await fresh.stop();
    }
  });
});

describe("clock skew between authn-api and portcullis (clockToleranceSeconds)", () => {
  const now = () => Math.floor(Date.now() / 1000);
  // authn-api stamps iat (and nbf, if it sets one) from its own clock and exp = iat + TTL.
  const skewed = (skew: number, nbf: boolean) => {
    const iat = now() + skew;
    return pluginToken({}, { iat, exp: iat + 900, ...(nbf ? { nbf: iat } : {}) });
  };

  it.each([
    { name: "authn-api 30 s ahead, tolerance 5 s", skew: 30, nbf: false, tolerance: 5, expected: "invalid-token" },
    { name: "authn-api 30 s ahead with nbf, tolerance 5 s", skew: 30, nbf: true, tolerance: 5, expected: "invalid-token" },
    { name: "authn-api 30 s behind, tolerance 5 s", skew: -30, nbf: true, tolerance: 5, expected: "allowed" },
    { name: "authn-api 4 s ahead, tolerance 5 s", skew: 4, nbf: true, tolerance: 5, expected: "allowed" },
    { name: "authn-api 30 s ahead, tolerance 60 s", skew: 30, nbf: true, tolerance: 60, expected: "allowed" },
    { name: "authn-api 30 s behind, tolerance 60 s", skew: -30, nbf: true, tolerance: 60, expected: "allowed" },
    { name: "token 30 s past exp, tolerance 60 s", skew: -930, nbf: false, tolerance: 60, expected: "allowed" },
    { name: "token 30 s past exp, tolerance 5 s", skew: -930, nbf: false, tolerance: 5, expected: "invalid-token" },
  ])("$name → $expected", async ({ skew, nbf, tolerance, expected }) => {
    const server = tolerance === 5 ? w.server : await startTolerant(tolerance);
    try {
      const res = await server.check({ path: PODS, headers: { authorization: `Bearer ${await skewed(skew, nbf)}` }, policy: "kube-api-proxy" });
      expect(res.allowed ? "allowed" : res.reason).toBe(expected);
    } finally {
      if (server !== w.server) await server.stop();
    }
  });
});

/** A second server on the same real ports, with another clock tolerance. */
function startTolerant(tolerance: number) {
  return startTestServer({ ...w.ports, stop: async () => {} }, { ...w.config, tokens: { ...w.config.tokens!, clockToleranceSeconds: tolerance } });
}
