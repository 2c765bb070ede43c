import { describe, expect, it } from "vitest";
import { type CheckRequestMessage, fromCheckRequest, goQuery } from "../../src/envoy/check-request.ts";
import { checkService } from "../../src/envoy/protos.ts";

/** The query as [key, values] pairs in key order, for whole-value comparison. */
const entries = (q: URLSearchParams) => [...new Set(q.keys())].sort().map((k) => [k, q.getAll(k)]);

// Go's url.ParseQuery as kube-apiserver's handlers call it (req.URL.Query(), the error ignored), row
// by row; test/kube-reading/request-info.differential.test.ts asks Go itself rows like these. `error` is what
// portcullis refuses: only what it cannot read as every kube-apiserver does.
describe("goQuery: the query as kube-apiserver reads it (url.ParseQuery, error ignored), and what cannot be read so", () => {
  it.each([
    // read in full
    { name: "one pair", raw: "watch=1", values: [["watch", ["1"]]], error: false },
    { name: "repeated key keeps order (Get reads the first)", raw: "a=2&a=1", values: [["a", ["2", "1"]]], error: false },
    { name: "empty pieces are skipped", raw: "&&watch=1&", values: [["watch", ["1"]]], error: false },
    { name: "only separators", raw: "&&&", values: [], error: false },
    { name: "no = is an empty value", raw: "watch", values: [["watch", [""]]], error: false },
    { name: "empty key", raw: "=x", values: [["", ["x"]]], error: false },
    { name: "a lone = is an empty key and value", raw: "=", values: [["", [""]]], error: false },
    { name: "== : the value is =", raw: "==", values: [["", ["="]]], error: false },
    { name: "a=b=c: the value keeps its =", raw: "fieldSelector=metadata.name=web-1", values: [["fieldSelector", ["metadata.name=web-1"]]], error: false },
    { name: "+ is a space", raw: "a=b+c", values: [["a", ["b c"]]], error: false },
    { name: "+ in a key is a space", raw: "watch+=1", values: [["watch ", ["1"]]], error: false },
    { name: "%2B is a plus", raw: "a=b%2Bc", values: [["a", ["b+c"]]], error: false },
    { name: "escapes in the key", raw: "w%61tch=1", values: [["watch", ["1"]]], error: false },
    { name: "UTF-8 escapes", raw: "a=%C3%A9", values: [["a", ["é"]]], error: false },
    { name: "raw UTF-8", raw: "a=é&Key=1", values: [["a", ["é"]], ["Key", ["1"]]], error: false },
    { name: "a BOM is kept", raw: "a=%EF%BB%BFx", values: [["a", ["\ufeffx"]]], error: false },
    { name: "escaped & = ; are data", raw: "a=%26%3D%3B&b%3Dc=1", values: [["a", ["&=;"]], ["b=c", ["1"]]], error: false },
    { name: "%00 is a NUL", raw: "a=%00", values: [["a", ["\u0000"]]], error: false },
    { name: "10,000 parameters: Go's limit, still read", raw: `watch=1${"&".repeat(9_999)}`, values: [["watch", ["1"]]], error: false },
    { name: "a very long value", raw: `labelSelector=${"a".repeat(100_000)}`, values: [["labelSelector", ["a".repeat(100_000)]]], error: false },
    // dropped in part, as Go drops them: the rest is read, nothing to refuse
    { name: "the issue's request: %zz drops its own pair only", raw: "fieldSelector=metadata.name%3Dweb-1&%zz=1", values: [["fieldSelector", ["metadata.name=web-1"]]], error: false },
    { name: "a ; drops its pair (not a separator since Go 1.17)", raw: "watch=1;&a=1", values: [["a", ["1"]]], error: false },
    { name: "a ; between pairs drops both halves", raw: "watch=1;watch=0&a=1", values: [["a", ["1"]]], error: false },
    { name: "a lone ;", raw: ";&watch=1", values: [["watch", ["1"]]], error: false },
    { name: "an escaped ; is data", raw: "watch=1%3B", values: [["watch", ["1;"]]], error: false },
    { name: "bad escape in a value drops the pair", raw: "watch=%zz&a=1", values: [["a", ["1"]]], error: false },
    { name: "bad escape in a key drops the pair", raw: "w%zztch=1", values: [], error: false },
    { name: "truncated escape %2", raw: "a=%2", values: [], error: false },
    { name: "truncated escape at the end of a key", raw: "a%2=1&b=2", values: [["b", ["2"]]], error: false },
    { name: "lone %", raw: "a=%", values: [], error: false },
    { name: "lone % as a key", raw: "%&watch=1", values: [["watch", ["1"]]], error: false },
    { name: "escaped % is data", raw: "a=%25zz", values: [["a", ["%zz"]]], error: false },
    { name: "a dropped first value: the second is the first Go reads", raw: "watch=1%zz&watch=0", values: [["watch", ["0"]]], error: false },
    { name: "a dropped first fieldSelector", raw: "fieldSelector=metadata.name%3Dweb-1;&fieldSelector=metadata.name%3Dweb-2", values: [["fieldSelector", ["metadata.name=web-2"]]], error: false },
    { name: "a bad escape drops a pair even when the key is not UTF-8", raw: "%FF=%zz&a=1", values: [["a", ["1"]]], error: false },
    // cannot be read as every kube-apiserver reads it: refused
    { name: "not UTF-8 once unescaped (Go keeps the bytes)", raw: "a=%FF&b=1", values: [["b", ["1"]]], error: true },
    { name: "a key not UTF-8", raw: "%FF=1", values: [], error: true },
    { name: "overlong UTF-8", raw: "a=%C0%AF", values: [], error: true },
    { name: "UTF-8 surrogate", raw: "a=%ED%A0%80", values: [], error: true },
    { name: "10,001 parameters: this Go reads none, an older one all", raw: `fieldSelector=metadata.name%3Dweb-1${"&".repeat(10_000)}`, values: [], error: true },
    { name: "10,001 parameters, even when most are empty", raw: `${"&".repeat(10_000)}watch=1`, values: [], error: true },
  ])("$name", ({ raw, values, error }) => {
    const read = goQuery(raw);
    expect(entries(read.query)).toEqual(values);
    expect(read.error !== undefined).toBe(error);
  });
});

