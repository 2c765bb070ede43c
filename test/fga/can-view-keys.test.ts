/**
 * The can_view cache keys (issue 47): a tag per store and per cluster, then the user id. Two Checks
 * share a key exactly when they are the same (store, user, cluster) — whatever a user, store or
 * cluster id holds, and across the tag tables' bound — and a store's prefix (what tuple-changes.ts
 * invalidates) selects exactly that store's keys.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CanViewKeys } from "../../src/fga/can-view.ts";

const STORE = "01JBENCHST0RE0000000000000";
const CLUSTER = "0e0e0e0e-0000-4000-8000-0000000000c1";
const USER = "9a9a9a9a-0000-4000-8000-000000000001";

const id = fc.constantFrom("", "a", "b", "a b", "b a", " ", "a ", " a", "0", "1 0", USER, CLUSTER, STORE);
const check = fc.record({ store: id, user: id, cluster: id });

describe("CanViewKeys", () => {
  it("holds the user id and a tag for the store and the cluster, not their ids", () => {
    const key = new CanViewKeys(100).key(STORE, USER, CLUSTER);
    expect(key).not.toContain(STORE);
    expect(key).not.toContain(CLUSTER);
    expect(key.endsWith(` ${USER}`)).toBe(true);
    expect(key.length).toBeLessThanOrEqual(USER.length + 6);
  });

  it("equal keys exactly for equal (store, user, cluster), a tag table bounded to 2 ids included (generated)", () => {
    fc.assert(
      fc.property(fc.constantFrom(2, 100), fc.array(check, { minLength: 2, maxLength: 30 }), (max, checks) => {
        const keys = new CanViewKeys(max);
        const asked = new Map<string, string>();
        for (const c of checks) {
          const key = keys.key(c.store, c.user, c.cluster);
          const same = JSON.stringify([c.store, c.user, c.cluster]);
          // A key, once made, never stands for another Check (a new tag may give one Check a second key).
          expect(asked.get(key) ?? same).toBe(same);
          asked.set(key, same);
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it("the same Check keeps its key while the tables hold its tags", () => {
    const keys = new CanViewKeys(100);
    expect(keys.key(STORE, USER, CLUSTER)).toBe(keys.key(STORE, USER, CLUSTER));
  });

  it("a store's prefix selects exactly that store's keys (generated)", () => {
    fc.assert(
      fc.property(fc.array(check, { minLength: 1, maxLength: 20 }), id, (checks, store) => {
        const keys = new CanViewKeys(100);
        const prefix = keys.storePrefix(store);
        for (const c of checks) expect(keys.key(c.store, c.user, c.cluster).startsWith(prefix)).toBe(c.store === store);
      }),
      { numRuns: 3_000 },
    );
  });
});
