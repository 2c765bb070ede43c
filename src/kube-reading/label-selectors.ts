/**
 * Label selectors as k8s.io/apimachinery/pkg/labels Parse reads them: only validity matters here,
 * because an invalid labelSelector fails the whole ListOptions decode. Pure, total.
 */

import { isGoInt64 } from "./go-int64.ts";

type LabelToken =
  | "error"
  | "eos"
  | "identifier"
  | "("
  | ")"
  | ","
  | "!"
  | "="
  | "=="
  | "!="
  | ">"
  | "<"
  | "in"
  | "notin";

/** string2token: every literal the lexer turns into a token of its own. */
const LABEL_LITERAL_TOKENS: ReadonlyMap<string, LabelToken> = new Map<string, LabelToken>([
  [")", ")"],
  [",", ","],
  ["!", "!"],
  ["==", "=="],
  ["=", "="],
  [">", ">"],
  ["in", "in"],
  ["<", "<"],
  ["!=", "!="],
  ["notin", "notin"],
  ["(", "("],
]);

interface ScannedItem {
  tok: LabelToken;
  literal: string;
}

function isLabelWhitespace(ch: number): boolean {
  return ch === 0x20 || ch === 0x09 || ch === 0x0d || ch === 0x0a;
}

function isLabelSpecialSymbol(ch: number): boolean {
  // = ! ( ) , > <
  return ch === 0x3d || ch === 0x21 || ch === 0x28 || ch === 0x29 || ch === 0x2c || ch === 0x3e || ch === 0x3c;
}

/**
 * The label selector lexer. Like kube's, it reads a 0 both at the end of the
 * input and for a literal NUL character (which it consumes), and a 0 read at the
 * start of a token ends the token stream.
 */
function scanLabelSelector(s: string): ScannedItem[] {
  let pos = 0;
  const read = (): number => {
    if (pos < s.length) return s.charCodeAt(pos++);
    return 0;
  };
  const unread = (): void => {
    pos--;
  };

  const scanIdOrKeyword = (): ScannedItem => {
    let buffer = "";
    for (;;) {
      const ch = read();
      if (ch === 0) break;
      if (isLabelSpecialSymbol(ch) || isLabelWhitespace(ch)) {
        unread();
        break;
      }
      buffer += String.fromCharCode(ch);
    }
    const keyword = LABEL_LITERAL_TOKENS.get(buffer);
    return keyword !== undefined ? { tok: keyword, literal: buffer } : { tok: "identifier", literal: buffer };
  };

  const scanSpecialSymbol = (): ScannedItem => {
    let last: ScannedItem | undefined;
    let buffer = "";
    for (;;) {
      const ch = read();
      if (ch === 0) break;
      if (!isLabelSpecialSymbol(ch)) {
        unread();
        break;
      }
      buffer += String.fromCharCode(ch);
      const tok = LABEL_LITERAL_TOKENS.get(buffer);
      if (tok !== undefined) {
        last = { tok, literal: buffer };
      } else if (last !== undefined) {
        unread();
        break;
      }
    }
    return last ?? { tok: "error", literal: `error expected: keyword found '${buffer}'` };
  };

  const lex = (): ScannedItem => {
    let ch = read();
    while (isLabelWhitespace(ch)) ch = read();
    if (ch === 0) return { tok: "eos", literal: "" };
    unread();
    return isLabelSpecialSymbol(ch) ? scanSpecialSymbol() : scanIdOrKeyword();
  };

  const items: ScannedItem[] = [];
  for (;;) {
    const item = lex();
    items.push(item);
    if (item.tok === "eos") return items;
  }
}

