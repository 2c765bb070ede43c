/**
 * encodeCheckResponse writes a CheckResponseMessage without protobufjs's writer: its bytes must be
 * exactly protobufjs's generated encoder's for the same message (the encoder the server used before),
 * for every shape check-response.ts builds and for any strings and codes in them.
 */
import * as fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { CheckResponseMessage } from "../../src/envoy/check-response-message.ts";
import { encodeCheckResponse } from "../../src/envoy/check-response-wire.ts";
import { externalAuthRoot } from "../../src/envoy/protos.ts";

const CheckResponse = externalAuthRoot().lookupType("envoy.service.auth.v3.CheckResponse");
const protobufjs = (message: CheckResponseMessage) => Buffer.from(CheckResponse.encode(message).finish());

const option = (key: string, value: string, append_action = 2) => ({ header: { key, value }, append_action }) as { header: { key: string; value: string }; append_action: 2 };

const cases: Array<{ name: string; message: CheckResponseMessage }> = [
  { name: "an empty allow", message: { status: { code: 0, message: "" }, ok_response: { headers: [], headers_to_remove: [] } } },
  {
    name: "scenario 3's allow: a 1 KB token, a cluster header, two removals",
    message: {
      status: { code: 0, message: "" },
      ok_response: { headers: [option("authorization", `Bearer ${"t".repeat(1100)}`), option("x-portcullis-kube-cluster", "kube-c")], headers_to_remove: ["cookie", "sec-websocket-protocol"] },
    },
  },
  {
    name: "an allow with response headers",
    message: { status: { code: 0, message: "" }, ok_response: { headers: [option("a", "b")], headers_to_remove: [], response_headers_to_add: [option("vary", "Origin")] } },
  },
  {
    name: "a denial with a body of more than 127 bytes",
    message: {
      status: { code: 7, message: "can-view-denied" },
      denied_response: { status: { code: 403 }, headers: [option("content-type", "application/json"), option("x-portcullis-reason", "can-view-denied")], body: `{"error":"${"é".repeat(200)}"}` },
    },
  },
  { name: "a preflight (status 200, empty body)", message: { status: { code: 7, message: "cors-preflight" }, denied_response: { status: { code: 200 }, headers: [], body: "" } } },
  {
    name: "an allow that bounds a watch (query_parameters_to_set)",
    message: { status: { code: 0, message: "" }, ok_response: { headers: [option("a", "b")], headers_to_remove: [], query_parameters_to_set: [{ key: "timeoutSeconds", value: "60" }] } },
  },
  { name: "a 16 KB header value (three-byte lengths)", message: { status: { code: 0, message: "" }, ok_response: { headers: [option("x", "v".repeat(20_000))], headers_to_remove: [] } } },
  { name: "a negative code (ten-byte int32)", message: { status: { code: -1, message: "x" }, denied_response: { status: { code: -400 }, headers: [option("k", "v", -2 as 2)], body: "" } } },
];

describe("encodeCheckResponse", () => {
  it.each(cases)("$name: protobufjs's bytes", ({ message }) => {
    expect(encodeCheckResponse(message).equals(protobufjs(message))).toBe(true);
  });

  it("is protobufjs's bytes for any message of the shapes the server builds", () => {
    // Well-formed Unicode (fc.string's full-unicode units): protobufjs writes a lone surrogate in a short string its own way.
    const text = fc.string({ unit: "grapheme", maxLength: 300 });
    const options = fc.array(fc.record({ header: fc.record({ key: text, value: text }), append_action: fc.integer({ min: 0, max: 3 }) }), { maxLength: 4 });
    const code = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
    const parameters = fc.array(fc.record({ key: text, value: text }), { maxLength: 3 });
    const ok = fc.record({ headers: options, headers_to_remove: fc.array(text, { maxLength: 3 }), response_headers_to_add: options, query_parameters_to_set: parameters }, { requiredKeys: ["headers", "headers_to_remove"] });
    const denied = fc.record({ status: fc.record({ code }), headers: options, body: text });
    const message = fc.oneof(
      fc.record({ status: fc.record({ code, message: text }), ok_response: ok }),
      fc.record({ status: fc.record({ code, message: text }), denied_response: denied }),
    ) as fc.Arbitrary<CheckResponseMessage>;
    fc.assert(
      fc.property(message, (m) => {
        expect(encodeCheckResponse(m).equals(protobufjs(m))).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });
});
