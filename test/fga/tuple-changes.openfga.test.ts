/**
 * The can_view gate following the real OpenFGA's ReadChanges (issue 45): with the allow TTL and
 * the safety net both at 60 s, only the change feed can end a cached allow within a second — for a
 * viewer tuple and for an indirect one (the organization's ownership of the cluster); a new model
 * drops the answers too; and with the changes endpoint failing (a proxy answering 500 to /changes
 * only) the answers fall back to allowTtlMs.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { OpenFgaClient } from "@openfga/sdk";
import { transformer } from "@openfga/syntax-transformer";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { OpenFgaCanView } from "../../src/fga/can-view.ts";
import type { DependencyCall } from "../../src/metrics/events.ts";
import { startOpenFGA, type OpenFGA } from "../harness/index.ts";

const MODEL = resolve(import.meta.dirname, "../../deploy/openfga/model.fga");
const POLL_MS = 100;
/** What a change may take to show at the gate: a poll interval, a poll, the Check asked again. */
const WITHIN_MS = POLL_MS + 600;

let fga: OpenFGA;
let client: OpenFgaClient;
let proxy: ChangesProxy;
const gates: OpenFgaCanView[] = [];

/** OpenFGA's HTTP API passed through, save /changes, which answers 500 while `failing`. */
interface ChangesProxy {
  readonly url: string;
  failing: boolean;
  close(): Promise<void>;
}

async function startChangesProxy(target: string): Promise<ChangesProxy> {
  const upstream = new URL(target);
  const state = { failing: false };
  const server: Server = createServer((req, res) => {
    if (state.failing && /^\/stores\/[^/]+\/changes(\?|$)/.test(req.url ?? "")) {
      res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ code: "internal_error", message: "injected by the test" }));
      return;
    }
    const forwarded = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    forwarded.on("error", () => res.destroy());
    req.pipe(forwarded);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get failing() {
      return state.failing;
    },
    set failing(value: boolean) {
      state.failing = value;
    },
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

beforeAll(async () => {
  fga = await startOpenFGA({ modelFile: MODEL });
  client = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: fga.storeId });
  proxy = await startChangesProxy(fga.apiUrl);
});
afterEach(async () => {
  proxy.failing = false;
  await Promise.all(gates.splice(0).map((g) => g.stop()));
});
afterAll(async () => {
  await proxy?.close();
  await fga?.stop();
});

/** A gate on the store's latest model, through the proxy, whose answers only events can end early. */
function gate(overrides: Partial<ConstructorParameters<typeof OpenFgaCanView>[0]> = {}): OpenFgaCanView {
  const g = new OpenFgaCanView({
    apiUrl: proxy.url,
    store: { id: fga.storeId },
    timeoutMs: 2_000,
    allowTtlMs: 60_000,
    denyTtlMs: 60_000,
    maxEntries: 1000,
    changesPollMs: POLL_MS,
    safetyNetTtlMs: 60_000,
    ...overrides,
  });
  gates.push(g);
  return g;
}

async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

const synced = (g: OpenFgaCanView) => () => g.feedStates().some((s) => s.synced);

/** Milliseconds from now until the gate's answer for (user, cluster) becomes `expected`. */
async function msUntilAnswer(g: OpenFgaCanView, user: string, cluster: string, expected: boolean, timeoutMs = 5_000): Promise<number> {
  const started = performance.now();
  await until(async () => (await g.canView(user, cluster)) === expected, timeoutMs);
  return performance.now() - started;
}

/** Counts the gate's Check calls to OpenFGA while `work` runs. */
async function checksDuring(work: () => Promise<unknown>): Promise<number> {
  let calls = 0;
  const onCall = (m: unknown) => {
    if ((m as DependencyCall).dependency === "openfga") calls++;
  };
  subscribe("portcullis:dependency", onCall);
  try {
    await work();
    return calls;
  } finally {
    unsubscribe("portcullis:dependency", onCall);
  }
}

let n = 0;
/** A fresh organization, cluster and member for one test. */
async function world(): Promise<{ org: string; cluster: string; user: string }> {
  n += 1;
  const org = `org-changes-${n}`;
  const cluster = `cluster-changes-${n}`;
  const user = `9a9a9a9a-0000-4000-8000-0000000001${String(n).padStart(2, "0")}`;
  await client.write({
    writes: [
      { user: `organization:${org}`, relation: "owner", object: `cluster:${cluster}` },
      { user: `user:${user}`, relation: "viewer", object: `organization:${org}` },
    ],
  });
  return { org, cluster, user };
}

