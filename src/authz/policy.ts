/**
 * A policy decides one request for one kind of route. Envoy names the policy per route in
 * `check_settings.context_extensions.policy`.
 */
import type { AuditTrail } from "./audit-trail.ts";
import type { BodyShape, Decision, Deny } from "./decision.ts";
import type { HttpRequest } from "../envoy/check-request.ts";
import type { PolicyName } from "../config/policy-names.ts";

export interface Policy {
  readonly name: PolicyName;
  /** The shape of this policy's denial bodies. */
  readonly bodyShape: BodyShape;
  /**
   * `trail` is where the policy records what the request's audit line reports; check() writes the
   * line, once, with the final decision: the policy's, or the denial for what it threw or for the
   * check's deadline (which check() races: past it the answer is 503 whatever the policy does).
   */
  decide(request: HttpRequest, trail: AuditTrail): Promise<Decision>;
  /**
   * Optional: the 400 for a request the check refuses before deciding it (request mode's path and
   * header refusals, request-mode.ts), for a policy that must record it — kube-api-proxy audits
   * every PluginToken request, on every outcome. Without it the refusal is answered as it is.
   */
  refuse?(request: HttpRequest, detail: string, trail: AuditTrail): Promise<Deny>;
}
