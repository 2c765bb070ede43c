/**
 * `POST /explain` on the admin port: decides one CheckRequest exactly as Check does — real OpenFGA,
 * SubjectAccessReview and TokenRequest calls, caches read and filled, and for kube-api-proxy
 * PluginToken requests the audit line — and answers with the outcome and the gates it went through.
 * Credentials in the mutations are redacted. Off unless `admin.explain` is set, and then answered to
 * loopback peers only (admin.ts). It runs the server's own check (the same policies and caches),
 * with its audit lines sent to a marked sink (explainAudit) so that they can never pass for a
 * request Envoy sent.
 */
import type { AuditSink } from "../audit/plugin-request.ts";
import type { AuditedCheck } from "../authz/check.ts";
import { type TraceStep, traced } from "../authz/trace.ts";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import { type CheckOutcome, describeCheckResponse } from "./describe-response.ts";

export type Explanation = CheckOutcome & { readonly trace: readonly TraceStep[] };

export type Explainer = (request: CheckRequestMessage) => Promise<Explanation>;

export function createExplainer(check: AuditedCheck, audit: AuditSink): Explainer {
  const marked = explainAudit(audit);
  return async (request) => {
    const { result, trace } = await traced(() => check(request, marked));
    return { ...describeCheckResponse(result), trace };
  };
}

/**
 * Prefixed to an explained request's id in its audit line. Envoy, as the edge proxy, replaces every
 * caller's x-request-id with a UUID of its own, so no real request's id starts with this.
 */
export const EXPLAIN_REQUEST_ID_PREFIX = "explain:";

/** The audit sink of the checker /explain runs: every line says `explain: true` and carries the prefixed id. */
export function explainAudit(audit: AuditSink): AuditSink {
  return {
    pluginRequest: (line) => audit.pluginRequest({ ...line, request_id: `${EXPLAIN_REQUEST_ID_PREFIX}${line.request_id}`, explain: true }),
    pluginTokenReplay: (line) => audit.pluginTokenReplay({ ...line, request_id: `${EXPLAIN_REQUEST_ID_PREFIX}${line.request_id}`, explain: true }),
  };
}
