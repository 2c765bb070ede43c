/** decidedByRbac: which review statuses the RBAC change feed may extend; the real server's own are in user-access-review.kube.test.ts. */
import { describe, expect, it } from "vitest";
import { decidedByRbac } from "../../src/kube-calls/user-access-review.ts";

describe("decidedByRbac", () => {
  it.each([
    // RBAC's allows (plugin/pkg/auth/authorizer/rbac/rbac.go, rule.go's describers)
    { name: "allow by a RoleBinding", status: { allowed: true, reason: 'RBAC: allowed by RoleBinding "b/ns" of Role "r" to User "u"' }, expected: true },
    { name: "allow by a ClusterRoleBinding", status: { allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"' }, expected: true },
    // every other allow
    { name: "allow with no reason (ABAC, AlwaysAllow)", status: { allowed: true, reason: "" }, expected: false },
    { name: "allow with no reason field", status: { allowed: true }, expected: false },
    { name: "a webhook's allow", status: { allowed: true, reason: "granted by IAM" }, expected: false },
    { name: "RBAC's words not at the start", status: { allowed: true, reason: 'webhook: RBAC: allowed by RoleBinding "b/ns"' }, expected: false },
    { name: "RBAC's prefix without a binding", status: { allowed: true, reason: "RBAC: allowed by policy" }, expected: false },
    // denials
    { name: "no authorizer's opinion, no reason (RBAC-only chain)", status: { allowed: false }, expected: true },
    { name: "no opinion, empty reason", status: { allowed: false, reason: "" }, expected: true },
    { name: "an explicit denial (a webhook)", status: { allowed: false, denied: true }, expected: false },
    { name: "an explicit denial with a reason", status: { allowed: false, denied: true, reason: "frozen" }, expected: false },
    { name: "another authorizer's no-opinion reason", status: { allowed: false, reason: "webhook: no policy" }, expected: false },
    { name: "RBAC's rule-resolution errors", status: { allowed: false, reason: 'RBAC: clusterrole.rbac.authorization.k8s.io "x" not found' }, expected: false },
  ])("$name → $expected", ({ status, expected }) => {
    expect(decidedByRbac(status)).toBe(expected);
  });
});
