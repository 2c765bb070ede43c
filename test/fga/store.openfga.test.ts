/**
 * `openfga.storeName` against a real OpenFGA: the store is found by name, and when it is deleted
 * and created again under the same name (what an OpenFGA with an in-memory datastore does when it
 * restarts and is re-seeded) the gate follows it to its new id without a restart — answering 503,
 * never an allow, while no store of that name exists. Lookups are coalesced and rate-limited.
 */
import { OpenFgaClient } from "@openfga/sdk";
import { transformer } from "@openfga/syntax-transformer";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { configSchema } from "../../src/config/schema.ts";
import { OpenFgaCanView } from "../../src/fga/can-view.ts";
import { idOfStoreNamed, OpenFgaStore } from "../../src/fga/store.ts";
import { MODEL_FILE } from "../e2e/fundament-world.ts";
import { startOpenFGA, type OpenFGA } from "../harness/index.ts";
import { ids } from "../support/tokens.ts";

const member = "9a9a9a9a-0000-4000-8000-00000000000a";
const newcomer = "9a9a9a9a-0000-4000-8000-00000000000b";
const model = transformer.transformDSLToJSONObject(readFileSync(MODEL_FILE, "utf8"));

let fga: OpenFGA;
let admin: OpenFgaClient;

beforeAll(async () => {
  fga = await startOpenFGA({ modelFile: MODEL_FILE, storeName: "unused-by-these-tests" });
  admin = new OpenFgaClient({ apiUrl: fga.apiUrl });
});
afterAll(async () => fga?.stop());

/** Creates a store named `name` with the committed model and `members` as viewers of the cluster's organization. */
async function seedStore(name: string, members: string[]): Promise<string> {
  const { id } = await admin.createStore({ name });
  const client = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: id });
  const { authorization_model_id: modelId } = await client.writeAuthorizationModel(model as Parameters<OpenFgaClient["writeAuthorizationModel"]>[0]);
  await new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: id, authorizationModelId: modelId }).write({
    writes: [
      { user: "organization:acme", relation: "owner", object: `cluster:${ids.cluster}` },
      ...members.map((m) => ({ user: `user:${m}`, relation: "viewer", object: "organization:acme" })),
    ],
  });
  return id;
}

/** Lookups at most every 200 ms, refreshed every second (production: 1 s and 10 s). */
function gateNamed(name: string): OpenFgaCanView {
  return new OpenFgaCanView({
    apiUrl: fga.apiUrl,
    store: { name },
    timeoutMs: 2_000,
    allowTtlMs: 60_000,
    denyTtlMs: 60_000,
    maxEntries: 100,
    storeLookup: { minIntervalMs: 200, refreshMs: 1_000 },
  });
}

describe("idOfStoreNamed", () => {
  const store = (id: string, name: string) => ({ id, name });
  it.each([
    { name: "exactly one store of the name", stores: [store("A", "fundament"), store("B", "other")], expected: "A" },
    { name: "none of the name", stores: [store("B", "other")], expected: DependencyUnavailable },
    { name: "no stores at all", stores: [], expected: DependencyUnavailable },
    { name: "two of the name: which one is meant is unknown", stores: [store("A", "fundament"), store("C", "fundament")], expected: DependencyUnavailable },
    { name: "a name that only differs in case is another name", stores: [store("A", "Fundament")], expected: DependencyUnavailable },
  ])("$name", ({ stores, expected }) => {
    if (typeof expected === "string") expect(idOfStoreNamed("fundament", stores)).toBe(expected);
    else expect(() => idOfStoreNamed("fundament", stores)).toThrow(expected);
  });
});