describe("fromCheckRequest: what kube-api-proxy must not read differently from Go's server", () => {
  const request = (method: string, path: string) => fromCheckRequest({ attributes: { request: { http: { method, path, headers: {} } } } });
  it.each([
    { name: "method kept as sent (Go's server and kube compare it case-sensitively)", method: "delete", path: "/a", expected: { method: "delete", path: "/a", targetError: false } },
    { name: "control: GET", method: "GET", path: "/a?watch=1", expected: { method: "GET", path: "/a", targetError: false } },
    { name: "# in the path", method: "GET", path: "/a/pods#/x", expected: { method: "GET", path: "/a/pods", targetError: true } },
    { name: "# in the query", method: "GET", path: "/a?watch=1#x", expected: { method: "GET", path: "/a", targetError: true } },
    { name: "query past Go's parameter limit", method: "GET", path: `/a?watch=1${"&".repeat(10_000)}`, expected: { method: "GET", path: "/a", targetError: true } },
    { name: "a ; drops its pair, as Go does: the query reads the same", method: "GET", path: "/a?watch=1;", expected: { method: "GET", path: "/a", targetError: false } },
    { name: "a bad escape drops its pair, as Go does", method: "GET", path: "/a?fieldSelector=metadata.name%3Dweb-1&%zz=1", expected: { method: "GET", path: "/a", targetError: false } },
    { name: "query not UTF-8 once unescaped", method: "GET", path: "/a?fieldSelector=metadata.name%3D%FF", expected: { method: "GET", path: "/a", targetError: true } },
  ])("$name", ({ method, path, expected }) => {
    const r = request(method, path);
    expect({ method: r.method, path: r.path, targetError: r.targetError !== undefined }).toEqual(expected);
  });
});

describe("fromCheckRequest: the headers record", () => {
  const headersOf = (headers: Record<string, unknown>) => fromCheckRequest({ attributes: { request: { http: { method: "GET", path: "/", headers: headers as Record<string, string> } } } }).headers;
  it.each([
    { name: "Envoy's lower-case map, as sent", headers: { authorization: "Bearer t", "x-request-id": "r" }, expected: { authorization: "Bearer t", "x-request-id": "r" } },
    { name: "upper-case keys lowered and merged as Envoy merges", headers: { Cookie: "a=1", cookie: "b=2" }, expected: { cookie: "a=1, b=2" } },
    { name: "a value that is not a string (a plain-object caller) is read as one", headers: { "x-a": 1, "x-b": true }, expected: { "x-a": "1", "x-b": "true" } },
    { name: "__proto__ and constructor are headers like any other", headers: JSON.parse('{"__proto__":"x","constructor":"y"}'), expected: JSON.parse('{"__proto__":"x","constructor":"y"}') },
  ])("$name", ({ headers, expected }) => {
    const read = headersOf(headers);
    expect(Object.getPrototypeOf(read)).toBeNull();
    expect({ ...read }).toEqual(expected);
  });

  it("a frozen map (protobufjs's shared empty map is) is read into a record of its own", () => {
    const read = headersOf(Object.freeze({ accept: "*/*" }));
    expect(Object.getPrototypeOf(read)).toBeNull();
    expect({ ...read }).toEqual({ accept: "*/*" });
  });

  it("a decoded request without headers reads none", () => {
    const bytes = checkService()["Check"]!.requestSerialize({ attributes: { request: { http: { method: "GET", path: "/" } } } });
    const read = fromCheckRequest(checkService()["Check"]!.requestDeserialize(bytes) as CheckRequestMessage).headers;
    expect(Object.getPrototypeOf(read)).toBeNull();
    expect(Object.keys(read)).toEqual([]);
  });

  it("inherits nothing: a name Object.prototype holds is no header", () => {
    const read = headersOf({ accept: "*/*" });
    expect(read["constructor"]).toBeUndefined();
    expect("toString" in read).toBe(false);
  });
});
