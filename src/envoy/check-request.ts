/**
 * CheckRequest → HttpRequest: the only place that reads Envoy's AttributeContext. Everything after
 * this works on the plain, normalised HttpRequest.
 */

export interface HttpRequest {
  /** As sent: methods are case-sensitive, and kube-apiserver reads `get` as no verb at all, not as GET. */
  readonly method: string;
  /** The path without query string or fragment, exactly as Envoy saw it (after its normalisation). */
  readonly path: string;
  /**
   * The query as kube-apiserver's handlers read it, `req.URL.Query()`: Go's url.ParseQuery with its
   * error ignored, so a pair Go cannot read is dropped here too and the rest is read.
   */
  readonly query: URLSearchParams;
  /** The query as Envoy's `:path` carries it (after the first `?`, undecoded), what Envoy rewrites when a check sets parameters; "" when none. */
  readonly rawQuery: string;
  /**
   * Set when `path` and `query` may not be what the API server reads: a query past net/url's
   * parameter limit or not UTF-8 once unescaped (see goQuery), or a `#` in the target (Go's server
   * keeps it in the path or query; here it would be cut off). A policy whose decision depends on the
   * query refuses the request.
   */
  readonly targetError?: string | undefined;
  /** Lower-case header names. Repeated headers arrive merged by Envoy with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  /** The request's host as sent (`:authority`, or Host), port and case as the client wrote them; "" when absent. */
  readonly authority: string;
  /** Envoy's `x-request-id` (or the attribute id), for logs and the audit line. */
  readonly requestId: string;
  readonly contextExtensions: Readonly<Record<string, string>>;
}

/**
 * The parts of envoy.service.auth.v3.CheckRequest we read: as protobufjs decodes it for the server
 * (an absent message is null, an absent string ""), or as a plain object (a client, /explain).
 */
export interface CheckRequestMessage {
  attributes?: {
    request?: { http?: HttpAttributes | null } | null;
    context_extensions?: Record<string, string>;
  } | null;
}

/** envoy.service.auth.v3.AttributeContext.HttpRequest, the parts we read. */
interface HttpAttributes {
  id?: string;
  method?: string;
  path?: string;
  host?: string;
  headers?: Record<string, string>;
  header_map?: { headers?: HeaderEntry[] | null } | null;
}

/** envoy.config.core.v3.HeaderValue, as `header_map` carries it. */
interface HeaderEntry {
  key?: string;
  value?: string;
  raw_value?: Buffer | Uint8Array;
}

/** Thrown for a CheckRequest that does not describe an HTTP request; the caller denies it. */
export class MalformedCheckRequest extends Error {
  readonly code = "malformed-check-request";
}

export function fromCheckRequest(message: CheckRequestMessage): HttpRequest {
  const http = message.attributes?.request?.http;
  // proto3 cannot tell an absent string from "": neither is an HTTP request.
  if (http == null || typeof http.method !== "string" || typeof http.path !== "string" || http.method === "" || http.path === "") {
    throw new MalformedCheckRequest("CheckRequest carries no HTTP request");
  }
  const headers = readHeaders(http);
  const { path, query, rawQuery, targetError } = splitPath(http.path);
  return {
    method: http.method,
    path,
    query,
    rawQuery,
    targetError,
    headers,
    // proto3 reads an absent host as "": Envoy also sends it among the headers.
    authority: http.host || headers[":authority"] || headers["host"] || "",
    requestId: headers["x-request-id"] ?? http.id ?? "",
    contextExtensions: { ...(message.attributes?.context_extensions ?? {}) },
  };
}

/** Envoy sends `headers`, or `header_map` when `encode_raw_headers` is on; repeated entries are merged as Envoy does. */
function readHeaders(http: HttpAttributes): Record<string, string> {
  const out: Record<string, string> = Object.create(null);
  const entries = http.header_map?.headers;
  if (entries != null && entries.length > 0) {
    for (const e of entries) {
      // Decoded, an absent key reads "": no header has an empty name.
      if (typeof e.key !== "string" || e.key === "") continue;
      const value = headerEntryValue(e);
      const name = e.key.toLowerCase();
      out[name] = name in out ? `${out[name]}, ${value}` : value;
    }
    return out;
  }
  const headers = http.headers;
  if (headers == null) return out;
  // A proto map has one entry per key, and Envoy writes keys in lower case: then the copy is the
  // record itself, made in one call.
  if (lowerCaseStrings(headers)) return Object.assign(out, headers);
  for (const k of Object.keys(headers)) {
    // Envoy sends lower-case keys; a sender that does not must not get one of two values dropped.
    const name = k.toLowerCase();
    const v = String(headers[k]);
    out[name] = name in out ? `${out[name]}, ${v}` : v;
  }
  return out;
}

