/**
 * test/authz/policies/platform-api.grpc.test.ts once more in request mode (check.policyFrom: request): every
 * CheckRequest without context_extensions, on the host the route table maps to its policy, and
 * every answer the same (test/support/request-mode.ts).
 */
import "../../support/request-mode-on.ts";
import "./platform-api.grpc.test.ts";
