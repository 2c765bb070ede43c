/** Claim globs (ADR-0028): only `*` is special, it matches any run including none, anchored, case-sensitive. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compileGlob } from "../../src/konfidence-model/glob.ts";

const cases: Array<{ name: string; pattern: string; value: string; expected: boolean }> = [
  // Literal patterns: exact, anchored, case-sensitive.
  { name: "literal equal", pattern: "repo:acme/app", value: "repo:acme/app", expected: true },
  { name: "literal is anchored at the end", pattern: "repo:acme/app", value: "repo:acme/app-evil", expected: false },
  { name: "literal is anchored at the start", pattern: "acme/app", value: "repo:acme/app", expected: false },
  { name: "case-sensitive", pattern: "repo:Acme/app", value: "repo:acme/app", expected: false },
  { name: "empty pattern matches only empty", pattern: "", value: "", expected: true },
  { name: "empty pattern refuses non-empty", pattern: "", value: "x", expected: false },

  // `*` runs.
  { name: "star alone matches empty", pattern: "*", value: "", expected: true },
  { name: "star alone matches anything", pattern: "*", value: "repo:acme/app:ref:refs/heads/main", expected: true },
  { name: "trailing star matches the empty run", pattern: "repo:acme/app:*", value: "repo:acme/app:", expected: true },
  { name: "trailing star matches a run with colons and slashes", pattern: "repo:acme/app:*", value: "repo:acme/app:ref:refs/heads/main", expected: true },
  { name: "trailing star still anchors the head", pattern: "repo:acme/app:*", value: "repo:acme/app2:ref", expected: false },
  { name: "leading star anchors the tail", pattern: "*:environment:prod", value: "repo:a:environment:prod", expected: true },
  { name: "leading star refuses a longer tail", pattern: "*:environment:prod", value: "repo:a:environment:prod-eu", expected: false },
  { name: "inner star", pattern: "repo:acme/*:ref:refs/heads/main", value: "repo:acme/api:ref:refs/heads/main", expected: true },
  { name: "inner star refuses another branch", pattern: "repo:acme/*:ref:refs/heads/main", value: "repo:acme/api:ref:refs/heads/evil", expected: false },
  { name: "two stars in order", pattern: "a*b*c", value: "aXXbYYc", expected: true },
  { name: "two stars need the parts in order", pattern: "a*b*c", value: "aXXcYYb", expected: false },
  { name: "adjacent stars act as one", pattern: "a**c", value: "abc", expected: true },
  { name: "head and tail may not overlap", pattern: "ab*ba", value: "aba", expected: false },
  { name: "head and tail exactly adjacent", pattern: "ab*ba", value: "abba", expected: true },
  { name: "middle part may not eat into the tail", pattern: "a*bc*c", value: "abc", expected: false },
  { name: "repeated middle part found leftmost", pattern: "*x*x*", value: "x_x", expected: true },

  // Regex metacharacters are literal.
  { name: "dot is literal", pattern: "a.c", value: "abc", expected: false },
  { name: "dot matches itself", pattern: "a.c", value: "a.c", expected: true },
  { name: "question mark is literal", pattern: "a?", value: "ab", expected: false },
  { name: "plus is literal", pattern: "a+", value: "aa", expected: false },
  { name: "brackets are literal", pattern: "[ab]", value: "a", expected: false },
  { name: "brackets match themselves", pattern: "[ab]", value: "[ab]", expected: true },
  { name: "caret and dollar are literal", pattern: "^a$", value: "^a$", expected: true },
  { name: "backslash is literal", pattern: "a\\*", value: "a\\anything", expected: true },
  { name: "parentheses and pipe are literal", pattern: "(a|b)", value: "a", expected: false },
  { name: "braces are literal", pattern: "a{2}", value: "aa", expected: false },
  { name: "newline inside a run", pattern: "a*b", value: "a\nb", expected: true },
];

describe("compileGlob", () => {
  it.each(cases)("$name: $pattern ~ $value → $expected", ({ pattern, value, expected }) => {
    expect(compileGlob(pattern).matches(value)).toBe(expected);
  });

  it("stays fast on long inputs that defeat backtracking regexes", () => {
    const value = "a".repeat(200_000);
    const started = performance.now();
    expect(compileGlob("*a*a*a*a*a*a*a*b").matches(value)).toBe(false);
    expect(compileGlob("a*a*a*a*a*a*a*a").matches(value)).toBe(true);
    expect(compileGlob(`${"a".repeat(100_000)}*`).matches(value)).toBe(true);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("equals the reference construction: escape everything, `*` → `.*`, anchor, dotAll", () => {
    const reference = (pattern: string) =>
      new RegExp(`^${pattern.split("*").map((p) => p.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&")).join(".*")}$`, "su");
    // A small alphabet with stars and regex metacharacters makes overlaps and near-misses common.
    const char = fc.constantFrom("a", "b", "*", ".", "?", "+", "[", "]", "(", "|", "\\", "^", "$", ":", "/", "\n", "é");
    const text = fc.array(char, { maxLength: 24 }).map((cs) => cs.join(""));
    fc.assert(
      fc.property(text, text, (pattern, raw) => {
        // Values are drawn with stars too; a value is any string.
        expect(compileGlob(pattern).matches(raw)).toBe(reference(pattern).test(raw));
      }),
      { numRuns: 5_000 },
    );
  });
});
