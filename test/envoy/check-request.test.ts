import { describe, expect, it } from "vitest";
import { fromCheckRequest, goQuery } from "../../src/envoy/check-request.ts";

/** The query as [key, values] pairs in key order, for whole-value comparison. */
const entries = (q: URLSearchParams) => [...new Set(q.keys())].sort().map((k) => [k, q.getAll(k)]);

// Go's url.ParseQuery, row by row (the differential test checks the same against Go itself).
describe("goQuery: the query as Go's url.ParseQuery reads it, and whether Go reads all of it", () => {
  it.each([
    // read in full
    { name: "one pair", raw: "watch=1", values: [["watch", ["1"]]], error: false },
    { name: "repeated key keeps order", raw: "a=2&a=1", values: [["a", ["2", "1"]]], error: false },
    { name: "empty pieces are skipped", raw: "&&watch=1&", values: [["watch", ["1"]]], error: false },
    { name: "no = is an empty value", raw: "watch", values: [["watch", [""]]], error: false },
    { name: "empty key", raw: "=x", values: [["", ["x"]]], error: false },
    { name: "+ is a space", raw: "a=b+c", values: [["a", ["b c"]]], error: false },
    { name: "%2B is a plus", raw: "a=b%2Bc", values: [["a", ["b+c"]]], error: false },
    { name: "escapes in the key", raw: "w%61tch=1", values: [["watch", ["1"]]], error: false },
    { name: "UTF-8 escapes", raw: "a=%C3%A9", values: [["a", ["é"]]], error: false },
    { name: "a BOM is kept", raw: "a=%EF%BB%BFx", values: [["a", ["\ufeffx"]]], error: false },
    { name: "escaped & and ; are data", raw: "a=%26%3B", values: [["a", ["&;"]]], error: false },
    { name: "10,000 parameters: Go's limit, still read", raw: `watch=1${"&".repeat(9_999)}`, values: [["watch", ["1"]]], error: false },
    // dropped in part: the rest is read, the error is reported
    { name: "a ; drops its pair", raw: "watch=1;&a=1", values: [["a", ["1"]]], error: true },
    { name: "bad escape in a value drops the pair", raw: "watch=%zz&a=1", values: [["a", ["1"]]], error: true },
    { name: "bad escape in a key drops the pair", raw: "w%zztch=1", values: [], error: true },
    { name: "truncated escape", raw: "a=%4", values: [], error: true },
    { name: "lone %", raw: "a=%", values: [], error: true },
    { name: "not UTF-8 once unescaped", raw: "a=%FF&b=1", values: [["b", ["1"]]], error: true },
    { name: "overlong UTF-8", raw: "a=%C0%AF", values: [], error: true },
    { name: "UTF-8 surrogate", raw: "a=%ED%A0%80", values: [], error: true },
    // dropped in whole
    { name: "10,001 parameters: Go reads none", raw: `fieldSelector=metadata.name%3Dweb-1${"&".repeat(10_000)}`, values: [], error: true },
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
    { name: "query with a ;", method: "GET", path: "/a?watch=1;", expected: { method: "GET", path: "/a", targetError: true } },
  ])("$name", ({ method, path, expected }) => {
    const r = request(method, path);
    expect({ method: r.method, path: r.path, targetError: r.targetError !== undefined }).toEqual(expected);
  });
});