/** labels.Parse(selector) returns no error. */
export function isValidLabelSelector(selector: string): boolean {
  const items = scanLabelSelector(selector);
  let position = 0;

  // Parser contexts: in "values" context the keywords in/notin are identifiers.
  const asValue = (tok: LabelToken): LabelToken => (tok === "in" || tok === "notin" ? "identifier" : tok);
  const peek = (): ScannedItem => items[position] ?? { tok: "eos", literal: "" };
  const lookaheadValue = (): LabelToken => asValue(peek().tok);
  const consumeValue = (): ScannedItem => {
    const item = peek();
    position++;
    return { tok: asValue(item.tok), literal: item.literal };
  };
  const consumeKeyAndOperator = (): ScannedItem => {
    const item = peek();
    position++;
    return item;
  };

  /** A requirement's values, or undefined on a parse error. */
  const parseValues = (): string[] | undefined => {
    if (consumeValue().tok !== "(") return undefined;
    const next = lookaheadValue();
    if (next === ")") {
      consumeValue();
      return [""];
    }
    if (next !== "identifier" && next !== ",") return undefined;
    const values = new Set<string>();
    for (;;) {
      const item = consumeValue();
      if (item.tok === "identifier") {
        values.add(item.literal);
        const after = lookaheadValue();
        if (after === ",") continue;
        if (after === ")") break;
        return undefined;
      }
      if (item.tok === ",") {
        if (values.size === 0) values.add("");
        const after = lookaheadValue();
        if (after === ")") {
          values.add("");
          break;
        }
        if (after === ",") values.add("");
        continue;
      }
      return undefined;
    }
    if (consumeValue().tok !== ")") return undefined;
    return [...values];
  };

  const parseExactValue = (): string[] | undefined => {
    const next = lookaheadValue();
    if (next === "eos" || next === ",") return [""];
    const item = consumeValue();
    return item.tok === "identifier" ? [item.literal] : undefined;
  };

  /** parseRequirement followed by NewRequirement's validation. */
  const parseRequirement = (): boolean => {
    let item = consumeValue();
    let unary: "exists" | "doesNotExist" | undefined;
    if (item.tok === "!") {
      unary = "doesNotExist";
      item = consumeValue();
    }
    if (item.tok !== "identifier") return false;
    const key = item.literal;
    if (!isLabelKey(key)) return false;
    const next = lookaheadValue();
    if ((next === "eos" || next === ",") && unary === undefined) unary = "exists";
    if (unary !== undefined) return true;

    const op = consumeKeyAndOperator().tok;
    let values: string[] | undefined;
    if (op === "in" || op === "notin") values = parseValues();
    else if (op === "=" || op === "==" || op === "!=" || op === ">" || op === "<") values = parseExactValue();
    else return false;
    if (values === undefined) return false;
    if (op === ">" || op === "<") {
      if (values.length !== 1 || !values.every(isGoInt64)) return false;
    }
    return values.every(isLabelValue);
  };

  for (;;) {
    const tok = lookaheadValue();
    if (tok === "eos") return true;
    if (tok !== "identifier" && tok !== "!") return false;
    if (!parseRequirement()) return false;
    const after = consumeValue().tok;
    if (after === "eos") return true;
    if (after !== ",") return false;
    const next = lookaheadValue();
    if (next !== "identifier" && next !== "!") return false;
  }
}

function isAsciiAlphanumeric(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

/** ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63 characters. */
function isLabelName(name: string): boolean {
  if (name.length === 0 || name.length > 63) return false;
  if (!isAsciiAlphanumeric(name.charCodeAt(0)) || !isAsciiAlphanumeric(name.charCodeAt(name.length - 1))) return false;
  for (let i = 1; i < name.length - 1; i++) {
    const c = name.charCodeAt(i);
    if (!isAsciiAlphanumeric(c) && c !== 0x2d && c !== 0x5f && c !== 0x2e) return false;
  }
  return true;
}

/** content.IsLabelKey: [DNS-1123 subdomain "/"] name. */
function isLabelKey(key: string): boolean {
  const pieces = key.split("/");
  if (pieces.length > 2) return false;
  if (pieces.length === 2 && !isDns1123Subdomain(pieces[0] ?? "")) return false;
  return isLabelName(pieces[pieces.length - 1] ?? "");
}

/** validation.IsValidLabelValue: empty, or a label name. */
function isLabelValue(value: string): boolean {
  return value === "" || isLabelName(value);
}

function isLowerAlphanumeric(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x7a);
}

/** [a-z0-9]([-a-z0-9]*[a-z0-9])? (length is bounded by the subdomain check). */
function isDns1123Label(label: string): boolean {
  if (label.length === 0) return false;
  if (!isLowerAlphanumeric(label.charCodeAt(0)) || !isLowerAlphanumeric(label.charCodeAt(label.length - 1))) return false;
  for (let i = 1; i < label.length - 1; i++) {
    const c = label.charCodeAt(i);
    if (!isLowerAlphanumeric(c) && c !== 0x2d) return false;
  }
  return true;
}

/** content.IsDNS1123Subdomain: dot-separated DNS-1123 labels, at most 253 characters. */
function isDns1123Subdomain(value: string): boolean {
  if (value.length === 0 || value.length > 253) return false;
  return value.split(".").every(isDns1123Label);
}
