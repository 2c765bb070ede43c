/**
 * Kubernetes RequestInfo: what kube-apiserver's authorization layer sees.
 *
 * A pure port of `RequestInfoFactory.NewRequestInfo` from
 * `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` (Kubernetes 1.35 line,
 * the tree that also carries the `AuthorizePodWebsocketUpgradeCreatePermission`
 * gate), configured as kube-apiserver configures it: APIPrefixes {api, apis},
 * GrouplessAPIPrefixes {api}. The rules, not the code, were carried over.
 *
 * Path shapes accepted (the path is split with kube's
 * `strings.Split(strings.Trim(path, "/"), "/")`, so leading/trailing slashes are
 * ignored and an inner `//` yields an empty segment):
 *
 * Resource paths (isResourceRequest: true)
 *   /api/{version}/{resource}
 *   /api/{version}/{resource}/{name}
 *   /api/{version}/{resource}/{name}/{subresource}[/{more}...]
 *   /api/{version}/namespaces                                   resource "namespaces"
 *   /api/{version}/namespaces/{namespace}                       resource "namespaces", name and namespace = {namespace}
 *   /api/{version}/namespaces/{namespace}/status|finalize[/...] subresource of the namespace itself
 *   /api/{version}/namespaces/{namespace}/{resource}
 *   /api/{version}/namespaces/{namespace}/{resource}/{name}[/{subresource}[/{more}...]]
 *   /apis/{group}/{version}/...                                 every form above, with an API group
 *
 * Legacy verb-in-path forms (the verb is taken from the path, not the method)
 *   /api/{version}/watch/{resource}[/{name}[/{subresource}]]
 *   /api/{version}/watch/namespaces/{namespace}/{resource}[/{name}[/{subresource}]]
 *   /api/{version}/proxy/{resource}/{name}[/{path}...]          never a subresource
 *   /api/{version}/proxy/namespaces/{namespace}/{resource}/{name}[/{path}...]
 *   /api/{version}/watch and /api/{version}/proxy with nothing after them: kube
 *   fails the request (HTTP 500) before authorization; here that is a resource
 *   RequestInfo carrying `parseError`, which the caller must refuse.
 *
 * Non-resource paths (isResourceRequest: false, verb = lower-cased HTTP method)
 *   /  /api  /api/{version}  /apis  /apis/{group}  /apis/{group}/{version}
 *   /healthz  /livez  /readyz  /version  /metrics  /openapi/v2  /openapi/v3/...
 *   and anything whose first segment is not `api` or `apis`.
 *
 * Input contract. kube parses `req.URL.Path`, which Go's net/http has already
 * percent-decoded. The caller passes the path exactly as the API server will
 * see it, after Envoy's normalisation (percent-decoding of unreserved
 * characters, slash merging, dot-segment removal) and after any gateway prefix
 * has been stripped. This module never decodes or normalises: a `%2F` that
 * survives to here is a literal three-character piece of its segment, `..` is
 * a segment called "..", and `//` yields an empty segment, exactly as kube
 * would treat the same decoded path. The query string is given already parsed
 * (URLSearchParams); differences between that parser and Go's
 * `url.ParseQuery` (Go drops pairs containing `;` or a bad escape) are the
 * caller's to reconcile.
 *
 * The parser is total: it never throws, for any strings, and is deterministic.
 */

export interface KubeHttpRequest {
  /** HTTP method, as sent (kube compares it case-sensitively: "get" is not GET). */
  method: string;
  /** The path as the API server sees it (already stripped of any gateway prefix), no query. */
  path: string;
  /** Parsed query string. */
  query: URLSearchParams;
}

export interface ResourceRequestInfo {
  isResourceRequest: true;
  /** Kube verb: get, list, watch, create, update, patch, delete, deletecollection, proxy, or "" for an unknown method. */
  verb: string;
  apiPrefix: string;
  apiGroup: string;
  apiVersion: string;
  namespace: string;
  resource: string;
  subresource: string;
  name: string;
  /** Path parts starting at {resource}: resource/name/subresource/anything-else. */
  parts: string[];
  path: string;
  /**
   * Set only when kube's NewRequestInfo returns an error (`/{prefix}/{version}/watch`
   * or `/proxy` with nothing after). kube answers such a request with HTTP 500
   * before any authorization happens; the other fields hold what kube had parsed
   * at that point. A caller MUST deny when this is set.
   */
  parseError?: string;
}

