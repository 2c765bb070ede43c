/**
 * test/e2e/user-intersect-plugin.test.ts once more in request mode (check.policyFrom: request), on the real
 * kube-apiserver and OpenFGA: every CheckRequest without context_extensions, on the host the route
 * table maps to its policy, and every answer the same (test/support/request-mode.ts).
 */
import "../support/request-mode-on.ts";
import "./user-intersect-plugin.test.ts";
