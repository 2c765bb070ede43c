/**
 * Claim globs (ADR-0028): `*` matches any run of characters, including none; every other character
 * is literal; the pattern must match the whole value (anchored); case-sensitive.
 *
 * A pattern is compiled once into the literal parts between its stars and matched by finding those
 * parts in order, without regular expressions: no pattern can backtrack catastrophically on a long
 * claim, and no character of a claim pattern can ever act as regex syntax.
 */

export interface Glob {
  readonly pattern: string;
  matches(value: string): boolean;
}

export function compileGlob(pattern: string): Glob {
  const parts = pattern.split("*");
  if (parts.length === 1) return { pattern, matches: (value) => value === pattern };
  const head = parts[0]!;
  const tail = parts[parts.length - 1]!;
  // Empty parts come from adjacent stars, which match exactly what one star matches.
  const middle = parts.slice(1, -1).filter((part) => part !== "");
  return {
    pattern,
    matches(value) {
      if (value.length < head.length + tail.length) return false;
      if (!value.startsWith(head) || !value.endsWith(tail)) return false;
      const end = value.length - tail.length;
      let from = head.length;
      // Placing each middle part at its leftmost occurrence leaves the most room for the rest.
      for (const part of middle) {
        const at = value.indexOf(part, from);
        if (at === -1 || at + part.length > end) return false;
        from = at + part.length;
      }
      return true;
    },
  };
}
