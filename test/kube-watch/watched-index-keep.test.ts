/**
 * What a WatchedIndex's ListWatch holds: the store's keep() of each object, never the whole object
 * the API server sent. Against the wire-level fake serving real-looking PluginInstallations
 * (managedFields, last-applied-configuration, conditions): the store gets kept objects from the
 * list and from ADDED, MODIFIED and DELETED events, and a relist after a 410 deletes what went away
 * with ListWatch's own cached copy — which is therefore the kept one. The list is read a page at a
 * time. And the Project index's projection gives the same compiled Project as the whole object.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileProject, keepProjectFields, type ProjectObject } from "../../src/konfidence/project-index.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { keepInstallationFields, PLUGIN_INSTALLATIONS } from "../../src/kube-watch/installation-index.ts";
import { type IndexStore, resolveWatchOptions, WatchedIndex } from "../../src/kube-watch/watched-index.ts";
import { PINNED_HASH } from "../support/tokens.ts";
import { type FakeInstallation, FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { appliedAndReconciled } from "../support/wire-fakes/realistic-objects.ts";
import { until } from "../support/wire-fakes/wired.ts";

type Installation = Parameters<typeof keepInstallationFields>[0];

const A = "0e0e0e0e-0000-4000-8000-00000000000a";
const B = "0e0e0e0e-0000-4000-8000-00000000000b";
const C = "0e0e0e0e-0000-4000-8000-00000000000c";
const D = "0e0e0e0e-0000-4000-8000-00000000000d";
const installed = (uid: string, name: string, more: Partial<FakeInstallation> = {}): FakeInstallation => ({
  uid,
  name,
  definitionHash: PINNED_HASH,
  extra: appliedAndReconciled({ name, definitionHash: PINNED_HASH }),
  ...more,
});

let dir: string;
let kube: FakeKubeApi;
let clusters: Clusters;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-keep-"));
  kube = await new FakeKubeApi().start();
  clusters = await Clusters.load([{ id: "c", kubeconfig: kube.writeKubeconfig(dir) }]);
});

afterAll(async () => {
  await clusters?.close();
  await kube?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The objects as the fake serves them, by uid, from its list. */
async function served(): Promise<Map<string, Installation>> {
  const res = await fetch(`${kube.url}/apis/plugins.fundament.io/v1/plugininstallations`, { headers: { authorization: `Bearer ${kube.bearer}` } });
  const items = ((await res.json()) as { items: Installation[] }).items;
  return new Map(items.map((item) => [item.metadata!.uid!, item]));
}

class RecordingStore implements IndexStore<Installation> {
  readonly puts: Installation[] = [];
  readonly removes: Installation[] = [];
  readonly keep: ((obj: Installation) => Installation) | undefined;

  constructor(keep: ((obj: Installation) => Installation) | undefined) {
    this.keep = keep;
  }

  get size(): number {
    return 0;
  }

  put(obj: Installation): void {
    this.puts.push(obj);
  }

  remove(obj: Installation): void {
    this.removes.push(obj);
  }

  clear(): void {}
}

/**
 * Lists A and B, adds C, modifies A, deletes C by a watch event, then deletes B and adds D
 * silently and has the watch end with a 410: ListWatch lists again, deletes B with the copy it
 * holds, and adds D.
 * Returns what the store was handed, and the objects as the fake served them.
 */
async function lifecycle(keep: ((obj: Installation) => Installation) | undefined) {
  for (const uid of [A, B, C, D]) kube.removeSilently(uid);
  kube.put(installed(A, "a"));
  kube.put(installed(B, "b"));
  const store = new RecordingStore(keep);
  const index = new WatchedIndex(clusters.get("c")!, PLUGIN_INSTALLATIONS, store, { index: "test", objects: "objects" }, resolveWatchOptions({ logger: pino({ level: "silent" }) }));
  await index.start();
  try {
    expect(index.synced).toBe(true);
    await until(() => kube.watchers > 0, 5_000, "the watch");
    const listed = await served();
    kube.put(installed(C, "c"));
    await until(() => store.puts.length === 3, 5_000, "C added");
    kube.put(installed(A, "a", { phase: "Terminating" }));
    await until(() => store.puts.length === 4, 5_000, "A modified");
    const watched = await served();
    kube.remove(C);
    await until(() => store.removes.length === 1, 5_000, "C deleted");
    kube.removeSilently(B);
    kube.putSilently(installed(D, "d"));
    kube.compact();
    await until(() => store.removes.length === 2, 5_000, "B deleted by the relist");
    expect(index.synced).toBe(true);
    return { store, listed, watched };
  } finally {
    await index.stop();
  }
}

