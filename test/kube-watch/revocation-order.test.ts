/**
 * Order never loses a revocation nor changes which entry is reported. Every Revocation object the
 * server holds is its own entry — two of one name in two namespaces (a namespaced CRD; the shipped
 * one is cluster-scoped) are two, and deleting one leaves the other in force — and a subject two
 * entries cover is reported as revoked by the one with the least name (the log line, the metric's
 * scope, can-i), on every replica, whatever order the watch or the list brought them in.
 */
import fc from "fast-check";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { covers, type RevocationSubject, revocationOf } from "../../src/kube-watch/revocations.ts";
import { RevocationStore } from "../../src/kube-watch/revocation-index.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";
import { listedOnce, replay, watchEvents } from "../support/watch-events.ts";

type Raw = Parameters<RevocationStore["put"]>[0];

const logger = pino({ level: "silent" });
const NAMES = ["inc-1", "inc-2", "zz-inc"];
const NAMESPACES = ["", "team-a", "team-b"];
const KEYS = NAMESPACES.flatMap((ns) => NAMES.map((name) => (ns === "" ? name : `${ns}/${name}`)));
const SPECS = [
  { installation: { id: ids.installation } },
  { installation: { id: ids.otherInstallation } },
  { plugin: { name: "cert-manager" } },
  { plugin: { name: "cert-manager", version: "1.5.0" } },
  { user: { id: ids.user } },
  // Not an entry (a CRD installed without its validation): left out, and so is the name's previous version.
  { user: { id: "not-a-uuid" } },
];
const SUBJECTS: RevocationSubject[] = [
  { installationId: ids.installation, pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH, userId: ids.user },
  { installationId: ids.otherInstallation, pluginName: "cert-manager", pluginVersion: "1.5.0", definitionHash: PINNED_HASH, userId: ids.otherUser },
  { installationId: ids.otherInstallation, pluginName: "grafana", pluginVersion: "1.0.0", definitionHash: PINNED_HASH },
];

function raw(name: string, spec: Record<string, unknown>, namespace = ""): Raw {
  return { apiVersion: "portcullis.fundament.io/v1alpha1", kind: "Revocation", metadata: { name, ...(namespace === "" ? {} : { namespace }) }, spec } as Raw;
}

const revocations = fc
  .record({ name: fc.constantFrom(...NAMES), namespace: fc.constantFrom(...NAMESPACES), spec: fc.constantFrom(...SPECS) })
  .map(({ name, namespace, spec }) => raw(name, spec, namespace));

/** The entry each subject is refused by, read off the objects held: the covering one with the least name. */
function oracle(held: ReadonlyMap<string, Raw>): Array<string | undefined> {
  const entries = [...held.values()].flatMap((obj) => {
    const entry = revocationOf(obj);
    return "invalid" in entry ? [] : [entry];
  });
  return SUBJECTS.map((subject) => entries.filter((r) => covers(r.target, subject)).map((r) => r.name).sort()[0]);
}

const answers = (store: RevocationStore) => SUBJECTS.map((subject) => store.set.match(subject)?.name);

describe("RevocationStore: order", () => {
  it("keeps two objects of one name in two namespaces as two entries: deleting one leaves the other in force, in either order", () => {
    const a = raw("inc-1", { installation: { id: ids.installation } }, "team-a");
    const b = raw("inc-1", { user: { id: ids.otherUser } }, "team-b");
    for (const [first, second] of [[a, b], [b, a]] as const) {
      const store = new RevocationStore(logger);
      store.put(first);
      store.put(second);
      expect(answers(store).slice(0, 2)).toEqual(["team-a/inc-1", "team-b/inc-1"]);
      store.remove(b);
      expect(answers(store).slice(0, 2)).toEqual(["team-a/inc-1", undefined]);
    }
  });

  it("reports the covering entry with the least name, whichever arrived first", () => {
    const byUser = raw("inc-2", { user: { id: ids.user } });
    const byInstallation = raw("inc-1", { installation: { id: ids.installation } });
    for (const order of [[byUser, byInstallation], [byInstallation, byUser]]) {
      const store = new RevocationStore(logger);
      for (const obj of order) store.put(obj);
      expect(store.set.match(SUBJECTS[0]!)).toEqual({ name: "inc-1", target: { scope: "installation", installationId: ids.installation } });
    }
  });

  it("any watch history refuses exactly what the objects held revoke, by the same entry as a replica that listed them once in any order (10,000 histories)", () => {
    fc.assert(
      fc.property(watchEvents(revocations, KEYS), fc.nat(), (events, seed) => {
        const heard = new RevocationStore(logger);
        const held = replay(heard, events);
        const listed = listedOnce(new RevocationStore(logger), held.values(), seed);
        const expected = oracle(held);
        expect(answers(heard)).toEqual(expected);
        expect(answers(listed)).toEqual(expected);
      }),
      { numRuns: 10_000 },
    );
  });
});