export interface NonResourceRequestInfo {
  isResourceRequest: false;
  /** The lower-cased HTTP method. */
  verb: string;
  path: string;
}

export type RequestInfo = ResourceRequestInfo | NonResourceRequestInfo;

// ---------------------------------------------------------------------------
// Fixed vocabularies (kube names in comments)
// ---------------------------------------------------------------------------

/** RequestInfoFactory.APIPrefixes as kube-apiserver configures it. */
export const API_PREFIXES: ReadonlySet<string> = new Set(["api", "apis"]);

/** RequestInfoFactory.GrouplessAPIPrefixes: prefixes with no {group} segment. */
export const GROUPLESS_API_PREFIXES: ReadonlySet<string> = new Set(["api"]);

/** specialVerbs: legacy verbs carried as the first segment after the version. */
export const SPECIAL_VERBS: ReadonlySet<string> = new Set(["proxy", "watch"]);

/** specialVerbsNoSubresources: path verbs after which part 3 is never a subresource. */
export const SPECIAL_VERBS_NO_SUBRESOURCES: ReadonlySet<string> = new Set(["proxy"]);

/** namespaceSubresources: what may follow namespaces/{ns} as a subresource of the namespace. */
export const NAMESPACE_SUBRESOURCES: ReadonlySet<string> = new Set(["status", "finalize"]);

/** The verb a resource request gets from its (case-sensitive) HTTP method. Any other method: "". */
export const VERB_FOR_METHOD: ReadonlyMap<string, string> = new Map([
  ["POST", "create"],
  ["GET", "get"],
  ["HEAD", "get"],
  ["PUT", "update"],
  ["PATCH", "patch"],
  ["DELETE", "delete"],
]);

/** path.NameMayNotBe: names from a fieldSelector that are not taken as the request's name. */
const NAME_MAY_NOT_BE: ReadonlySet<string> = new Set([".", ".."]);
/** path.NameMayNotContain. */
const NAME_MAY_NOT_CONTAIN: readonly string[] = ["/", "%"];

/**
 * Pod subresources whose `connect` handler, from Kubernetes 1.35 (feature gate
 * AuthorizePodWebsocketUpgradeCreatePermission, beta, on by default), also
 * authorizes the verb "create" when the request's verb is not already "create".
 * Not included, as in kube: pods/proxy, services/proxy, nodes/proxy.
 */
export const POD_SUBRESOURCES_REQUIRING_CREATE: ReadonlySet<string> = new Set(["exec", "attach", "portforward"]);

// ---------------------------------------------------------------------------
// RequestInfo
// ---------------------------------------------------------------------------

/** kube's splitPath: trim every leading and trailing "/", then split on "/". */
function splitPath(path: string): string[] {
  let start = 0;
  let end = path.length;
  while (start < end && path.charCodeAt(start) === 0x2f) start++;
  while (end > start && path.charCodeAt(end - 1) === 0x2f) end--;
  if (start === end) return [];
  return path.slice(start, end).split("/");
}

/** Element i of a list whose length the caller has already checked. */
function at(list: readonly string[], i: number): string {
  return list[i] ?? "";
}

