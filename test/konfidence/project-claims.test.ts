/**
 * Order never decides whose roleBindings a Project name resolves to. A name more than one Project
 * object claims (a namespaced CRD: the shipped one is cluster-scoped, where the API server keeps
 * names unique) is served by none of them — `project-not-found` — on every replica, until one is
 * left; the providers and audiences Projects name stay a union over every object. A watch history
 * of any shape gives the answers an oracle reads off the objects the server holds, and so does a
 * replica that listed them once in another order.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compileProject, type ProjectObject, ProjectStore } from "../../src/konfidence/project-index.ts";
import type { CompiledProject } from "../../src/konfidence/ports.ts";
import type { ContestedClaim } from "../../src/kube-watch/sole-claims.ts";
import { listedOnce, replay, watchEvents } from "../support/watch-events.ts";
import { AUD, CI_NET, GITHUB } from "./fakes.ts";

const NAMES = ["alpha", "beta"];
const NAMESPACES = ["", "team-a", "team-b"];
const KEYS = NAMESPACES.flatMap((ns) => NAMES.map((name) => (ns === "" ? name : `${ns}/${name}`)));
const ENDPOINTS = [GITHUB, CI_NET];
const BINDINGS = [
  { admin: [{ session: { memberOf: ["alpha-admins"] } }] },
  { dev: [{ session: { memberOf: ["everyone"] } }], admin: [{ jwks: { endpoint: GITHUB, audience: AUD, claims: { sub: "repo:attacker/*" } } }] },
  { pm: [{ jwks: { endpoint: CI_NET, audience: AUD, claims: { sub: "ci:*" } } }] },
];

function raw(name: string, roleBindings: unknown, namespace = ""): ProjectObject {
  return { apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: { name, ...(namespace === "" ? {} : { namespace }) }, spec: { roleBindings } };
}

const projects = fc
  .record({ name: fc.constantFrom(...NAMES), namespace: fc.constantFrom(...NAMESPACES), bindings: fc.constantFrom(...BINDINGS) })
  .map(({ name, namespace, bindings }) => raw(name, bindings, namespace));

/** Who holds which role, as a comparable value (compiled globs are objects with methods). */
function summary(project: CompiledProject | undefined): unknown {
  if (project === undefined) return undefined;
  const jwks = [...project.bindings.jwks].flatMap(([endpoint, subjects]) => subjects.map(({ role, subject }) => `${role} ${endpoint} ${subject.audience}`));
  return { name: project.name, session: project.bindings.session.map(({ role, subject }) => `${role} ${subject.memberOf.join(",")}`), jwks };
}

function oracle(held: ReadonlyMap<string, ProjectObject>): unknown {
  const all = [...held.values()].map((obj) => compileProject(obj, () => true)!.project);
  return {
    byName: NAMES.map((name) => {
      const claimants = all.filter((p) => p.name === name);
      return claimants.length === 1 ? summary(claimants[0]) : undefined;
    }),
    namesProvider: ENDPOINTS.map((endpoint) => all.some((p) => p.bindings.jwks.has(endpoint))),
  };
}

function answers(store: ProjectStore): unknown {
  return { byName: NAMES.map((name) => summary(store.byName(name))), namesProvider: ENDPOINTS.map((endpoint) => store.namesProvider(endpoint)) };
}

describe("ProjectStore: a name claimed by more than one Project", () => {
  it("serves neither of two Projects under one name (two namespaces), in either order, and the other once one goes", () => {
    const owner = raw("alpha", BINDINGS[0], "team-a");
    const squatter = raw("alpha", BINDINGS[1], "team-b");
    for (const order of [[owner, squatter], [squatter, owner]]) {
      const contests: ContestedClaim[] = [];
      const store = new ProjectStore(() => true, () => {}, (contest) => contests.push(contest));
      for (const obj of order) store.put(obj);
      expect(store.byName("alpha")).toBeUndefined();
      expect([store.contested, store.size]).toEqual([1, 2]);
      expect(contests).toEqual([{ value: "alpha", objects: ["team-a/alpha", "team-b/alpha"] }]);
      store.remove(squatter);
      expect(summary(store.byName("alpha"))).toEqual({ name: "alpha", session: ["admin alpha-admins"], jwks: [] });
      expect(store.contested).toBe(0);
    }
  });

  it("any watch history gives the answers the objects held say, and so does a replica that listed them once in any order (10,000 histories)", () => {
    fc.assert(
      fc.property(watchEvents(projects, KEYS), fc.nat(), (events, seed) => {
        const heard = new ProjectStore(() => true);
        const held = replay(heard, events);
        const listed = listedOnce(new ProjectStore(() => true), held.values(), seed);
        const expected = oracle(held);
        expect(answers(heard)).toEqual(expected);
        expect(answers(listed)).toEqual(expected);
        const contested = NAMES.filter((name) => [...held.values()].filter((obj) => obj.metadata?.name === name).length > 1).length;
        expect([heard.contested, listed.contested]).toEqual([contested, contested]);
      }),
      { numRuns: 10_000 },
    );
  });
});
