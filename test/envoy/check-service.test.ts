/**
 * The server's Check service (protos.ts checkService) skips @grpc/proto-loader's conversion of each
 * message into a plain object and back. Envoy and every client still read proto-loader's way, so
 * each direction is held to it: a CheckRequest reads as the same HttpRequest, and a CheckResponse is
 * the same bytes proto-loader would send for the message with its enums named.
 */
import * as fc from "fast-check";
import { describe, expect, it } from "vitest";
import { allow, type Decision, deny, type ReasonCode } from "../../src/authz/decision.ts";
import { REASONS } from "../../src/authz/reasons.ts";
import { type CheckRequestMessage, fromCheckRequest, type HttpRequest, MalformedCheckRequest } from "../../src/envoy/check-request.ts";
import { toCheckResponse } from "../../src/authz/check-response.ts";
import { type CheckResponseMessage, OVERWRITE_IF_EXISTS_OR_ADD } from "../../src/envoy/check-response-message.ts";
import { authorizationService, checkService, externalAuthRoot } from "../../src/envoy/protos.ts";

const server = checkService()["Check"]!;
const client = authorizationService()["Check"]!;

/** What the policies see, comparable whole (a URLSearchParams has no own fields to compare). */
function read(message: CheckRequestMessage): { request: Omit<HttpRequest, "query"> & { query: string[][] } } | { malformed: true } {
  try {
    const { query, ...rest } = fromCheckRequest(message);
    return { request: { ...rest, query: [...query] } };
  } catch (err) {
    if (err instanceof MalformedCheckRequest) return { malformed: true };
    throw err;
  }
}

/** As the server reads `message`'s bytes, and as proto-loader (the old server, every client) reads them. */
function bothReadings(message: object) {
  const bytes = client.requestSerialize(message);
  return { server: read(server.requestDeserialize(bytes) as CheckRequestMessage), protoLoader: read(client.requestDeserialize(bytes) as CheckRequestMessage) };
}

const http = (fields: Record<string, unknown>, extensions: Record<string, string> = { policy: "kube-api-proxy" }) => ({
  attributes: { request: { http: fields }, context_extensions: extensions },
});

describe("a CheckRequest reads the same decoded by protobufjs as through proto-loader", () => {
  it.each([
    {
      name: "as Envoy builds it",
      message: {
        attributes: {
          source: { address: { socket_address: { address: "10.42.7.19", port_value: 51234 } } },
          request: {
            time: { seconds: "1736451234", nanos: 5 },
            http: {
              id: "1736451234567890123",
              method: "GET",
              path: "/clusters/c/api/v1/namespaces/team-1/pods?watch=1&labelSelector=app%3Dweb",
              headers: { ":authority": "gw", authorization: "Bearer abc", "x-request-id": "r-1", "impersonate-user": "x" },
              host: "gw",
              protocol: "HTTP/2",
            },
          },
          context_extensions: { policy: "kube-api-proxy", other: "1" },
        },
      },
    },
    { name: "header_map with raw values (encode_raw_headers)", message: http({ method: "GET", path: "/", header_map: { headers: [{ key: "A", raw_value: Buffer.from("caf\xe9", "latin1") }, { key: "a", value: "two" }, { key: "b", value: "v" }] } }) },
    { name: "header_map entry with value and raw value: raw wins", message: http({ method: "GET", path: "/", header_map: { headers: [{ key: "a", value: "v", raw_value: Buffer.from("raw") }] } }) },
    { name: "header_map entry without a value", message: http({ method: "GET", path: "/", header_map: { headers: [{ key: "a" }] } }) },
    { name: "header_map empty: headers read instead", message: http({ method: "GET", path: "/", headers: { a: "1" }, header_map: { headers: [] } }) },
    { name: "upper-case header keys merged", message: http({ method: "GET", path: "/", headers: { Cookie: "a=1", cookie: "b=2" } }) },
    { name: "a __proto__ header", message: http({ method: "GET", path: "/", headers: { ["__proto__"]: "x", constructor: "y" } }) },
    { name: "no x-request-id: the attribute id", message: http({ method: "GET", path: "/", id: "42" }) },
    { name: "no id at all", message: http({ method: "GET", path: "/" }) },
    { name: "no context extensions", message: { attributes: { request: { http: { method: "GET", path: "/" } } } } },
    { name: "a fragment and a bad query", message: http({ method: "GET", path: "/a?x=%zz#f" }) },
    { name: "non-ASCII and control characters", message: http({ method: "GET", path: "/\u00e9\u0000", headers: { a: "\u2028" } }) },
    { name: "no method", message: http({ path: "/" }) },
    { name: "no path", message: http({ method: "GET" }) },
    { name: "no http", message: { attributes: { request: {} } } },
    { name: "no request", message: { attributes: {} } },
    { name: "empty", message: {} },
  ])("$name", ({ message }) => {
    const { server: ours, protoLoader } = bothReadings(message);
    expect(ours).toEqual(protoLoader);
  });

  // proto3 has no absent string: an encoder may still write "" on the wire. proto-loader kept such
  // a field and dropped an absent one; decoded, both read "", and neither is an HTTP request.
  it.each([
    { name: "a path written as \"\"", message: http({ method: "GET", path: "" }) },
    { name: "a method written as \"\"", message: http({ method: "", path: "/" }) },
  ])("$name is malformed", ({ message }) => {
    expect(bothReadings(message).server).toEqual({ malformed: true });
  });

  it("a header_map key written as \"\" is no header", () => {
    const { server: ours } = bothReadings(http({ method: "GET", path: "/", header_map: { headers: [{ key: "", value: "x" }, { key: "a", value: "1" }] } }));
    expect(ours).toMatchObject({ request: { headers: { a: "1" } } });
    expect("request" in ours && "" in ours.request.headers).toBe(false);
  });

  it("the same over arbitrary requests", () => {
    const text = fc.string({ unit: "binary", maxLength: 12 });
    const word = fc.string({ unit: "binary", minLength: 1, maxLength: 12 });
    const entry = fc.record({ key: word, value: text, raw_value: fc.uint8Array({ maxLength: 6 }).map((b) => Buffer.from(b)) }, { requiredKeys: ["key"] });
    const httpArb = fc.record(
      {
        id: text,
        method: word,
        path: fc.oneof(word, fc.constantFrom("/api/v1/pods?watch=1;", "/a?b=%", "/x#y", "/q?a=1&a=2")),
        headers: fc.dictionary(text, text, { maxKeys: 6 }),
        header_map: fc.record({ headers: fc.array(entry, { maxLength: 5 }) }),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.option(httpArb, { nil: undefined }), fc.option(fc.dictionary(text, text, { maxKeys: 3 }), { nil: undefined }), (fields, extensions) => {
        const message = { attributes: { request: fields === undefined ? {} : { http: fields }, ...(extensions === undefined ? {} : { context_extensions: extensions }) } };
        const { server: ours, protoLoader } = bothReadings(message);
        expect(ours).toEqual(protoLoader);
      }),
      { numRuns: 2_000 },
    );
  });
});