export function requestInfoFor(req: KubeHttpRequest): RequestInfo {
  const method = typeof req.method === "string" ? req.method : "";
  const path = typeof req.path === "string" ? req.path : "";
  const query = typeof req.query?.getAll === "function" ? req.query : new URLSearchParams();

  // Non-resource until proven otherwise.
  const lowerMethod = method.toLowerCase();
  const nonResource: NonResourceRequestInfo = { isResourceRequest: false, verb: lowerMethod, path };

  let current = splitPath(path);
  if (current.length < 3) return nonResource;

  const apiPrefix = at(current, 0);
  if (!API_PREFIXES.has(apiPrefix)) return nonResource;
  current = current.slice(1);

  let apiGroup = "";
  if (!GROUPLESS_API_PREFIXES.has(apiPrefix)) {
    // The prefix is consumed, so this asks for four parts in all.
    if (current.length < 3) return nonResource;
    apiGroup = at(current, 0);
    current = current.slice(1);
  }

  const apiVersion = at(current, 0);
  current = current.slice(1);
  // From here on current has at least one element.

  let verb: string;
  if (SPECIAL_VERBS.has(at(current, 0))) {
    if (current.length < 2) {
      return {
        isResourceRequest: true,
        verb: lowerMethod,
        apiPrefix,
        apiGroup,
        apiVersion,
        namespace: "",
        resource: "",
        subresource: "",
        name: "",
        parts: [],
        path,
        parseError: `unable to determine kind and namespace from url, ${path}`,
      };
    }
    verb = at(current, 0);
    current = current.slice(1);
  } else {
    verb = VERB_FOR_METHOD.get(method) ?? "";
  }

  // namespaces/{namespace}/{resource}/...: parts are re-based onto {resource},
  // unless what follows the namespace name is a namespace subresource.
  let namespace = "";
  if (at(current, 0) === "namespaces" && current.length > 1) {
    namespace = at(current, 1);
    if (current.length > 2 && !NAMESPACE_SUBRESOURCES.has(at(current, 2))) {
      current = current.slice(2);
    }
  }

  const parts = current;
  let subresource = "";
  let name = "";
  let resource = "";
  if (parts.length >= 3 && !SPECIAL_VERBS_NO_SUBRESOURCES.has(verb)) subresource = at(parts, 2);
  if (parts.length >= 2) name = at(parts, 1);
  if (parts.length >= 1) resource = at(parts, 0);

  // No name and a get: it is really a list or a watch, read from the ListOptions
  // in the query. (Never reached for the path verbs: their verb is not "get".)
  if (name === "" && verb === "get") {
    const options = decodeListOptions(query);
    if (options.ok) {
      verb = options.watch ? "watch" : "list";
      const exact = options.metadataName;
      if (exact !== undefined && isValidPathSegmentName(exact)) name = exact;
    } else {
      // kube logs the decode error, resets the options and keeps only `watch`,
      // judged with strings.ToLower instead of the codec's EqualFold.
      verb = fallbackWatch(query) ? "watch" : "list";
    }
  }

  // No name and a delete: deletecollection.
  if (name === "" && verb === "delete") verb = "deletecollection";

  return {
    isResourceRequest: true,
    verb,
    apiPrefix,
    apiGroup,
    apiVersion,
    namespace,
    resource,
    subresource,
    name,
    parts,
    path,
  };
}

// ---------------------------------------------------------------------------
// ListOptions decoding (metainternalversionscheme.ParameterCodec.DecodeParameters
// of url.Values into internalversion.ListOptions via v1.ListOptions)
// ---------------------------------------------------------------------------

type DecodedListOptions = { ok: true; watch: boolean; metadataName: string | undefined } | { ok: false };

function firstValue(query: URLSearchParams, key: string): string | undefined {
  const values = query.getAll(key);
  return values.length > 0 ? values[0] : undefined;
}

/**
 * Whether decoding would succeed, and what it yields for `watch` and for
 * `fieldSelector.RequiresExactMatch("metadata.name")`. Decoding fails when
 * labelSelector does not parse (labels.Parse), fieldSelector does not parse
 * (fields.ParseSelector), or timeoutSeconds / limit is not a base-10 int64
 * (strconv.ParseInt). The other ListOptions parameters (resourceVersion,
 * resourceVersionMatch, continue, allowWatchBookmarks, sendInitialEvents) cannot
 * fail; unknown parameters are ignored.
 */
function decodeListOptions(query: URLSearchParams): DecodedListOptions {
  const labelSelector = firstValue(query, "labelSelector");
  if (labelSelector !== undefined && !isValidLabelSelector(labelSelector)) return { ok: false };

  let metadataName: string | undefined;
  const fieldSelector = firstValue(query, "fieldSelector");
  if (fieldSelector !== undefined) {
    const terms = parseFieldSelector(fieldSelector);
    if (terms === undefined) return { ok: false };
    metadataName = requiresExactMatch(terms, "metadata.name");
  }

  for (const key of ["timeoutSeconds", "limit"]) {
    const value = firstValue(query, key);
    if (value !== undefined && !isGoInt64(value)) return { ok: false };
  }

  const watch = firstValue(query, "watch");
  return { ok: true, watch: watch !== undefined && codecBool(watch), metadataName };
}

/**
 * runtime.Convert_Slice_string_To_bool: only "0" and (Unicode simple case-folded)
 * "false" are false; anything else, the empty string included, is true.
 */
function codecBool(value: string): boolean {
  return !(value === "0" || goEqualFold(value, "false"));
}

/** requestinfo.go's fallback after a decode error: strings.ToLower(v) is "false" or "0". */
function fallbackWatch(query: URLSearchParams): boolean {
  const value = firstValue(query, "watch");
  if (value === undefined) return false;
  // Only ASCII letters lower-case onto f, a, l, s, e, so ASCII lowering is exact here.
  const lower = asciiLower(value);
  return !(lower === "false" || lower === "0");
}