const UPPER_CASE = /[A-Z]/;

/** Every key free of upper case and every value a string: a decoded `headers` map, as Envoy sends it. */
function lowerCaseStrings(headers: Record<string, string>): boolean {
  for (const k in headers) if (UPPER_CASE.test(k) || typeof headers[k] !== "string") return false;
  return true;
}

/** One `header_map` entry's value: its raw bytes when Envoy sent them (read as Envoy holds them), else its value. */
export function headerEntryValue(e: HeaderEntry): string {
  return e.raw_value != null && e.raw_value.length > 0 ? Buffer.from(e.raw_value).toString("latin1") : (e.value ?? "");
}

function splitPath(raw: string): { path: string; query: URLSearchParams; rawQuery: string; targetError: string | undefined } {
  const hash = raw.indexOf("#");
  const noFragment = hash === -1 ? raw : raw.slice(0, hash);
  const fragmentError = hash === -1 ? undefined : "a # in the request target";
  const q = noFragment.indexOf("?");
  if (q === -1) return { path: noFragment, query: new URLSearchParams(), rawQuery: "", targetError: fragmentError };
  const rawQuery = noFragment.slice(q + 1);
  const { query, error } = goQuery(rawQuery);
  return { path: noFragment.slice(0, q), query, rawQuery, targetError: fragmentError ?? error };
}

/** net/url's default urlmaxqueryparams: past it Go (from 1.24.12, 1.25.6, 1.26) drops the whole query. */
export const GO_MAX_QUERY_PARAMS = 10_000;

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Go's url.ParseQuery as kube-apiserver's handlers call it (`req.URL.Query()`, the error ignored):
 * pairs split on `&` only; a pair holding `;` (no longer a separator since Go 1.17) or a malformed
 * %-escape is dropped and the rest is read; `+` is a space; repeated keys keep their order (Go's
 * `Get`, like URLSearchParams', returns the first). Dropping is what every kube-apiserver does, so
 * it is no reason to refuse. `error` says what cannot be read as every API server reads it:
 *  - more than GO_MAX_QUERY_PARAMS pairs: Go drops the whole query since the limit was added, an
 *    API server built with an older Go (or another urlmaxqueryparams) reads all or part of it;
 *  - a key or value whose bytes are not UTF-8 once unescaped: Go keeps the bytes, a JavaScript
 *    string cannot (nor can the SubjectAccessReview's JSON).
 */
export function goQuery(raw: string): { query: URLSearchParams; error: string | undefined } {
  const query = new URLSearchParams();
  const pairs = raw.split("&");
  if (pairs.length > GO_MAX_QUERY_PARAMS) {
    return { query, error: `more than ${GO_MAX_QUERY_PARAMS} query parameters (Go ignores the whole query)` };
  }
  let error: string | undefined;
  for (const pair of pairs) {
    if (pair === "" || pair.includes(";")) continue;
    const eq = pair.indexOf("=");
    const key = goQueryUnescape(eq === -1 ? pair : pair.slice(0, eq));
    const value = goQueryUnescape(eq === -1 ? "" : pair.slice(eq + 1));
    if (key === DROPPED || value === DROPPED) continue;
    if (key === NOT_UTF8 || value === NOT_UTF8) {
      error ??= "a query parameter that is not UTF-8";
      continue;
    }
    query.append(key, value);
  }
  return { query, error };
}

/** url.QueryUnescape fails: Go drops the pair. */
const DROPPED = Symbol("malformed %-escape");
/** The unescaped bytes are not UTF-8. */
const NOT_UTF8 = Symbol("not UTF-8");

/** url.QueryUnescape, then the bytes read as UTF-8. */
function goQueryUnescape(s: string): string | typeof DROPPED | typeof NOT_UTF8 {
  if (!s.includes("%") && !s.includes("+")) return s;
  if (/%(?![0-9A-Fa-f]{2})/.test(s)) return DROPPED;
  const chunks: Buffer[] = [];
  let text = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c !== 0x25 && c !== 0x2b) continue;
    chunks.push(Buffer.from(s.slice(text, i), "utf8"));
    if (c === 0x2b) {
      chunks.push(Buffer.of(0x20));
    } else {
      chunks.push(Buffer.of(parseInt(s.slice(i + 1, i + 3), 16)));
      i += 2;
    }
    text = i + 1;
  }
  chunks.push(Buffer.from(s.slice(text), "utf8"));
  try {
    return UTF8.decode(Buffer.concat(chunks));
  } catch {
    return NOT_UTF8;
  }
}
