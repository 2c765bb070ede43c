/**
 * `POST /explain` on the admin port: decides one CheckRequest exactly as Check does — real OpenFGA,
 * SubjectAccessReview and TokenRequest calls, caches read and filled, and for kube-api-proxy
 * PluginToken requests the audit line — and answers with the outcome and the gates it went through.
 * Credentials in the mutations are redacted. Never served on a port callers can reach.
 */
import type { Checker } from "../authz/check.ts";
import { type TraceStep, traced } from "../authz/trace.ts";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import { type CheckOutcome, describeCheckResponse } from "../envoy/describe-response.ts";

export type Explanation = CheckOutcome & { readonly trace: readonly TraceStep[] };

export type Explainer = (request: CheckRequestMessage) => Promise<Explanation>;

export function createExplainer(check: Checker): Explainer {
  return async (request) => {
    const { result, trace } = await traced(() => check(request));
    return { ...describeCheckResponse(result), trace };
  };
}
