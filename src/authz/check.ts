/**
 * Check: CheckRequest → policy → Decision → CheckResponse. Deny by default: no or unknown policy,
 * a malformed CheckRequest, any thrown error or a decision past its deadline is a denial with an
 * explicit status, never an allow and never a crash. The policy is the one context_extensions
 * name; in request mode, where they name none, the route table's (request-mode.ts). The request's
 * audit line, if its policy recorded one in the trail, is written here once the decision is final.
 */
import type { Logger } from "pino";
import type { AuditSink } from "../audit/plugin-request.ts";
import { writeAudit } from "../audit/record.ts";
import { type AuditTrail, auditRecordOf, emptyAuditTrail } from "./audit-trail.ts";
import { type Decision, deny } from "./decision.ts";
import { CheckDeadlines } from "./check-deadline.ts";
import { denialFor } from "./error-denials.ts";
import { errorSummary } from "../redaction/error-cause.ts";
import type { Policy } from "./policy.ts";
import { requestRouter, type RoutedRequest } from "./request-mode.ts";
import type { RouteTable } from "../config/route-table.ts";
import { type CheckRequestMessage, fromCheckRequest, type HttpRequest, MalformedCheckRequest } from "../envoy/check-request.ts";
import { directResponse, toCheckResponse, withResponseHeaders } from "./check-response.ts";
import type { CheckResponseMessage } from "../envoy/check-response-message.ts";
import { publishBoundedStream, publishDecision } from "../metrics/events.ts";

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
  // Not a timer per check: one for all of them, armed for the oldest still deciding (check-deadline.ts).
  const deadlines = new CheckDeadlines(options.timeoutMs);

  /** The denial for an error thrown while deciding, or the deadline passed; logged unless the request itself was malformed. */
  function failed(err: unknown, check: InFlight): Decision {
    if (err instanceof MalformedCheckRequest) return deny("bad-request", "not an HTTP request");
    const decision = denialFor(err);
    const context = { reason: decision.reason, error: errorSummary(err), request_id: check.requestId, policy: check.policyName };
    if (decision.reason === "internal-error") logger.error({ ...context, err }, "check failed");
    else logger.warn(context, "dependency unavailable");
    return decision;
  }

  /** The final decision's audit line, metrics and CheckResponse. */
  function answer(check: InFlight, decision: Decision): CheckResponseMessage {
    // Once, with the answer the caller gets: the policy's, or the denial for its error or the deadline.
    const record = auditRecordOf(check.trail, decision, check.requestId);
    if (record !== undefined) writeAudit(check.audit, record);
    const seconds = Number(process.hrtime.bigint() - check.started) / 1e9;
    publishDecision(check.policyName, decision.kind === "allow" ? "allowed" : decision.reason, seconds);
    if (decision.kind === "allow" && decision.bound !== undefined) publishBoundedStream(check.policyName, decision.bound.kind);
    if (decision.kind === "deny" && logger.isLevelEnabled("debug")) {
      logger.debug({ policy: check.policyName, reason: decision.reason, request_id: check.requestId, ...decision.logged }, "denied");
    }
    return withResponseHeaders(toCheckResponse(decision, { bodyShape: check.bodyShape, retryAfterSeconds: options.retryAfterSeconds }), check.responseHeaders);
  }

  /** `respond()` as the settled promise a caller awaits: a throw in it is a rejection, as from an async function. */
  function answered(respond: () => CheckResponseMessage): Promise<CheckResponseMessage> {
    try {
      return Promise.resolve(respond());
    } catch (err) {
      return Promise.reject(err);
    }
  }

  // Not an async function: a policy's decision is answered in the callback its promise settles with,
  // one promise hop and no promise raced against a deadline.
  return function check(message, audit) {
    const inFlight: InFlight = { started: process.hrtime.bigint(), policyName: "none", bodyShape: "json", requestId: "", responseHeaders: undefined, trail: emptyAuditTrail(), audit };
    let decided: Promise<Decision>;
    try {
      const received = fromCheckRequest(message);
      inFlight.requestId = received.requestId;
      const routed = route(received);
      if (routed.kind === "preflight") {
        publishDecision("none", "cors-preflight", Number(process.hrtime.bigint() - inFlight.started) / 1e9);
        return Promise.resolve(directResponse(200, routed.headers, "cors-preflight"));
      }
      const { request } = routed;
      if (routed.kind === "decide") inFlight.responseHeaders = routed.responseHeaders;
      const policy = policies.get(request.contextExtensions["policy"] ?? "");
      inFlight.policyName = policy?.name ?? inFlight.policyName;
      inFlight.bodyShape = policy?.bodyShape ?? inFlight.bodyShape;
      if (routed.kind === "refuse" && policy?.refuse === undefined) return answered(() => answer(inFlight, deny("bad-request", routed.message)));
      if (policy === undefined) return answered(() => answer(inFlight, deny("no-policy", "no authorization policy for this route")));
      decided = routed.kind === "refuse" ? policy.refuse!(request, routed.message, inFlight.trail) : policy.decide(request, inFlight.trail);
    } catch (err) {
      return answered(() => answer(inFlight, failed(err, inFlight)));
    }
    return new Promise((resolve, reject) => {
      deadlines.settle(decided, inFlight.started, (ok, outcome) => {
        try {
          resolve(answer(inFlight, ok ? (outcome as Decision) : failed(outcome, inFlight)));
        } catch (err) {
          reject(err);
        }
      });
    });
  };
}

/** One check while it is decided: what its answer needs besides the decision. */
interface InFlight {
  readonly started: bigint;
  policyName: string;
  bodyShape: Policy["bodyShape"];
  requestId: string;
  responseHeaders: Readonly<Record<string, string>> | undefined;
  readonly trail: AuditTrail;
  readonly audit: AuditSink;
}
