/**
 * Issue 42: which Secret serves a cluster id must not depend on the order or timing of the events a
 * replica sees. A property over generated histories: three replicas (independent RegistryViews) each
 * see their own sequence of puts, changes, deletions and fresh lists (some broken off) of four
 * Secrets over two cluster ids and a static one, then converge on the same final set of Secrets —
 * by watch events in their own order, or by a fresh list in their own order (a replica that starts
 * now). After it every replica serves the same clusters, and exactly the pure expectation: each
 * non-static id claimed by one valid Secret, served by that Secret; an id claimed by two or more,
 * by none. At every step before that, a served id has exactly one claimant among the Secrets the
 * replica knows of: a second claimant never sees the id served by anyone, however briefly.
 * The same against a real kube-apiserver: cluster-registry.kube.test.ts; as a real process:
 * test/e2e/cluster-registry.test.ts.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type FleetChange, RegistryView } from "../../src/kube-watch/cluster-registry.ts";
import type { ClusterCredentials } from "../../src/kube-fleet/clusters.ts";

const X = "0b7c9a4e-6a37-4d2b-9e4f-0c1a2b3c4d5e";
const Y = "5f0e1d2c-3b4a-4968-8776-655443322110";
const STATIC = "11111111-2222-4333-8444-555555555555";
const isStatic = (id: string) => id === STATIC;

/** The real Secret sorts after the attacker's: a list by name meets `aaa-…` first. */
const SECRETS = ["ns/aaa-cluster-prod-1", "ns/cluster-prod-1", "ns/b", "ns/c"] as const;

const encode = (fields: Record<string, string>) => Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, Buffer.from(v).toString("base64")]));

/** What a Secret may hold: a claim on X, Y or the static id (two servers and credentials each), or an invalid one naming X. */
const VARIANTS: ReadonlyArray<{ readonly data: Record<string, string>; readonly claims?: ClusterCredentials }> = [
  ...[X, Y, STATIC].flatMap((id) =>
    [1, 2].map((n) => {
      const server = `https://10.0.0.${n}:6443`;
      const token = `token-${n}`;
      return { data: encode({ clusterId: id, server, token }), claims: { id, server, credential: { token } } };
    }),
  ),
  { data: encode({ clusterId: X, server: "http://10.0.0.9:6443", token: "token-9" }) },
];

type Op =
  | { readonly put: readonly [secret: number, variant: number] }
  | { readonly remove: number }
  /** A fresh list naming these Secrets; `completes: false` — the watch broke before it synced. */
  | { readonly relist: ReadonlyArray<readonly [secret: number, variant: number]>; readonly completes: boolean };

const secretIndex = fc.nat({ max: SECRETS.length - 1 });
const variantIndex = fc.nat({ max: VARIANTS.length - 1 });
const listed = fc.uniqueArray(fc.tuple(secretIndex, variantIndex), { selector: ([s]) => s, maxLength: SECRETS.length });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(secretIndex, variantIndex).map((put) => ({ put })) },
  { weight: 2, arbitrary: secretIndex.map((remove) => ({ remove })) },
  { weight: 2, arbitrary: fc.record({ relist: listed, completes: fc.boolean() }) },
);

interface Replica {
  /** Its own history: started at another time, saw other events, lists broken off. */
  readonly history: readonly Op[];
  /** How it catches up on the final Secrets: its watch's events, or a fresh list (forced when a list is open). */
  readonly byFreshList: boolean;
  /** The order it hears of each Secret in while catching up. */
  readonly order: readonly number[];
}

const replica: fc.Arbitrary<Replica> = fc.record({
  history: fc.array(op, { maxLength: 10 }),
  byFreshList: fc.boolean(),
  order: fc.shuffledSubarray([0, 1, 2, 3], { minLength: SECRETS.length, maxLength: SECRETS.length }),
});

/** The Secrets that exist in the end: each one's variant, or absent. */
const finalSecrets = fc.array(fc.option(variantIndex, { nil: undefined }), { minLength: SECRETS.length, maxLength: SECRETS.length });

