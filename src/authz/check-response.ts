/**
 * Decision → envoy.service.auth.v3.CheckResponse. The one place that knows Envoy's response shape:
 * every response carries an explicit `status`, every denial `x-portcullis-reason`. The message is
 * encoded as built (protos.ts checkService): field names and types exactly the proto's.
 */
import type { BodyShape, Decision, Deny } from "./decision.ts";
import { type CheckResponseMessage, type HeaderValueOption, OVERWRITE_IF_EXISTS_OR_ADD, STREAM_DURATION_HEADER } from "../envoy/check-response-message.ts";
import { GrpcCode, REASONS } from "./reasons.ts";

export interface ResponseOptions {
  readonly bodyShape: BodyShape;
  /** Seconds a client should wait before retrying a 503. */
  readonly retryAfterSeconds: number;
}

export function toCheckResponse(decision: Decision, options: ResponseOptions): CheckResponseMessage {
  if (decision.kind === "allow") {
    const headers = Object.entries(decision.mutations.set).map(([key, value]) => headerOption(key, value));
    const ok: NonNullable<CheckResponseMessage["ok_response"]> = { headers, headers_to_remove: decision.mutations.remove };
    const bound = decision.bound;
    if (bound?.kind === "watch-timeout") ok.query_parameters_to_set = [{ key: "timeoutSeconds", value: String(bound.seconds) }];
    if (bound?.kind === "stream-duration") headers.push(headerOption(STREAM_DURATION_HEADER, String(bound.seconds * 1000)));
    return { status: { code: GrpcCode.OK, message: "" }, ok_response: ok };
  }
  const { http, grpc } = REASONS[decision.reason];
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "x-portcullis-reason": decision.reason,
    ...decision.headers,
  };
  if (http === 401) headers["www-authenticate"] = "Bearer";
  if (http === 503) headers["retry-after"] = String(options.retryAfterSeconds);
  return {
    status: { code: grpc, message: decision.reason },
    denied_response: {
      status: { code: http },
      headers: Object.entries(headers).map(([key, value]) => headerOption(key, value)),
      body: denialBody(decision, http, options.bodyShape),
    },
  };
}

/**
 * An answer that is no denial, the CORS preflight of request mode: sent as a denied_response,
 * which Envoy's ext_authz (and every gateway built on it) turns into a local reply with exactly
 * this status and these headers, and forwards nothing upstream.
 */
export function directResponse(status: number, headers: Readonly<Record<string, string>>, reason: string): CheckResponseMessage {
  return {
    status: { code: GrpcCode.PERMISSION_DENIED, message: reason },
    denied_response: { status: { code: status }, headers: Object.entries(headers).map(([key, value]) => headerOption(key, value)), body: "" },
  };
}

/** `response` with `headers` on what the client gets back: the upstream's response on allow (response_headers_to_add), the denial itself on deny. */
export function withResponseHeaders(response: CheckResponseMessage, headers: Readonly<Record<string, string>> | undefined): CheckResponseMessage {
  if (headers === undefined) return response;
  const options = Object.entries(headers).map(([key, value]) => headerOption(key, value));
  if (response.ok_response !== undefined) return { ...response, ok_response: { ...response.ok_response, response_headers_to_add: options } };
  if (response.denied_response !== undefined) return { ...response, denied_response: { ...response.denied_response, headers: [...response.denied_response.headers, ...options] } };
  return response;
}

function headerOption(key: string, value: string): HeaderValueOption {
  return { header: { key, value }, append_action: OVERWRITE_IF_EXISTS_OR_ADD };
}

/** metav1.StatusReason for each HTTP status we answer with, so kubectl prints a normal error. */
const KUBE_STATUS_REASON: Readonly<Record<number, string>> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  500: "InternalError",
  503: "ServiceUnavailable",
};

function denialBody(decision: Deny, http: number, shape: BodyShape): string {
  switch (shape) {
    case "kube-status":
      return JSON.stringify({
        kind: "Status",
        apiVersion: "v1",
        metadata: {},
        status: "Failure",
        message: decision.message,
        reason: KUBE_STATUS_REASON[http] ?? "Unknown",
        details: { causes: [{ reason: decision.reason, message: decision.message }] },
        code: http,
      });
    case "json":
      return JSON.stringify({ error: { code: decision.reason, message: decision.message } });
    default:
      return assertNever(shape);
  }
}

export function assertNever(x: never): never {
  throw new TypeError(`unexpected value ${String(x)}`);
}
