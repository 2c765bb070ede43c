/**
 * envoy.service.auth.v3.CheckResponse as portcullis builds it: field names and types exactly the
 * proto's, so it is encoded as built (check-response-wire.ts). authz/check-response.ts fills it.
 */
/**
 * envoy.config.core.v3.HeaderValueOption.HeaderAppendAction OVERWRITE_IF_EXISTS_OR_ADD: replace
 * whatever the request or reply had. As a number: the server encodes this message as built, and
 * protobufjs writes enums as numbers (test/envoy/check-service.test.ts holds it to the vendored proto).
 */
export const OVERWRITE_IF_EXISTS_OR_ADD = 2;

export interface HeaderValueOption {
  header: { key: string; value: string };
  append_action: typeof OVERWRITE_IF_EXISTS_OR_ADD;
}

export interface CheckResponseMessage {
  status: { code: number; message: string };
  ok_response?: { headers: HeaderValueOption[]; headers_to_remove: string[]; response_headers_to_add?: HeaderValueOption[] };
  denied_response?: { status: { code: number }; headers: HeaderValueOption[]; body: string };
}
