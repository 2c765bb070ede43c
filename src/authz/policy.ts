/**
 * A policy decides one request for one kind of route. Envoy names the policy per route in
 * `check_settings.context_extensions.policy`.
 */
import type { BodyShape, Decision, Deny } from "./decision.ts";
import type { HttpRequest } from "../envoy/check-request.ts";
import type { Deadline } from "./errors.ts";

export const POLICY_NAMES = ["kube-api-proxy", "plugin-proxy", "plugin-assets", "konfidence-api", "platform-api", "public"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export interface Policy {
  readonly name: PolicyName;
  /** The shape of this policy's denial bodies. */
  readonly bodyShape: BodyShape;
  /** `deadline` passes when the check's time is up; the check then answers 503 whatever the policy does. */
  decide(request: HttpRequest, deadline: Deadline): Promise<Decision>;
  /**
   * Optional: the 400 for a request the check refuses before deciding it (request mode's path and
   * header refusals, request-mode.ts), for a policy that must record it — kube-api-proxy audits
   * every PluginToken request, on every outcome. Without it the refusal is answered as it is.
   */
  refuse?(request: HttpRequest, detail: string): Promise<Deny>;
}
