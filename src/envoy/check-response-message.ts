/**
 * envoy.service.auth.v3.CheckResponse as portcullis builds it: field names and types exactly the
 * proto's, so protobufjs encodes it as built (protos.ts checkService). authz/check-response.ts fills it.
 */
/**
 * envoy.config.core.v3.HeaderValueOption.HeaderAppendAction OVERWRITE_IF_EXISTS_OR_ADD: replace
 * whatever the request or reply had. As a number: the server encodes this message as built, and
 * protobufjs writes enums as numbers (test/envoy/check-service.test.ts holds it to the vendored proto).
 */
export const OVERWRITE_IF_EXISTS_OR_ADD = 2;

/**
 * Envoy's router reads this request header (and drops it) as the upstream stream's maximum duration,
 * in milliseconds, from the moment the upstream connection is ready, upgraded streams included: the
 * timer resets the stream (Router::Filter::decodeHeaders, UpstreamRequest::onPoolReady). Envoy's
 * connection manager does not strip it from clients, so it is always overwritten where it is set.
 */
export const STREAM_DURATION_HEADER = "x-envoy-upstream-stream-duration-ms";

export interface HeaderValueOption {
  header: { key: string; value: string };
  append_action: typeof OVERWRITE_IF_EXISTS_OR_ADD;
}

export interface CheckResponseMessage {
  status: { code: number; message: string };
  ok_response?: {
    headers: HeaderValueOption[];
    headers_to_remove: readonly string[];
    response_headers_to_add?: HeaderValueOption[];
    /** envoy.config.core.v3.QueryParameter: Envoy replaces every value of each key (src/envoy/query-parameters.ts). */
    query_parameters_to_set?: Array<{ key: string; value: string }>;
  };
  denied_response?: { status: { code: number }; headers: HeaderValueOption[]; body: string };
}
