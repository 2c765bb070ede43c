/** test/integration/kube-api-proxy.audit-outcomes.test.ts once more in request mode (test/support/request-mode.ts). */
import "../support/request-mode-on.ts";
import "./kube-api-proxy.audit-outcomes.test.ts";