/** `message` with its enums named, as proto-loader's encoder takes them. */
function named(message: CheckResponseMessage): object {
  const appendActions = externalAuthRoot().lookupEnum("envoy.config.core.v3.HeaderValueOption.HeaderAppendAction").valuesById;
  const statusCodes = externalAuthRoot().lookupEnum("envoy.type.v3.StatusCode").valuesById;
  const headers = (hs: NonNullable<CheckResponseMessage["ok_response"]>["headers"]) =>
    hs.map((h) => ({ header: h.header, append_action: appendActions[h.append_action] }));
  return {
    status: message.status,
    ...(message.ok_response === undefined ? {} : { ok_response: { ...message.ok_response, headers: headers(message.ok_response.headers) } }),
    ...(message.denied_response === undefined
      ? {}
      : { denied_response: { ...message.denied_response, status: { code: statusCodes[message.denied_response.status.code] }, headers: headers(message.denied_response.headers) } }),
  };
}

const decisions: Array<{ name: string; decision: Decision }> = [
  { name: "allow with a credential swap", decision: allow({ set: { authorization: `Bearer ${"t".repeat(1000)}`, "x-portcullis-kube-cluster": "kube-c" }, remove: ["cookie", "sec-websocket-protocol"] }) },
  { name: "allow, nothing to change", decision: allow({ set: {}, remove: [] }) },
  { name: "a denial with extra headers", decision: deny("method-not-allowed", "no", { allow: "GET" }) },
  ...(Object.keys(REASONS) as ReasonCode[]).map((reason) => ({ name: `deny ${reason}`, decision: deny(reason, `because ${reason} — ünïcode`) })),
];

describe("a CheckResponse is the bytes proto-loader would send", () => {
  it("OVERWRITE_IF_EXISTS_OR_ADD is the vendored proto's number for it", () => {
    expect(externalAuthRoot().lookupEnum("envoy.config.core.v3.HeaderValueOption.HeaderAppendAction").values["OVERWRITE_IF_EXISTS_OR_ADD"]).toBe(OVERWRITE_IF_EXISTS_OR_ADD);
  });

  it.each(decisions.flatMap(({ name, decision }) => (["kube-status", "json"] as const).map((bodyShape) => ({ name: `${name} (${bodyShape})`, decision, bodyShape }))))(
    "$name",
    ({ decision, bodyShape }) => {
      const message = toCheckResponse(decision, { bodyShape, retryAfterSeconds: 2 });
      const bytes = server.responseSerialize(message);
      expect(bytes.equals(client.responseSerialize(named(message)))).toBe(true);
      // And as Envoy reads it: every header overwritten, the denial's HTTP status by name.
      const decoded = client.responseDeserialize(bytes) as { ok_response?: { headers: Array<{ append_action: string }> }; denied_response?: { status: { code: string }; headers: Array<{ append_action: string }> } };
      for (const h of [...(decoded.ok_response?.headers ?? []), ...(decoded.denied_response?.headers ?? [])]) expect(h.append_action).toBe("OVERWRITE_IF_EXISTS_OR_ADD");
      if (decision.kind === "deny") expect(decoded.denied_response?.status.code).toBe(externalAuthRoot().lookupEnum("envoy.type.v3.StatusCode").valuesById[REASONS[decision.reason].http]);
    },
  );
});
