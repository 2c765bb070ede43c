/**
 * Check: CheckRequest → policy → Decision → CheckResponse. Deny by default: no or unknown policy,
 * a malformed CheckRequest, any thrown error or a decision past its deadline is a denial with an
 * explicit status, never an allow and never a crash.
 */
import type { Logger } from "pino";
import { type Decision, deny } from "./decision.ts";
import { beforeDeadline, deadlineIn, denialFor, errorSummary } from "./errors.ts";
import type { Policy } from "./policy.ts";
import { type CheckRequestMessage, fromCheckRequest, MalformedCheckRequest } from "../envoy/check-request.ts";
import { type CheckResponseMessage, toCheckResponse } from "../envoy/check-response.ts";
import { publishDecision } from "../metrics/events.ts";

export interface CheckerOptions {
  readonly policies: readonly Policy[];
  /** The whole decision's deadline; below Envoy's ext_authz timeout so Envoy always gets our answer. */
  readonly timeoutMs: number;
  readonly retryAfterSeconds: number;
  readonly logger: Logger;
}

export type Checker = (message: CheckRequestMessage) => Promise<CheckResponseMessage>;

export function createChecker(options: CheckerOptions): Checker {
  const policies = new Map(options.policies.map((p) => [p.name as string, p]));
  const { logger } = options;

  return async function check(message) {
    const started = process.hrtime.bigint();
    let policyName = "none";
    let decision: Decision;
    let bodyShape: Policy["bodyShape"] = "json";
    let requestId = "";
    try {
      const request = fromCheckRequest(message);
      requestId = request.requestId;
      const policy = policies.get(request.contextExtensions["policy"] ?? "");
      if (policy === undefined) {
        decision = deny("no-policy", "no authorization policy for this route");
      } else {
        policyName = policy.name;
        bodyShape = policy.bodyShape;
        // Not AbortSignal.timeout(): its timer outlives the check and, when it fires, builds a
        // DOMException (with a stack trace) for every check ever made. This one is cleared on answer.
        const deadline = deadlineIn(options.timeoutMs);
        try {
          decision = await beforeDeadline(policy.decide(request, deadline), deadline);
        } finally {
          deadline.clear();
        }
      }
    } catch (err) {
      if (err instanceof MalformedCheckRequest) {
        decision = deny("bad-request", "not an HTTP request");
      } else {
        decision = denialFor(err);
        const context = { reason: decision.reason, error: errorSummary(err), request_id: requestId, policy: policyName };
        if (decision.reason === "internal-error") logger.error({ ...context, err }, "check failed");
        else logger.warn(context, "dependency unavailable");
      }
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    publishDecision(policyName, decision.kind === "allow" ? "allowed" : decision.reason, seconds);
    if (decision.kind === "deny" && logger.isLevelEnabled("debug")) {
      logger.debug({ policy: policyName, reason: decision.reason, request_id: requestId }, "denied");
    }
    return toCheckResponse(decision, { bodyShape, retryAfterSeconds: options.retryAfterSeconds });
  };
}
