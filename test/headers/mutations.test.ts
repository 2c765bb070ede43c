/** mutations(): what an allow sets and removes, header hygiene included, row by row. */
import { describe, expect, it } from "vitest";
import { bearerCredential, cookieDropped, isSafeHeaderValue, mutations, type SafeHeaderValue, safeHeaderValue } from "../../src/headers/mutations.ts";

const TOKEN = safeHeaderValue("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")!;

interface Row {
  name: string;
  headers: Record<string, string>;
  set: Record<string, string>;
  remove: string[];
  checked: Record<string, SafeHeaderValue>;
  expected: { set: Record<string, string>; remove: string[] };
}

describe("mutations", () => {
  it.each<Row>([
    { name: "nothing to do", headers: {}, set: {}, remove: [], checked: {}, expected: { set: {}, remove: [] } },
    { name: "remove drops only the headers the request carries", headers: { cookie: "a=b" }, set: {}, remove: ["cookie", "authorization"], checked: {}, expected: { set: {}, remove: ["cookie"] } },
    {
      name: "caller-identity headers the client sent are removed, sorted, once",
      headers: { "x-konfidence-subject": "s", "x-fundament-user-id": "u", "x-fundament-other": "o", host: "h" },
      set: {},
      remove: ["x-fundament-user-id"],
      checked: {},
      expected: { set: {}, remove: ["x-fundament-other", "x-fundament-user-id", "x-konfidence-subject"] },
    },
    {
      name: "a header portcullis sets is overwritten, not removed",
      headers: { "x-fundament-user-id": "forged", cookie: "c" },
      set: { "x-fundament-user-id": "real" },
      remove: ["cookie", "x-fundament-user-id"],
      checked: {},
      expected: { set: { "x-fundament-user-id": "real" }, remove: ["cookie"] },
    },
    {
      name: "checked values come first and are not removed either",
      headers: { authorization: "Bearer caller", cookie: "c", "x-fundament-user-id": "forged" },
      set: { "sec-websocket-protocol": "v4.channel.k8s.io" },
      remove: ["cookie", "authorization"],
      checked: { authorization: bearerCredential(TOKEN) },
      expected: { set: { authorization: `Bearer ${TOKEN}`, "sec-websocket-protocol": "v4.channel.k8s.io" }, remove: ["cookie", "x-fundament-user-id"] },
    },
  ])("$name", ({ headers, set, remove, checked, expected }) => {
    const result = mutations(headers, { set, remove, checked });
    expect(result).toEqual(expected);
    expect(Object.keys(result.set)).toEqual(Object.keys(expected.set));
  });

  it.each(["a\r\nb", "a\nb", "\u0000", "\u007f", "é", "\u2028", "\ud800", "\t"])("an unsafe value to set (%j) is a programming mistake: TypeError", (value) => {
    expect(() => mutations({}, { set: { "x-fundament-user-id": value } })).toThrow(TypeError);
  });
});

describe("cookieDropped: the one cookie never travels on, the others do", () => {
  it.each<{ name: string; headers: Record<string, string>; expected: { set: Record<string, string>; remove: string[] } }>([
    { name: "no Cookie header", headers: {}, expected: { set: {}, remove: [] } },
    { name: "not there: untouched", headers: { cookie: "theme=dark;lang=en" }, expected: { set: {}, remove: [] } },
    { name: "beside others: rewritten", headers: { cookie: `theme=dark; fundament_auth=${TOKEN}` }, expected: { set: { cookie: "theme=dark" }, remove: [] } },
    { name: "alone: the header removed", headers: { cookie: `fundament_auth=${TOKEN}` }, expected: { set: {}, remove: ["cookie"] } },
    { name: "beside a value portcullis will not re-emit: the header removed", headers: { cookie: `name=é; fundament_auth=${TOKEN}` }, expected: { set: {}, remove: ["cookie"] } },
  ])("$name", ({ headers, expected }) => {
    expect(cookieDropped(headers, "fundament_auth")).toEqual(expected);
  });
});

describe("safe header values", () => {
  it.each([
    { value: "", safe: true },
    { value: " !~", safe: true },
    { value: "Bearer eyJ.e30.sig", safe: true },
    { value: "a\rb", safe: false },
    { value: "\u001f", safe: false },
    { value: "\u007f", safe: false },
    { value: "\u0080", safe: false },
    { value: "\ud83d\ude00", safe: false },
  ])("$value: $safe", ({ value, safe }) => {
    expect(isSafeHeaderValue(value)).toBe(safe);
    expect(safeHeaderValue(value)).toBe(safe ? value : undefined);
  });

  it("a bearer credential of a safe token is safe", () => {
    expect(isSafeHeaderValue(bearerCredential(TOKEN))).toBe(true);
  });
});
