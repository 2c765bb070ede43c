/**
 * The SubjectAccessReview cache key is built from the user and the attributes, not from the review
 * (so a cache hit builds no review): two requests share a cached answer exactly when the reviews
 * the API server would be sent are the same — the old key's rule (the SHA-256 of the spec).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { reviewFor, reviewKey } from "../../src/kube-calls/user-access-review.ts";

const word = fc.constantFrom("", "a", "b", "get", "pods", "v1", "ns", "/version", "\"", "a\u0000", "ü", "a,b");
const attributes: fc.Arbitrary<AccessAttributes> = fc.oneof(
  fc.record({
    kind: fc.constant("resource" as const),
    verb: word,
    group: word,
    version: word,
    resource: word,
    subresource: word,
    namespace: word,
    name: word,
  }),
  fc.record({ kind: fc.constant("non-resource" as const), verb: word, path: word }),
);
const asked = fc.record({ cluster: fc.constantFrom("c1", "c2"), user: fc.constantFrom("u1", "u2", "a/b"), attributes });

const specOf = (a: { cluster: string; user: string; attributes: AccessAttributes }) => JSON.stringify([a.cluster, reviewFor(a.user, a.attributes).spec]);
const keyOf = (a: { cluster: string; user: string; attributes: AccessAttributes }) => reviewKey(a.cluster, a.user, a.attributes);

describe("reviewKey", () => {
  it("equal keys exactly when the reviews sent would be equal (generated pairs)", () => {
    fc.assert(
      fc.property(asked, asked, (x, y) => {
        expect(keyOf(x) === keyOf(y)).toBe(specOf(x) === specOf(y));
      }),
      { numRuns: 20_000 },
    );
  });

  it.each([
    { name: "same request", x: { verb: "get" }, y: { verb: "get" }, same: true },
    { name: "another verb", x: { verb: "get" }, y: { verb: "list" }, same: false },
    { name: "a value moved to the next field", x: { resource: "pods", subresource: "" }, y: { resource: "", subresource: "pods" }, same: false },
    { name: "a separator inside a value", x: { namespace: "a", name: "b" }, y: { namespace: "a\",\"b", name: "" }, same: false },
  ])("$name", ({ x, y, same }) => {
    const base: AccessAttributes = { kind: "resource", verb: "get", group: "", version: "v1", resource: "pods", subresource: "", namespace: "ns", name: "" };
    expect(reviewKey("c", "u", { ...base, ...x }) === reviewKey("c", "u", { ...base, ...y })).toBe(same);
  });

  it("starts with the cluster, so a removed cluster's answers can be dropped by prefix", () => {
    expect(reviewKey("c1", "u", { kind: "non-resource", verb: "get", path: "/version" })).toMatch(/^c1\/\/[\u0000-\u00ff]{32}$/);
  });

  // An RBAC change in namespace N drops the keys under `${cluster}/${N}/` (rbac-changes.ts): every
  // review about N, and no other; cluster-scoped and non-resource reviews sit under "".
  it.each([
    { name: "a namespaced resource", attributes: { kind: "resource", verb: "get", group: "", version: "v1", resource: "pods", subresource: "", namespace: "team-a", name: "" }, prefix: "c1/team-a/" },
    { name: "a cluster-scoped resource", attributes: { kind: "resource", verb: "list", group: "", version: "v1", resource: "nodes", subresource: "", namespace: "", name: "" }, prefix: "c1//" },
    { name: "a non-resource path", attributes: { kind: "non-resource", verb: "get", path: "/healthz" }, prefix: "c1//" },
  ] satisfies Array<{ name: string; attributes: AccessAttributes; prefix: string }>)("$name sits under $prefix", ({ attributes: a, prefix }) => {
    expect(reviewKey("c1", "u", a)).toMatch(new RegExp(`^${prefix}[\\u0000-\\u00ff]{32}$`));
  });

  it("a namespace's prefix holds exactly that namespace's reviews of that cluster (generated)", () => {
    const label = fc.constantFrom("", "a", "ab", "a-b", "b", "kube-system", "plugin-x");
    fc.assert(
      fc.property(fc.constantFrom("c1", "c10", "c2"), label, asked, label, (cluster, namespace, x, other) => {
        const a: AccessAttributes = x.attributes.kind === "resource" ? { ...x.attributes, namespace } : x.attributes;
        const reviewed = a.kind === "resource" ? a.namespace : "";
        const key = reviewKey(x.cluster, x.user, a);
        expect(key.startsWith(`${cluster}/${other}/`)).toBe(cluster === x.cluster && other === reviewed);
        expect(key.startsWith(`${cluster}/`)).toBe(cluster === x.cluster);
      }),
      { numRuns: 5_000 },
    );
  });
});
