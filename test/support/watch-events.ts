/**
 * Watch histories for order-independence properties: a generated sequence of what a watch can hand
 * a store (an object added or changed, an object deleted, a fresh list after a restart), played
 * into an IndexStore exactly as ListWatch plays it — a deletion only of an object it holds, a
 * fresh list as clear() then every object the server holds, in the order the list gives — and the
 * set of objects the server holds at the end, to compare the store's answers with an oracle's and
 * with a store that heard the same objects in another order.
 */
import fc from "fast-check";
import type { KubernetesObject } from "#kubernetes-client";
import type { IndexStore } from "../../src/kube-watch/watched-index.ts";
import { watchKey } from "../../src/kube-watch/sole-claims.ts";

export type WatchEvent<T> =
  | { readonly kind: "put"; readonly obj: T }
  | { readonly kind: "remove"; readonly key: string }
  /** A restart: clear(), then the objects held now, in the order `seed` shuffles them to. */
  | { readonly kind: "relist"; readonly seed: number };

export function watchEvents<T extends KubernetesObject>(objects: fc.Arbitrary<T>, keys: readonly string[], maxLength = 24): fc.Arbitrary<Array<WatchEvent<T>>> {
  return fc.array(
    fc.oneof(
      { weight: 5, arbitrary: objects.map((obj) => ({ kind: "put", obj }) as const) },
      { weight: 2, arbitrary: fc.constantFrom(...keys).map((key) => ({ kind: "remove", key }) as const) },
      { weight: 1, arbitrary: fc.nat().map((seed) => ({ kind: "relist", seed }) as const) },
    ),
    { maxLength },
  );
}

/** Plays the events into the store; returns the objects the server holds at the end, by watch key. */
export function replay<T extends KubernetesObject>(store: IndexStore<T>, events: ReadonlyArray<WatchEvent<T>>): Map<string, T> {
  const held = new Map<string, T>();
  for (const event of events) {
    switch (event.kind) {
      case "put":
        held.set(watchKey(event.obj.metadata), event.obj);
        store.put(event.obj);
        break;
      case "remove": {
        const obj = held.get(event.key);
        if (obj === undefined) break;
        held.delete(event.key);
        store.remove(obj);
        break;
      }
      case "relist":
        store.clear();
        for (const obj of shuffled([...held.values()], event.seed)) store.put(obj);
        break;
    }
  }
  return held;
}

/** A fresh store that listed the objects once, in the order `seed` gives: another replica, started later. */
export function listedOnce<T extends KubernetesObject, S extends IndexStore<T>>(store: S, objects: Iterable<T>, seed: number): S {
  store.clear();
  for (const obj of shuffled([...objects], seed)) store.put(obj);
  return store;
}

/** A deterministic shuffle (Fisher–Yates over a small LCG). */
export function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let state = (seed >>> 0) || 1;
  for (let i = out.length - 1; i > 0; i--) {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