describe("OpenFGA can_view follows ReadChanges (real server)", () => {
  it("a deleted viewer tuple ends the cached allow within a poll, though the allow TTL and the safety net are 60 s", async () => {
    const { org, cluster, user } = await world();
    const g = gate();
    await until(synced(g));
    expect(await g.canView(user, cluster)).toBe(true);
    // Served from cache: the feed proves it current.
    expect(await checksDuring(() => g.canView(user, cluster))).toBe(0);
    await client.write({ deletes: [{ user: `user:${user}`, relation: "viewer", object: `organization:${org}` }] });
    const ms = await msUntilAnswer(g, user, cluster, false);
    expect(ms).toBeLessThan(WITHIN_MS);
  });

  it("an indirect tuple (the organization's ownership of the cluster) ends every member's cached allow", async () => {
    const { org, cluster, user } = await world();
    const admin = "9a9a9a9a-0000-4000-8000-0000000002aa";
    await client.write({ writes: [{ user: `user:${admin}`, relation: "admin", object: `organization:${org}` }] });
    const g = gate();
    await until(synced(g));
    expect(await g.canView(user, cluster)).toBe(true);
    expect(await g.canView(admin, cluster)).toBe(true);
    await client.write({ deletes: [{ user: `organization:${org}`, relation: "owner", object: `cluster:${cluster}` }] });
    const ms = await msUntilAnswer(g, user, cluster, false);
    expect(ms).toBeLessThan(WITHIN_MS);
    expect(await g.canView(admin, cluster)).toBe(false);
  });

  it("a new model of the store drops the answers of a gate on the latest model", async () => {
    const { cluster, user } = await world();
    const g = gate();
    await until(synced(g));
    expect(await g.canView(user, cluster)).toBe(true);
    await client.writeAuthorizationModel(transformer.transformDSLToJSONObject(readFileSync(MODEL, "utf8")) as Parameters<OpenFgaClient["writeAuthorizationModel"]>[0]);
    await until(async () => (await checksDuring(() => g.canView(user, cluster))) === 1, WITHIN_MS);
  });

  it("with /changes failing from the start, an answer lives for allowTtlMs only", async () => {
    const { org, cluster, user } = await world();
    proxy.failing = true;
    const g = gate({ allowTtlMs: 500 });
    await new Promise((r) => setTimeout(r, 3 * POLL_MS));
    expect(g.feedStates()).toMatchObject([{ synced: false }]);
    const asked = performance.now();
    expect(await g.canView(user, cluster)).toBe(true);
    await client.write({ deletes: [{ user: `user:${user}`, relation: "viewer", object: `organization:${org}` }] });
    await msUntilAnswer(g, user, cluster, false);
    // The allow lived for its TTL from when it was asked, and no longer.
    expect(performance.now() - asked).toBeLessThan(500 + 400);
  });

  it("with /changes failing after it synced, the proof stops and answers fall back to allowTtlMs", async () => {
    const { org, cluster, user } = await world();
    const g = gate({ allowTtlMs: 500 });
    await until(synced(g));
    expect(await g.canView(user, cluster)).toBe(true);
    // Healthy: kept past allowTtlMs without asking OpenFGA again.
    await new Promise((r) => setTimeout(r, 800));
    expect(await checksDuring(() => g.canView(user, cluster))).toBe(0);
    proxy.failing = true;
    await until(() => !synced(g)());
    await client.write({ deletes: [{ user: `user:${user}`, relation: "viewer", object: `organization:${org}` }] });
    const ms = await msUntilAnswer(g, user, cluster, false);
    expect(ms).toBeLessThan(500 + POLL_MS + 300);
  });
});

describe("OpenFGA with its own Check cache (--check-query-cache-enabled, 60 s)", () => {
  let cached: OpenFGA;
  let writer: OpenFgaClient;
  beforeAll(async () => {
    cached = await startOpenFGA({ modelFile: MODEL, args: ["--check-query-cache-enabled", "--check-query-cache-ttl=60s"] });
    writer = new OpenFgaClient({ apiUrl: cached.apiUrl, storeId: cached.storeId });
  });
  afterAll(async () => cached?.stop());

  it("the Check asked again after a change is not answered from OpenFGA's cache", async () => {
    const org = "org-cached";
    const cluster = "cluster-cached";
    const user = "9a9a9a9a-0000-4000-8000-0000000003aa";
    await writer.write({
      writes: [
        { user: `organization:${org}`, relation: "owner", object: `cluster:${cluster}` },
        { user: `user:${user}`, relation: "viewer", object: `organization:${org}` },
      ],
    });
    const g = gate({ apiUrl: cached.apiUrl, store: { id: cached.storeId } });
    await until(synced(g));
    expect(await g.canView(user, cluster)).toBe(true);
    // What a gate without the change feed would ask: OpenFGA's cache holds the allow now.
    expect((await writer.check({ user: `user:${user}`, relation: "can_view", object: `cluster:${cluster}` })).allowed).toBe(true);
    await writer.write({ deletes: [{ user: `user:${user}`, relation: "viewer", object: `organization:${org}` }] });
    expect((await writer.check({ user: `user:${user}`, relation: "can_view", object: `cluster:${cluster}` })).allowed).toBe(true);
    const ms = await msUntilAnswer(g, user, cluster, false);
    expect(ms).toBeLessThan(WITHIN_MS);
  });
});

describe("a store named, re-created under its name", () => {
  it("the feed follows the id the gate asks now: the new store is read and synced, the old one no longer followed", async () => {
    const admin = new OpenFgaClient({ apiUrl: fga.apiUrl });
    const model = transformer.transformDSLToJSONObject(readFileSync(MODEL, "utf8")) as Parameters<OpenFgaClient["writeAuthorizationModel"]>[0];
    const seed = async (members: string[]): Promise<string> => {
      const { id } = await admin.createStore({ name: "changes-by-name" });
      const store = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: id });
      await store.writeAuthorizationModel(model);
      await store.write({
        writes: [
          { user: "organization:acme", relation: "owner", object: "cluster:named" },
          ...members.map((m) => ({ user: `user:${m}`, relation: "viewer", object: "organization:acme" })),
        ],
      });
      return id;
    };
    const member = "9a9a9a9a-0000-4000-8000-0000000004aa";
    const first = await seed([member]);
    const g = gate({ store: { name: "changes-by-name" }, storeLookup: { minIntervalMs: 100, refreshMs: 300 } });
    expect(await g.canView(member, "named")).toBe(true);
    await until(() => g.feedStates().some((s) => s.scope === first && s.synced));
    await admin.deleteStore({ storeId: first });
    const second = await seed([]);
    await until(async () => (await g.canView(member, "named").catch(() => undefined)) === false);
    await until(() => g.feedStates().some((s) => s.scope === second && s.synced));
    expect(g.feedStates().map((s) => s.scope)).toEqual([second]);
  });
});
