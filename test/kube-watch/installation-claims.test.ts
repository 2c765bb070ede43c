/**
 * Order never decides which PluginInstallation a uid or a name resolves to. The index serves an
 * installation only while no other object claims its uid or its name; two objects under one name
 * (a namespaced CRD: the shipped one is cluster-scoped) or one uid are served by neither, on every
 * replica, until one is gone. A watch history of any shape gives the answers an oracle reads off
 * the objects the server holds, and so does a replica that listed them once in another order.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type InstallationClaim, installationOf, InstallationStore } from "../../src/kube-watch/installation-index.ts";
import type { ContestedClaim } from "../../src/kube-watch/sole-claims.ts";
import type { Installation } from "../../src/ports/policy-ports.ts";
import { PINNED_HASH } from "../support/tokens.ts";
import { listedOnce, replay, watchEvents } from "../support/watch-events.ts";

type Raw = Parameters<typeof installationOf>[0];

const UIDS = ["0e0e0e0e-0000-4000-8000-00000000000a", "0e0e0e0e-0000-4000-8000-00000000000b", "0e0e0e0e-0000-4000-8000-00000000000c"];
const NAMES = ["cert-manager", "grafana"];
/** "" is the cluster-scoped CRD's; the others appear only where the CRD is namespaced. */
const NAMESPACES = ["", "team-a", "team-b"];
const KEYS = NAMESPACES.flatMap((ns) => NAMES.map((name) => (ns === "" ? name : `${ns}/${name}`)));

function raw(name: string, uid: string, namespace = "", version = "1.4.0"): Raw {
  return {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name, uid, ...(namespace === "" ? {} : { namespace }) },
    spec: { organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03", definitionRef: { pluginName: name, pluginVersion: version, definitionHash: PINNED_HASH } },
    status: { phase: "Running" },
  };
}

const installations = fc
  .record({ name: fc.constantFrom(...NAMES), uid: fc.constantFrom(...UIDS), namespace: fc.constantFrom(...NAMESPACES), version: fc.constantFrom("1.4.0", "1.5.0") })
  .map(({ name, uid, namespace, version }) => raw(name, uid, namespace, version));

/** What the objects the server holds say, whatever order they came in: the sole claimant of both its uid and its name. */
function oracle(held: ReadonlyMap<string, Raw>): { byUid(uid: string): Installation | undefined; byName(name: string): Installation | undefined } {
  const all = [...held.values()].map((obj) => installationOf(obj)!);
  const sole = (found: Installation[]) => {
    if (found.length !== 1) return undefined;
    const [only] = found;
    return all.filter((i) => i.uid === only!.uid).length === 1 && all.filter((i) => i.name === only!.name).length === 1 ? only : undefined;
  };
  return { byUid: (uid) => sole(all.filter((i) => i.uid === uid)), byName: (name) => sole(all.filter((i) => i.name === name)) };
}

function answers(store: InstallationStore): unknown {
  return { byUid: UIDS.map((uid) => store.get(uid)), byName: NAMES.map((name) => store.named(name)) };
}

describe("InstallationStore: a uid or name claimed by more than one object", () => {
  it("serves neither of two installations under one name (two namespaces), in either order, and the other once one goes", () => {
    for (const order of [
      [raw("cert-manager", UIDS[0]!, "team-a"), raw("cert-manager", UIDS[1]!, "team-b")],
      [raw("cert-manager", UIDS[1]!, "team-b"), raw("cert-manager", UIDS[0]!, "team-a")],
    ]) {
      const contests: Array<[InstallationClaim, ContestedClaim]> = [];
      const store = new InstallationStore((claim, contest) => contests.push([claim, contest]));
      for (const obj of order) store.put(obj);
      expect([store.get(UIDS[0]!), store.get(UIDS[1]!), store.named("cert-manager")]).toEqual([undefined, undefined, undefined]);
      expect(store.contested).toBe(1);
      expect(contests).toEqual([["name", { value: "cert-manager", objects: ["team-a/cert-manager", "team-b/cert-manager"] }]]);
      store.remove(order[1]!);
      expect(store.get(installationOf(order[0]!)!.uid)?.name).toBe("cert-manager");
      expect(store.contested).toBe(0);
    }
  });

  it("serves neither of two objects claiming one uid", () => {
    const store = new InstallationStore();
    store.put(raw("cert-manager", UIDS[0]!));
    store.put(raw("grafana", UIDS[0]!));
    expect([store.get(UIDS[0]!), store.named("cert-manager"), store.named("grafana")]).toEqual([undefined, undefined, undefined]);
    store.remove(raw("grafana", UIDS[0]!));
    expect(store.get(UIDS[0]!)?.name).toBe("cert-manager");
  });

  it("a reinstall under the same name (an update of its key with a new uid) drops the old uid, contesting nothing", () => {
    const store = new InstallationStore();
    store.put(raw("cert-manager", UIDS[0]!));
    store.put(raw("cert-manager", UIDS[1]!));
    expect([store.get(UIDS[0]!), store.get(UIDS[1]!)?.uid, store.contested, store.size]).toEqual([undefined, UIDS[1], 0, 1]);
  });

  it("any watch history gives the answers the objects held say, and so does a replica that listed them once in any order (10,000 histories)", () => {
    fc.assert(
      fc.property(watchEvents(installations, KEYS), fc.nat(), (events, seed) => {
        const heard = new InstallationStore();
        const held = replay(heard, events);
        const listed = listedOnce(new InstallationStore(), held.values(), seed);
        const expected = oracle(held);
        const wanted = { byUid: UIDS.map((uid) => expected.byUid(uid)), byName: NAMES.map((name) => expected.byName(name)) };
        expect(answers(heard)).toEqual(wanted);
        expect(answers(listed)).toEqual(wanted);
        // Every uid and name more than one object held claims, counted once: what portcullis_index_conflicts shows.
        const all = [...held.values()].map((obj) => installationOf(obj)!);
        const contested = [...UIDS.map((uid) => all.filter((i) => i.uid === uid)), ...NAMES.map((name) => all.filter((i) => i.name === name))].filter((c) => c.length > 1).length;
        expect([heard.contested, listed.contested]).toEqual([contested, contested]);
      }),
      { numRuns: 10_000 },
    );
  });
});
