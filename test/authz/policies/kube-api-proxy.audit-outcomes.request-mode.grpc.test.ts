/** test/authz/policies/kube-api-proxy.audit-outcomes.grpc.test.ts once more in request mode (test/support/request-mode.ts). */
import "../../support/request-mode-on.ts";
import "./kube-api-proxy.audit-outcomes.grpc.test.ts";
