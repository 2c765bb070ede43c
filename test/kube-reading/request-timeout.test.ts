import { describe, expect, it } from "vitest";
import { invalidRequestTimeout, isGoDuration } from "../../src/kube-reading/request-timeout.ts";

// time.ParseDuration's verdict for each value, as kube-apiserver's WithRequestDeadline reaches it
// (every row was checked against the requestinfo-oracle; the differential test keeps checking).
const rows: Array<{ name: string; input: string; expected: boolean }> = [
  // units
  { name: "seconds", input: "30s", expected: true },
  { name: "minutes", input: "1m", expected: true },
  { name: "milliseconds", input: "10ms", expected: true },
  { name: "two units", input: "1h2m", expected: true },
  { name: "us", input: "1us", expected: true },
  { name: "µs (U+00B5)", input: "1\u00b5s", expected: true },
  { name: "μs (U+03BC)", input: "1\u03bcs", expected: true },
  { name: "unit in upper case", input: "1S", expected: false },
  { name: "no unit", input: "1", expected: false },
  { name: "no unit after a second number", input: "1h1", expected: false },
  { name: "trailing space", input: "1s ", expected: false },
  { name: "exponent", input: "1e3s", expected: false },
  // zero and signs
  { name: "bare 0", input: "0", expected: true },
  { name: "+0", input: "+0", expected: true },
  { name: "-0", input: "-0", expected: true },
  { name: "00 (only a lone 0 needs no unit)", input: "00", expected: false },
  { name: "negative", input: "-1s", expected: true },
  { name: "two signs", input: "+-1s", expected: false },
  { name: "sign inside", input: "1h-1m", expected: false },
  // fractions
  { name: ".5s", input: ".5s", expected: true },
  { name: "1.s", input: "1.s", expected: true },
  { name: ".s (no digits)", input: ".s", expected: false },
  { name: "two dots", input: "1..5s", expected: false },
  { name: "tiny fraction", input: "0.0000000000000000000000001s", expected: true },
  { name: "long fraction", input: "1.00000000000000000000000000000000000001h", expected: true },
  // range
  { name: "max int64 ns", input: "9223372036854775807ns", expected: true },
  { name: "max int64 + 1 ns", input: "9223372036854775808ns", expected: false },
  { name: "min int64 ns", input: "-9223372036854775808ns", expected: true },
  { name: "min int64 - 1 ns", input: "-9223372036854775809ns", expected: false },
  { name: "2562047h fits", input: "2562047h", expected: true },
  { name: "2562048h overflows", input: "2562048h", expected: false },
  { name: "fractional hours just below the limit", input: "2562047.788015215h", expected: true },
  { name: "fractional hours just above the limit", input: "2562047.7880152156h", expected: false },
  // junk
  { name: "letters", input: "x", expected: false },
  { name: "hex", input: "0x", expected: false },
];

describe("isGoDuration: time.ParseDuration accepts the value", () => {
  it.each(rows)("$name: $input → $expected", ({ input, expected }) => {
    expect(isGoDuration(input)).toBe(expected);
  });
});

describe("invalidRequestTimeout: kube-apiserver's WithRequestDeadline reads the first ?timeout=", () => {
  it.each([
    { name: "no timeout", query: "watch=1", refused: false },
    { name: "empty timeout (kube: none given)", query: "timeout=", refused: false },
    { name: "valid", query: "timeout=30s", refused: false },
    { name: "invalid", query: "timeout=x", refused: true },
    { name: "first value decides: invalid then valid", query: "timeout=x&timeout=1s", refused: true },
    { name: "first value decides: valid then invalid", query: "timeout=1s&timeout=x", refused: false },
    { name: "first value decides: empty then invalid", query: "timeout=&timeout=x", refused: false },
  ])("$name: ?$query", ({ query, refused }) => {
    expect(invalidRequestTimeout(new URLSearchParams(query)) !== undefined).toBe(refused);
  });
});
