/**
 * Check: CheckRequest → policy → Decision → CheckResponse. Deny by default: no or unknown policy,
 * a malformed CheckRequest, any thrown error or a decision past its deadline is a denial with an
 * explicit status, never an allow and never a crash. The policy is the one context_extensions
 * name; in request mode, where they name none, the route table's (request-mode.ts). The request's
 * audit line, if its policy recorded one in the trail, is written here once the decision is final.
 */
import type { Logger } from "pino";
import type { AuditSink } from "../audit/plugin-request.ts";
import { auditRecordOf, emptyAuditTrail, writeAudit } from "../audit/trail.ts";
import { type Decision, deny } from "./decision.ts";
import { beforeDeadline, deadlineIn } from "./check-deadline.ts";
import { denialFor } from "./error-denials.ts";
import { errorSummary } from "../redaction/error-cause.ts";
import type { Policy } from "./policy.ts";
import { requestRouter, type RoutedRequest } from "./request-mode.ts";
import type { RouteTable } from "./route-table.ts";
import { type CheckRequestMessage, fromCheckRequest, type HttpRequest, MalformedCheckRequest } from "../envoy/check-request.ts";
import { type CheckResponseMessage, directResponse, toCheckResponse, withResponseHeaders } from "../envoy/check-response.ts";
import { publishDecision } from "../metrics/events.ts";

export interface CheckerOptions {
  readonly policies: readonly Policy[];
  /** The whole decision's deadline; below Envoy's ext_authz timeout so Envoy always gets our answer. */
  readonly timeoutMs: number;
  readonly retryAfterSeconds: number;
  readonly logger: Logger;
  /** Request mode (`check.policyFrom: request`): the table built from the configuration's envoy section. */
  readonly routeTable?: RouteTable | undefined;
}

export type Checker = (message: CheckRequestMessage) => Promise<CheckResponseMessage>;

/** A check whose audit line goes to the sink given with the request: the server's, or /explain's marked one. */
export type AuditedCheck = (message: CheckRequestMessage, audit: AuditSink) => Promise<CheckResponseMessage>;

/** The server's checker: every audit line goes to `audit`. */
export function createChecker(options: CheckerOptions & { readonly audit: AuditSink }): Checker {
  const check = createAuditedCheck(options);
  const { audit } = options;
  return (message) => check(message, audit);
}

export function createAuditedCheck(options: CheckerOptions): AuditedCheck {
  const policies = new Map(options.policies.map((p) => [p.name as string, p]));
  const { logger } = options;
  const route: (request: HttpRequest) => RoutedRequest =
    options.routeTable === undefined ? (request) => ({ kind: "decide", request }) : requestRouter(options.routeTable);

  return async function check(message, audit) {
    const started = process.hrtime.bigint();
    let policyName = "none";
    let decision: Decision;
    let bodyShape: Policy["bodyShape"] = "json";
    let requestId = "";
    let responseHeaders: Readonly<Record<string, string>> | undefined;
    const trail = emptyAuditTrail();
    try {
      const received = fromCheckRequest(message);
      requestId = received.requestId;
      const routed = route(received);
      if (routed.kind === "preflight") {
        publishDecision("none", "cors-preflight", Number(process.hrtime.bigint() - started) / 1e9);
        return directResponse(200, routed.headers, "cors-preflight");
      }
      const { request } = routed;
      if (routed.kind === "decide") responseHeaders = routed.responseHeaders;
      const policy = policies.get(request.contextExtensions["policy"] ?? "");
      policyName = policy?.name ?? policyName;
      bodyShape = policy?.bodyShape ?? bodyShape;
      if (routed.kind === "refuse" && policy?.refuse === undefined) {
        decision = deny("bad-request", routed.message);
      } else if (policy === undefined) {
        decision = deny("no-policy", "no authorization policy for this route");
      } else {
        // Not AbortSignal.timeout(): its timer outlives the check and, when it fires, builds a
        // DOMException (with a stack trace) for every check ever made. This one is cleared on answer.
        const deadline = deadlineIn(options.timeoutMs);
        try {
          const decided = routed.kind === "refuse" ? policy.refuse!(request, routed.message, trail) : policy.decide(request, trail);
          decision = await beforeDeadline(decided, deadline);
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
    // Once, with the answer the caller gets: the policy's, or the denial for its error or the deadline.
    const record = auditRecordOf(trail, decision, requestId);
    if (record !== undefined) {
      decision = { ...decision, audit: record };
      writeAudit(audit, record);
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    publishDecision(policyName, decision.kind === "allow" ? "allowed" : decision.reason, seconds);
    if (decision.kind === "deny" && logger.isLevelEnabled("debug")) {
      logger.debug({ policy: policyName, reason: decision.reason, request_id: requestId }, "denied");
    }
    return withResponseHeaders(toCheckResponse(decision, { bodyShape, retryAfterSeconds: options.retryAfterSeconds }), responseHeaders);
  };
}