describe("openfga.storeName (real OpenFGA)", () => {
  it("is accepted by the configuration, exclusive with storeId and with a pinned model", () => {
    const parse = (openfga: Record<string, unknown>) =>
      configSchema.safeParse({ tokens: { secrets: [{ env: "S" }] }, openfga: { apiUrl: "http://openfga:8080", ...openfga } }).success;
    expect(parse({ storeName: "fundament" })).toBe(true);
    expect(parse({ storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" })).toBe(true);
    expect(parse({ storeName: "fundament", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" })).toBe(false);
    expect(parse({})).toBe(false);
    expect(parse({ storeName: "fundament", authorizationModelId: "01HVMMBCMGZNT3SED4Z17ECXCB" })).toBe(false);
    expect(parse({ storeName: "ab" })).toBe(false);
  });

  it("follows the store deleted and re-created under its name, without a restart; 503 while it is gone", { timeout: 30_000 }, async () => {
    const name = "recreated-store";
    const first = await seedStore(name, [member]);
    const gate = gateNamed(name);
    expect(await gate.canView(member, ids.cluster)).toBe(true);
    expect(await gate.canView(newcomer, ids.cluster)).toBe(false);

    await admin.deleteStore({ storeId: first });
    // OpenFGA still answers Checks on the deleted store's id; the name's refresh finds no store: 503 from then on.
    const uncached = "9a9a9a9a-0000-4000-8000-00000000000c";
    await vi.waitFor(() => expect(gate.canView(uncached, ids.cluster)).rejects.toBeInstanceOf(DependencyUnavailable), { timeout: 5_000, interval: 100 });
    await expect(gate.canView(uncached, ids.cluster)).rejects.toBeInstanceOf(DependencyUnavailable);

    // Re-seeded under a new id, where the newcomer is a member: the gate now reads that store.
    const second = await seedStore(name, [member, newcomer]);
    expect(second).not.toBe(first);
    await vi.waitFor(async () => expect(await gate.canView(newcomer, ids.cluster)).toBe(true), { timeout: 5_000, interval: 200 });
    expect(await gate.canView(member, ids.cluster)).toBe(true);
  });

  it("coalesces concurrent lookups into one ListStores and makes at most one per interval", { timeout: 20_000 }, async () => {
    const name = "coalesced-store";
    let lookups = 0;
    const client = new OpenFgaClient({ apiUrl: fga.apiUrl });
    const counting = { listStores: (...args: Parameters<OpenFgaClient["listStores"]>) => (lookups++, client.listStores(...args)) };
    // An interval well above a loaded machine's ListStores time, so "inside the interval" holds.
    const store = new OpenFgaStore({ name }, counting, { timeoutMs: 1_000, minIntervalMs: 1_500, refreshMs: 60_000 });

    // No store of that name yet: every caller gets a 503, from a single lookup.
    const missing = await Promise.allSettled(Array.from({ length: 50 }, () => store.id()));
    expect(missing.every((r) => r.status === "rejected" && r.reason instanceof DependencyUnavailable)).toBe(true);
    expect(lookups).toBe(1);
    // Inside the interval, no lookup at all.
    await expect(store.id()).rejects.toBeInstanceOf(DependencyUnavailable);
    expect(lookups).toBe(1);

    const id = await seedStore(name, []);
    await new Promise((r) => setTimeout(r, 1_550));
    const found = await Promise.all(Array.from({ length: 50 }, () => store.id()));
    expect(new Set(found)).toEqual(new Set([id]));
    expect(lookups).toBe(2);
    expect(store.current()).toBe(id);

    // forget() of an id that is no longer the resolved one changes nothing.
    store.forget("01HVMMBCMGZNT3SED4Z17ECXCA");
    expect(store.current()).toBe(id);
    store.forget(id);
    expect(store.current()).toBeUndefined();
  });

  it("two stores of the same name: 503, never a guess", async () => {
    const name = "twin-store";
    await seedStore(name, [member]);
    await seedStore(name, [member]);
    await expect(gateNamed(name).canView(member, ids.cluster)).rejects.toBeInstanceOf(DependencyUnavailable);
  });
});
