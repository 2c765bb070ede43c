/**
 * The change feeds' grants are read off the resources the feeds follow (feed-resources.ts), not
 * written out again: every feed's resource has list (its first list and each quorum read) and watch,
 * and nothing else is asked. test/kube-watch/feed-grants.kube.test.ts asks the real API server
 * whether the shipped ClusterRole holds them.
 */
import { describe, expect, it } from "vitest";
import { FEED_GRANTS, grantName, groupResourceOf } from "../../src/kube-watch/feed-grants.ts";
import { FEED_RESOURCES } from "../../src/kube-watch/feed-resources.ts";
import { RBAC_KINDS } from "../../src/kube-watch/rbac-changes.ts";

describe("groupResourceOf", () => {
  it.each([
    { path: "/api/v1/serviceaccounts", group: "", resource: "serviceaccounts" },
    { path: "/apis/rbac.authorization.k8s.io/v1/roles", group: "rbac.authorization.k8s.io", resource: "roles" },
    { path: "/apis/plugins.fundament.io/v1beta1/plugininstallations", group: "plugins.fundament.io", resource: "plugininstallations" },
  ])("$path: $resource in group '$group'", ({ path, group, resource }) => {
    expect(groupResourceOf(path)).toEqual({ group, resource });
  });

  it.each([
    "/api/v1/namespaces/kube-system/serviceaccounts",
    "/apis/rbac.authorization.k8s.io/roles",
    "/api/v1/serviceaccounts/",
    "api/v1/serviceaccounts",
    "/api/v2/serviceaccounts",
    "",
  ])("refuses %j (not a cluster-wide resource path)", (path) => {
    expect(() => groupResourceOf(path)).toThrow(/not a cluster-wide resource path/);
  });
});

describe("FEED_GRANTS", () => {
  it("every feed's resource has list and watch, and nothing else is asked", () => {
    const expected = FEED_RESOURCES.flatMap((r) => ["list", "watch"].map((verb) => `${verb} ${r.plural}`));
    expect(FEED_GRANTS.map((g) => `${g.verb} ${g.resource}`).sort()).toEqual(expected.sort());
  });

  it("names the four RBAC kinds and ServiceAccounts, as kubectl auth can-i reads them", () => {
    expect(FEED_RESOURCES).toHaveLength(RBAC_KINDS.length + 1);
    expect(FEED_GRANTS.map(grantName)).toEqual([
      "list roles.rbac.authorization.k8s.io",
      "watch roles.rbac.authorization.k8s.io",
      "list rolebindings.rbac.authorization.k8s.io",
      "watch rolebindings.rbac.authorization.k8s.io",
      "list clusterroles.rbac.authorization.k8s.io",
      "watch clusterroles.rbac.authorization.k8s.io",
      "list clusterrolebindings.rbac.authorization.k8s.io",
      "watch clusterrolebindings.rbac.authorization.k8s.io",
      "list serviceaccounts",
      "watch serviceaccounts",
    ]);
  });
});
