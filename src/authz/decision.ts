/**
 * A Decision is plain data: what portcullis answers for one request. It is turned into Envoy's
 * CheckResponse in exactly one place (src/authz/check-response.ts). Its audit line is not part of it:
 * check() writes that from the request's audit trail (src/authz/audit-trail.ts) once the decision is final.
 */
import type { HeaderMutations } from "../headers/mutations.ts";

/** Every reason a request can be denied for; the table in reasons.ts gives each its status. */
export type ReasonCode =
  | "missing-token"
  | "invalid-token"
  | "wrong-audience"
  | "cluster-mismatch"
  | "installation-mismatch"
  | "can-view-denied"
  | "user-sar-denied"
  | "installation-unavailable"
  | "user-unavailable"
  | "impersonation-forbidden"
  | "revoked"
  | "unknown-cluster"
  | "not-found"
  | "bad-request"
  | "method-not-allowed"
  | "project-not-found"
  | "no-role"
  | "role-denied"
  | "dependency-unavailable"
  | "no-policy"
  | "internal-error";

/** How a denial body is shaped: a Kubernetes Status object (kubectl prints it) or the JSON error envelope. */
export type BodyShape = "kube-status" | "json";

export interface Deny {
  readonly kind: "deny";
  readonly reason: ReasonCode;
  /** Safe for callers to read: never a token, a secret or a dependency's raw error. */
  readonly message: string;
  /** Extra response headers for the caller (e.g. `allow` on 405). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Counts the denial's debug log line adds (never a token), e.g. `plugin_audience_candidates`. */
  readonly logged?: Readonly<Record<string, number>>;
}

/**
 * How an allowed long-running request is made to end in time (src/authz/stream-bound.ts): a watch's
 * `timeoutSeconds` set on its query, or the upstream stream's duration Envoy enforces.
 */
export type StreamBound = { readonly kind: "watch-timeout" | "stream-duration"; readonly seconds: number };

export interface Allow {
  readonly kind: "allow";
  readonly mutations: HeaderMutations;
  /** Set when the request opens a stream that is bounded. */
  readonly bound?: StreamBound;
}

export type Decision = Allow | Deny;

export function deny(reason: ReasonCode, message: string, headers?: Record<string, string>): Deny {
  return headers === undefined ? { kind: "deny", reason, message } : { kind: "deny", reason, message, headers };
}

export function allow(mutations: HeaderMutations, bound?: StreamBound): Allow {
  return bound === undefined ? { kind: "allow", mutations } : { kind: "allow", mutations, bound };
}
