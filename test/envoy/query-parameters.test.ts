/**
 * Envoy's application of query_parameters_to_set (src/envoy/query-parameters.ts), one :path per row,
 * the expected :path written from Envoy's QueryParamsMulti (source/common/http/utility.cc): split on
 * `&`, key up to the first `=`, nothing decoded, keys byte-sorted, each key's values in order, a set
 * key's values replaced by the one set.
 */
import { describe, expect, it } from "vitest";
import { withQueryParametersSet } from "../../src/envoy/query-parameters.ts";

const T = { timeoutSeconds: "60" };

describe("withQueryParametersSet", () => {
  it.each([
    { name: "no query: one added", path: "/api/v1/pods", set: T, expected: "/api/v1/pods?timeoutSeconds=60" },
    { name: "a bare ?", path: "/api/v1/pods?", set: T, expected: "/api/v1/pods?timeoutSeconds=60" },
    { name: "nothing set, no query: unchanged", path: "/a", set: {}, expected: "/a" },
    { name: "keys sorted, values of a key kept in order", path: "/a?watch=1&b=2&b=1&a=3", set: T, expected: "/a?a=3&b=2&b=1&timeoutSeconds=60&watch=1" },
    { name: "every value of the set key replaced", path: "/a?timeoutSeconds=5&x=1&timeoutSeconds=7", set: T, expected: "/a?timeoutSeconds=60&x=1" },
    { name: "nothing decoded: a %-escaped spelling is another key, sorted by its bytes", path: "/a?timeout%53econds=9", set: T, expected: "/a?timeout%53econds=9&timeoutSeconds=60" },
    { name: "a piece without = gets one", path: "/a?watch&x", set: T, expected: "/a?timeoutSeconds=60&watch=&x=" },
    { name: "an empty piece is the key \"\"", path: "/a?x=1&&y=2", set: T, expected: "/a?=&timeoutSeconds=60&x=1&y=2" },
    { name: "a trailing & adds nothing", path: "/a?x=1&", set: T, expected: "/a?timeoutSeconds=60&x=1" },
    { name: "only the first = splits", path: "/a?fieldSelector=metadata.name=web", set: T, expected: "/a?fieldSelector=metadata.name=web&timeoutSeconds=60" },
    { name: "; and + and bad escapes kept as written", path: "/a?a;b=1&l=x+y&z=%zz", set: T, expected: "/a?a;b=1&l=x+y&timeoutSeconds=60&z=%zz" },
    { name: "upper case before lower (bytes)", path: "/a?b=1&B=2&_=3", set: T, expected: "/a?B=2&_=3&b=1&timeoutSeconds=60" },
    // UTF-16 puts U+1F600 (D83D DE00) before U+FF61; its UTF-8 (F0 9F 98 80) sorts after U+FF61's (EF BD A1).
    { name: "beyond U+FFFF after U+FF61 (bytes, not UTF-16)", path: "/a?\u{1F600}=1&\uFF61=2&\u00E9=3", set: T, expected: "/a?timeoutSeconds=60&\u00E9=3&\uFF61=2&\u{1F600}=1" },
    { name: "a lone surrogate sorts as U+FFFD, as its UTF-8 does", path: "/a?\uFFFF=1&\uD800=2&\uFFFD=3", set: T, expected: "/a?timeoutSeconds=60&\uD800=2&\uFFFD=3&\uFFFF=1" },
  ])("$name: $path", ({ path, set, expected }) => {
    expect(withQueryParametersSet(path, set)).toBe(expected);
  });
});