type Served = Map<string, { secret: string; cluster: ClusterCredentials }>;

/** The oracle: each non-static id with exactly one valid claimant among `secrets`, served by it. */
function expectedServed(secrets: ReadonlyMap<string, number>): Served {
  const byId = new Map<string, Array<{ secret: string; cluster: ClusterCredentials }>>();
  for (const [secret, variant] of secrets) {
    const cluster = VARIANTS[variant]!.claims;
    if (cluster === undefined || isStatic(cluster.id)) continue;
    byId.set(cluster.id, [...(byId.get(cluster.id) ?? []), { secret, cluster }]);
  }
  return new Map([...byId].filter(([, claims]) => claims.length === 1).map(([id, [only]]) => [id, only!]));
}

function expectedConflicts(secrets: ReadonlyMap<string, number>): Array<{ clusterId: string; secrets: string[] }> {
  const byId = new Map<string, string[]>();
  for (const [secret, variant] of secrets) {
    const cluster = VARIANTS[variant]!.claims;
    if (cluster !== undefined && !isStatic(cluster.id)) byId.set(cluster.id, [...(byId.get(cluster.id) ?? []), secret]);
  }
  return [...byId]
    .filter(([, claimants]) => claimants.length > 1)
    .map(([clusterId, claimants]) => ({ clusterId, secrets: claimants.sort() }))
    .sort((a, b) => (a.clusterId < b.clusterId ? -1 : 1));
}

const describeServed = (served: Served) =>
  JSON.stringify([...served].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, s]) => [id, s.secret, s.cluster.server, s.cluster.credential]));

function fail(message: string): never {
  throw new Error(message);
}

/**
 * Runs one replica's events through a RegistryView, replaying its changes into the fleet it serves
 * (every change must fit that fleet: no add of a served id, no change or removal of an unserved one),
 * checking after each event that no served id has a second claimant among the Secrets it knows of.
 * Returns the fleet served in the end.
 */
function runReplica(r: Replica, final: ReadonlyMap<string, number>): Served {
  const view = new RegistryView(isStatic);
  const served: Served = new Map();
  /** The Secrets the view knows of (the last data it was given of each); `listing`: seen since a list began. */
  const known = new Map<string, number>();
  let listing: Set<string> | undefined = new Set();

  const apply = (changes: FleetChange[]) => {
    for (const c of changes) {
      if (c.event === "added") {
        if (served.has(c.cluster.id)) fail(`added ${c.cluster.id}, already served`);
        served.set(c.cluster.id, { secret: c.secret, cluster: c.cluster });
      } else if (c.event === "changed") {
        if (served.get(c.cluster.id)?.secret !== c.secret) fail(`changed ${c.cluster.id} by ${c.secret}, not served by it`);
        served.set(c.cluster.id, { secret: c.secret, cluster: c.cluster });
      } else if (c.event === "removed") {
        if (served.get(c.clusterId)?.secret !== c.secret) fail(`removed ${c.clusterId} of ${c.secret}, not served by it`);
        served.delete(c.clusterId);
      }
    }
  };
  const put = (secret: string, variant: number) => {
    listing?.add(secret);
    known.set(secret, variant);
    apply(view.put(secret, VARIANTS[variant]!.data));
  };
  const remove = (secret: string) => {
    known.delete(secret);
    apply(view.remove(secret));
  };
  const endList = () => {
    for (const secret of [...known.keys()]) if (!listing!.has(secret)) known.delete(secret);
    listing = undefined;
    apply(view.endRelist());
  };
  const checkStep = (step: string) => {
    const claimants = expectedConflicts(known);
    for (const [id, { secret }] of served) {
      const claim = VARIANTS[known.get(secret) ?? -1]?.claims;
      if (claim?.id !== id || claimants.some((c) => c.clusterId === id)) fail(`after ${step}: ${id} served by ${secret}, claimed by ${JSON.stringify([...known])}`);
    }
    // Outside a list, exactly the expectation over what it knows.
    if (listing === undefined && describeServed(served) !== describeServed(expectedServed(known))) {
      fail(`after ${step}: serves ${describeServed(served)}, expected ${describeServed(expectedServed(known))}`);
    }
  };

  for (const o of r.history) {
    if ("put" in o) put(SECRETS[o.put[0]]!, o.put[1]);
    else if ("remove" in o) remove(SECRETS[o.remove]!);
    else {
      listing = new Set();
      view.beginRelist();
      for (const [s, v] of o.relist) put(SECRETS[s]!, v);
      if (o.completes) endList();
    }
    checkStep(JSON.stringify(o));
  }

  // Catching up on the final Secrets.
  const order = r.order.map((i) => SECRETS[i]!);
  if (r.byFreshList || listing !== undefined) {
    listing = new Set();
    view.beginRelist();
    for (const secret of order) if (final.has(secret)) put(secret, final.get(secret)!);
    endList();
  } else {
    for (const secret of order) {
      const variant = final.get(secret);
      if (variant === undefined && known.has(secret)) remove(secret);
      else if (variant !== undefined && known.get(secret) !== variant) put(secret, variant);
    }
  }
  checkStep("catching up");
  const conflicts = JSON.stringify(view.conflicts().map((c) => ({ clusterId: c.clusterId, secrets: [...c.secrets] })));
  if (conflicts !== JSON.stringify(expectedConflicts(final))) fail(`reports conflicts ${conflicts}, expected ${JSON.stringify(expectedConflicts(final))}`);
  if (view.size !== served.size) fail(`size ${view.size}, serves ${served.size}`);
  return served;
}