function asciiLower(value: string): string {
  return value.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
}

/**
 * Go's strings.EqualFold against an all-lower-case ASCII target. Beyond ASCII
 * case, Unicode simple folding puts U+017F (long s) in the orbit of "s" and
 * U+212A (Kelvin sign) in the orbit of "k"; no other letter used by the targets
 * here has a non-ASCII fold partner.
 */
function goEqualFold(value: string, lowerAsciiTarget: string): boolean {
  const codePoints = Array.from(value);
  if (codePoints.length !== lowerAsciiTarget.length) return false;
  for (let i = 0; i < codePoints.length; i++) {
    const c = codePoints[i] ?? "";
    const t = lowerAsciiTarget[i] ?? "";
    if (c === t || asciiLower(c) === t) continue;
    if (t === "s" && c === "\u017f") continue;
    if (t === "k" && c === "\u212a") continue;
    return false;
  }
  return true;
}

/** strconv.ParseInt(value, 10, 64) succeeds. */
function isGoInt64(value: string): boolean {
  let digits = value;
  let negative = false;
  if (digits.startsWith("+") || digits.startsWith("-")) {
    negative = digits.startsWith("-");
    digits = digits.slice(1);
  }
  if (digits.length === 0) return false;
  for (let i = 0; i < digits.length; i++) {
    const c = digits.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  let significant = 0;
  while (significant < digits.length - 1 && digits.charCodeAt(significant) === 0x30) significant++;
  const magnitude = digits.slice(significant);
  const limit = negative ? "9223372036854775808" : "9223372036854775807";
  if (magnitude.length !== limit.length) return magnitude.length < limit.length;
  return magnitude <= limit;
}

/** path.IsValidPathSegmentName reports no error. */
function isValidPathSegmentName(name: string): boolean {
  if (NAME_MAY_NOT_BE.has(name)) return false;
  return !NAME_MAY_NOT_CONTAIN.some((illegal) => name.includes(illegal));
}

// ---------------------------------------------------------------------------
// Field selectors (k8s.io/apimachinery/pkg/fields ParseSelector, RequiresExactMatch)
// ---------------------------------------------------------------------------

interface FieldTerm {
  field: string;
  /** "=" and "==" both make a hasTerm; "!=" a notHasTerm. */
  equals: boolean;
  value: string;
}

/** The parsed terms in kube's order (terms sorted as strings), or undefined if it does not parse. */
function parseFieldSelector(selector: string): FieldTerm[] | undefined {
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
function requiresExactMatch(terms: readonly FieldTerm[], field: string): string | undefined {
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

// ---------------------------------------------------------------------------
// Label selectors (k8s.io/apimachinery/pkg/labels Parse): only validity matters
// here, because an invalid labelSelector fails the whole ListOptions decode.
// ---------------------------------------------------------------------------

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
function isValidLabelSelector(selector: string): boolean {
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
  if (pieces.length === 2 && !isDns1123Subdomain(at(pieces, 0))) return false;
  return isLabelName(at(pieces, pieces.length - 1));
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

// ---------------------------------------------------------------------------
// Authorization verbs
// ---------------------------------------------------------------------------

/**
 * The verbs that must all be authorized for a request.
 *
 * Normally `[info.verb]`. From Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission,
 * beta, on by default) the core pod registry's `connect` handlers for
 * pods/exec, pods/attach and pods/portforward also authorize "create" whenever
 * the request's verb is not already "create". Those handlers are only reached by
 * GET (verb "get": the WebSocket handshake) and POST (verb "create": SPDY), so a
 * "get" on one of them yields `["get", "create"]`.
 *
 * kube does not look at the upgrade headers for this: the extra check runs for
 * every GET that reaches the handler, and a GET that is not an upgrade is
 * refused right after it anyway, so neither does this. The scope matches kube's
 * (core group only; not pods/proxy, services/proxy or nodes/proxy).
 */
export function authorizationVerbsFor(info: RequestInfo): string[] {
  if (
    info.isResourceRequest &&
    info.parseError === undefined &&
    info.verb === "get" &&
    info.apiGroup === "" &&
    info.resource === "pods" &&
    POD_SUBRESOURCES_REQUIRING_CREATE.has(info.subresource)
  ) {
    return ["get", "create"];
  }
  return [info.verb];
}
