/**
 * Field selectors as k8s.io/apimachinery/pkg/fields reads them (ParseSelector, RequiresExactMatch):
 * what a list's fieldSelector names. Pure, total.
 */

export interface FieldTerm {
  field: string;
  /** "=" and "==" both make a hasTerm; "!=" a notHasTerm. */
  equals: boolean;
  value: string;
}

/** The parsed terms in kube's order (terms sorted as strings), or undefined if it does not parse. */
export function parseFieldSelector(selector: string): FieldTerm[] | undefined {
  const terms = splitFieldSelectorTerms(selector);
  terms.sort(compareAsGoStrings);
  const items: FieldTerm[] = [];
  for (const term of terms) {
    if (term === "") continue;
    const split = splitFieldSelectorTerm(term);
    if (split === undefined) return undefined;
    const value = unescapeFieldSelectorValue(split.rhs);
    if (value === undefined) return undefined;
    items.push({ field: split.lhs, equals: split.op !== "!=", value });
  }
  return items;
}

/** The first "=" / "==" term on `field`, in kube's (sorted) order. */
export function requiresExactMatch(terms: readonly FieldTerm[], field: string): string | undefined {
  for (const term of terms) {
    if (term.equals && term.field === field) return term.value;
  }
  return undefined;
}

/** Split on commas not escaped by a backslash; escapes stay in the terms. */
function splitFieldSelectorTerms(selector: string): string[] {
  if (selector.length === 0) return [];
  const terms: string[] = [];
  let start = 0;
  let inSlash = false;
  for (let i = 0; i < selector.length; i++) {
    const c = selector.charCodeAt(i);
    if (inSlash) {
      inSlash = false;
    } else if (c === 0x5c) {
      inSlash = true;
    } else if (c === 0x2c) {
      terms.push(selector.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(selector.slice(start));
  return terms;
}

const FIELD_TERM_OPERATORS = ["!=", "==", "="] as const;

/** The first position holding an operator splits the term (checked in the order !=, ==, =). */
function splitFieldSelectorTerm(term: string): { lhs: string; op: string; rhs: string } | undefined {
  for (let i = 0; i < term.length; i++) {
    for (const op of FIELD_TERM_OPERATORS) {
      if (term.startsWith(op, i)) return { lhs: term.slice(0, i), op, rhs: term.slice(i + op.length) };
    }
  }
  return undefined;
}

/** fields.UnescapeValue: only \\ \, \= are escapes; a bare , or = is an error. */
function unescapeFieldSelectorValue(value: string): string | undefined {
  if (!/[\\,=]/.test(value)) return value;
  let out = "";
  let inSlash = false;
  for (const c of value) {
    if (inSlash) {
      if (c !== "\\" && c !== "," && c !== "=") return undefined;
      out += c;
      inSlash = false;
      continue;
    }
    if (c === "\\") inSlash = true;
    else if (c === "," || c === "=") return undefined;
    else out += c;
  }
  return inSlash ? undefined : out;
}

/** Go compares strings byte-wise in UTF-8, which is code point order, not UTF-16 order. */
function compareAsGoStrings(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

/** Re-rank UTF-16 code units so that surrogates (code points above U+FFFF) sort after U+E000..U+FFFF. */
function codePointRank(unit: number): number {
  if (unit >= 0xd800 && unit <= 0xdfff) return unit + 0x2000;
  if (unit >= 0xe000) return unit - 0x800;
  return unit;
}