describe("RegistryView: the same Secrets serve the same clusters on every replica, whatever the order", () => {
  it("three replicas, each with its own history and catching up in its own order, serve exactly the pure expectation", () => {
    const runs = 10_000;
    const started = performance.now();
    fc.assert(
      fc.property(finalSecrets, fc.array(replica, { minLength: 3, maxLength: 3 }), (variants, replicas) => {
        const final = new Map(variants.flatMap((v, i) => (v === undefined ? [] : [[SECRETS[i]!, v] as const])));
        const expected = describeServed(expectedServed(final));
        for (const r of replicas) {
          const served = describeServed(runReplica(r, final));
          if (served !== expected) fail(`a replica serves ${served}, expected ${expected}`);
        }
      }),
      { numRuns: runs },
    );
    console.log(`${runs} generated histories × 3 replicas in ${(performance.now() - started).toFixed(0)} ms`);
  }, 60_000);

  it("the case of issue 42, by hand: a replica that lists the attacker's Secret first serves the id no more than one that saw the real one first", () => {
    const real = VARIANTS[0]!.data;
    const attacker = VARIANTS[1]!.data;
    const early = new RegistryView(isStatic);
    early.endRelist();
    const earlyChanges = [...early.put("ns/cluster-prod-1", real), ...early.put("ns/aaa-cluster-prod-1", attacker)];
    const late = new RegistryView(isStatic);
    const lateChanges = [...late.put("ns/aaa-cluster-prod-1", attacker), ...late.put("ns/cluster-prod-1", real), ...late.endRelist()];
    expect(earlyChanges.map((c) => c.event)).toEqual(["added", "conflict", "removed"]);
    expect(lateChanges.map((c) => c.event)).toEqual(["conflict"]);
    expect([early.size, late.size]).toEqual([0, 0]);
    // Either Secret deleted: the other serves the id on both.
    expect(early.remove("ns/aaa-cluster-prod-1").filter((c) => c.event === "added")).toMatchObject([{ secret: "ns/cluster-prod-1", cluster: { id: X, server: "https://10.0.0.1:6443" } }]);
    expect(late.remove("ns/cluster-prod-1").filter((c) => c.event === "added")).toMatchObject([{ secret: "ns/aaa-cluster-prod-1", cluster: { id: X, server: "https://10.0.0.2:6443" } }]);
  });
});
