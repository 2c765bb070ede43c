/**
 * The OpenFGA gate against a real OpenFGA server running the committed Fundament model: the
 * relation semantics, allow/deny TTLs, coalescing of concurrent misses, and fail-closed on outage.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { resolve } from "node:path";
import { OpenFgaClient } from "@openfga/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { OpenFgaCanView } from "../../src/fga/can-view.ts";
import type { DependencyCall } from "../../src/metrics/events.ts";
import { startOpenFGA, type OpenFGA } from "../harness/index.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const MODEL = resolve(import.meta.dirname, "../../deploy/openfga/model.fga");
const org = "org-acme";
const admin = "9a9a9a9a-0000-4000-8000-000000000001";
const stranger = "9a9a9a9a-0000-4000-8000-000000000002";

let fga: OpenFGA;
let client: OpenFgaClient;

beforeAll(async () => {
  fga = await startOpenFGA({ modelFile: MODEL });
  client = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.modelId });
  await client.write({
    writes: [
      { user: `organization:${org}`, relation: "owner", object: `cluster:${ids.cluster}` },
      { user: `user:${ids.user}`, relation: "viewer", object: `organization:${org}` },
      { user: `user:${admin}`, relation: "admin", object: `organization:${org}` },
    ],
  });
});
afterAll(async () => fga?.stop());

function gate(overrides: Partial<ConstructorParameters<typeof OpenFgaCanView>[0]> = {}) {
  return new OpenFgaCanView({
    apiUrl: fga.apiUrl,
    store: { id: fga.storeId },
    authorizationModelId: fga.modelId,
    timeoutMs: 2_000,
    allowTtlMs: 400,
    denyTtlMs: 200,
    maxEntries: 1000,
    ...overrides,
  });
}

/** Counts OpenFGA calls made while `work` runs. */
async function countingCalls<T>(work: () => Promise<T>): Promise<{ value: T; calls: number }> {
  let calls = 0;
  const onCall = (m: unknown) => {
    if ((m as DependencyCall).dependency === "openfga") calls++;
  };
  subscribe("portcullis:dependency", onCall);
  try {
    return { value: await work(), calls };
  } finally {
    unsubscribe("portcullis:dependency", onCall);
  }
}

describe("OpenFGA can_view (real server, committed model)", () => {
  it.each([
    { name: "viewer of the owning organization", user: ids.user, cluster: ids.cluster, expected: true },
    { name: "admin of the owning organization (viewer includes admin)", user: admin, cluster: ids.cluster, expected: true },
    { name: "user with no membership", user: stranger, cluster: ids.cluster, expected: false },
    { name: "viewer, on a cluster of another organization", user: ids.user, cluster: ids.otherCluster, expected: false },
  ])("$name → $expected", async ({ user, cluster, expected }) => {
    expect(await gate().canView(user, cluster)).toBe(expected);
  });

  it("keeps an allow for the allow TTL, then follows a deleted tuple", async () => {
    const member = "9a9a9a9a-0000-4000-8000-000000000003";
    await client.write({ writes: [{ user: `user:${member}`, relation: "viewer", object: `organization:${org}` }] });
    const g = gate();
    expect(await g.canView(member, ids.cluster)).toBe(true);
    await client.write({ deletes: [{ user: `user:${member}`, relation: "viewer", object: `organization:${org}` }] });
    expect(await g.canView(member, ids.cluster)).toBe(true); // cached allow, inside the TTL
    await new Promise((r) => setTimeout(r, 450));
    expect(await g.canView(member, ids.cluster)).toBe(false);
  });

  it("keeps a deny only for the (shorter) deny TTL", async () => {
    const late = "9a9a9a9a-0000-4000-8000-000000000004";
    const g = gate({ allowTtlMs: 60_000, denyTtlMs: 150 });
    expect(await g.canView(late, ids.cluster)).toBe(false);
    await client.write({ writes: [{ user: `user:${late}`, relation: "viewer", object: `organization:${org}` }] });
    await new Promise((r) => setTimeout(r, 200));
    expect(await g.canView(late, ids.cluster)).toBe(true);
  });

  it("coalesces 100 concurrent identical cold checks into one OpenFGA call", async () => {
    const g = gate();
    const { value, calls } = await countingCalls(() => Promise.all(Array.from({ length: 100 }, () => g.canView(ids.user, ids.cluster))));
    expect(value.every((v) => v === true)).toBe(true);
    expect(calls).toBe(1);
  });

  it("turns an unreachable OpenFGA into DependencyUnavailable within the deadline, and caches no failure", async () => {
    const g = gate({ apiUrl: "http://127.0.0.1:1", timeoutMs: 300 });
    const started = Date.now();
    await expect(g.canView(ids.user, ids.cluster)).rejects.toBeInstanceOf(DependencyUnavailable);
    expect(Date.now() - started).toBeLessThan(1_000);
    const { calls } = await countingCalls(() => g.canView(ids.user, ids.cluster).catch(() => undefined));
    expect(calls).toBe(1);
  });

  it("answers plugin-proxy Checks over gRPC from the real OpenFGA", async () => {
    const world = new FakeWorld();
    const server = await startTestServer({ ...world, canView: gate() } as FakeWorld);
    try {
      const runtime = `/installations/${ids.installation}/runtime/`;
      const allowed = await server.check({ path: runtime, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "plugin-proxy" });
      expect(allowed).toMatchObject({ allowed: true });
      const denied = await server.check({ path: runtime, headers: { authorization: `Bearer ${await pluginToken({ sub: stranger })}` }, policy: "plugin-proxy" });
      expect(denied).toMatchObject({ allowed: false, http: 403, reason: "can-view-denied" });
    } finally {
      await server.stop();
    }
  });
});