describe("what ListWatch holds", () => {
  it("the kept objects only: from the list, from every watch event, and ListWatch's own copy a relist deletes with", async () => {
    const { store, listed, watched } = await lifecycle(keepInstallationFields);
    // The API server's objects carry what the store never reads…
    expect(listed.get(A)!.metadata).toHaveProperty("managedFields");
    expect(listed.get(A)!.metadata).toHaveProperty(["annotations", "kubectl.kubernetes.io/last-applied-configuration"]);
    // …and none of it reaches the store or stays in ListWatch's cache.
    const [putA, putB, putC, putA2] = store.puts;
    expect([putA, putB]).toStrictEqual([keepInstallationFields(listed.get(A)!), keepInstallationFields(listed.get(B)!)]);
    expect(putC).toStrictEqual(keepInstallationFields(watched.get(C)!));
    expect(putA2).toStrictEqual(keepInstallationFields(watched.get(A)!));
    expect(putA2!.status).toStrictEqual({ phase: "Terminating" });
    const [deletedC, deletedB] = store.removes;
    expect(deletedC).toStrictEqual(keepInstallationFields(watched.get(C)!));
    // B left while nobody watched: the relist found it missing and handed over the copy ListWatch held.
    expect(deletedB).toStrictEqual(keepInstallationFields(listed.get(B)!));
    // D arrived while nobody watched: the relist adds it, kept as well.
    expect(store.puts.at(-1)?.metadata?.uid).toBe(D);
    expect(store.puts.at(-1)).not.toHaveProperty(["metadata", "managedFields"]);
    for (const obj of [...store.puts, ...store.removes]) expect(Object.keys(obj).sort()).toStrictEqual(["metadata", "spec", "status"]);
  });

  it("a store without keep() gets, and ListWatch holds, the whole object", async () => {
    const { store, listed } = await lifecycle(undefined);
    expect(store.removes[1]).toStrictEqual(listed.get(B));
    expect(store.removes[1]).toHaveProperty(["metadata", "managedFields"]);
  });
});

describe("the list, a page at a time", () => {
  it("asks for pages of 500 and follows the continue tokens to the end; every object is kept, each once", async () => {
    for (const uid of [A, B, C, D]) kube.removeSilently(uid);
    const uid = (k: number) => `0e0e0e0e-0000-4000-8000-${k.toString(16).padStart(12, "0")}`;
    for (let k = 0; k < 1_234; k++) kube.putSilently(installed(uid(k), `p-${k}`));
    kube.requests.length = 0;
    const store = new RecordingStore(keepInstallationFields);
    const index = new WatchedIndex(clusters.get("c")!, PLUGIN_INSTALLATIONS, store, { index: "test", objects: "objects" }, resolveWatchOptions({ logger: pino({ level: "silent" }) }));
    await index.start();
    try {
      expect(index.synced).toBe(true);
      const lists = kube.requests.filter((r) => r.method === "GET" && !r.url.includes("watch=true")).map((r) => new URL(r.url, "http://fake").searchParams);
      expect(lists.map((q) => [q.get("limit"), q.get("continue")])).toStrictEqual([
        ["500", null],
        ["500", "500"],
        ["500", "1000"],
      ]);
      expect(new Set(store.puts.map((obj) => obj.metadata!.uid)).size).toBe(1_234);
      expect(store.puts).toHaveLength(1_234);
      for (const obj of store.puts) expect(obj.metadata).not.toHaveProperty("managedFields");
    } finally {
      await index.stop();
      for (let k = 0; k < 1_234; k++) kube.removeSilently(uid(k));
    }
  });
});

describe("keepProjectFields", () => {
  const trusts = () => true;
  const value = fc.oneof(fc.anything(), fc.constant(null), fc.constant(undefined));
  const subject = fc.oneof(
    fc.record({ session: fc.record({ memberOf: fc.array(fc.string()) }) }),
    fc.record({ jwks: fc.record({ endpoint: fc.webUrl(), audience: fc.string(), claims: fc.dictionary(fc.string(), fc.string()) }) }),
    value,
  );
  const roleBindings = fc.oneof(fc.dictionary(fc.string(), fc.oneof(fc.array(subject), value)), value);
  const withExtra = <T>(arb: fc.Arbitrary<T>) => fc.tuple(arb, fc.dictionary(fc.string(), fc.anything())).map(([a, extra]) => (typeof a === "object" && a !== null ? { ...extra, ...a } : a));
  const projectObject = withExtra(
    fc.record(
      {
        metadata: fc.oneof(withExtra(fc.record({ name: fc.oneof(fc.string(), value), resourceVersion: fc.nat().map(String), managedFields: fc.array(fc.object()) }, { requiredKeys: [] })), value),
        spec: fc.oneof(withExtra(fc.record({ roleBindings, namespace: fc.string() }, { requiredKeys: [] })), value),
        status: fc.oneof(fc.record({ namespace: fc.string(), conditions: fc.array(fc.object()) }), value),
      },
      { requiredKeys: [] },
    ),
  );

  it("property: any Project compiles the same through the projection, with the same ListWatch key", () => {
    fc.assert(
      fc.property(projectObject, (obj) => {
        const raw = obj as ProjectObject;
        const kept = keepProjectFields(raw);
        expect(compileProject(kept, trusts)).toEqual(compileProject(raw, trusts));
        expect(kept.metadata?.name).toBe(raw.metadata?.name);
        expect(kept.metadata?.resourceVersion).toBe(raw.metadata?.resourceVersion);
        expect(kept).not.toHaveProperty("status");
        expect(kept.metadata ?? {}).not.toHaveProperty("managedFields");
      }),
      { numRuns: 1_000 },
    );
  });
});
