/**
 * test/e2e/konfidence-and-manifests.test.ts once more in request mode (check.policyFrom: request),
 * on the real kube-apiserver: every konfidence-api CheckRequest without context_extensions, on the
 * Konfidence host, and every answer the same (test/support/request-mode.ts).
 */
import "../support/request-mode-on.ts";
import "./konfidence-and-manifests.test.ts";
