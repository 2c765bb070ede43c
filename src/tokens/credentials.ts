/**
 * Where a caller's credential is read from. Pure: headers in, one token (or why not) out.
 * A value that holds more than one credential is invalid, never "the first one" (Envoy merges
 * repeated headers with commas).
 */

export type CredentialSource = "bearer" | "cookie" | "websocket-protocol" | "header";

export type CredentialLookup =
  | { readonly kind: "absent" }
  | { readonly kind: "invalid"; readonly detail: string }
  | { readonly kind: "found"; readonly source: CredentialSource; readonly token: string };

/** Larger tokens are refused before any parsing: no legitimate Fundament token comes near this. */
export const MAX_TOKEN_LENGTH = 8192;

/** The three base64url segments of a compact JWS; anything else is not a token we verify. */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** Kubernetes WebSocket clients carry their bearer token as this subprotocol prefix + base64url(token). */
export const WEBSOCKET_BEARER_PREFIX = "base64url.bearer.authorization.k8s.io.";

const ABSENT: CredentialLookup = { kind: "absent" };

function asToken(source: CredentialSource, token: string): CredentialLookup {
  if (token.length > MAX_TOKEN_LENGTH) return { kind: "invalid", detail: "token too large" };
  if (!COMPACT_JWS.test(token)) return { kind: "invalid", detail: "token is not a compact JWS" };
  return { kind: "found", source, token };
}

/** `Authorization: Bearer <jwt>`; the scheme is case-insensitive (RFC 7235), exactly one credential. */
export function bearerToken(headers: Readonly<Record<string, string>>): CredentialLookup {
  const value = headers["authorization"];
  if (value === undefined || value.trim() === "") return ABSENT;
  const match = /^[ \t]*([A-Za-z]+)[ ]+(\S+)[ \t]*$/.exec(value);
  if (match === null) return { kind: "invalid", detail: "malformed authorization header" };
  if (match[1]!.toLowerCase() !== "bearer") return { kind: "invalid", detail: "authorization scheme is not Bearer" };
  return asToken("bearer", match[2]!);
}

/**
 * Whether the session cookie may count as a credential for this request. A browser attaches the
 * cookie to every request to its domain, including a plain GET navigation or form from another
 * site's page (a plugin's), which carries no Origin. So the cookie counts only when the browser
 * vouches for the page that sent it: an Origin that is one of `trustedOrigins` (the Console's), or,
 * without an Origin, `Sec-Fetch-Site: same-origin` (browsers set both; a page cannot forge them).
 * Anything else — another Origin, a cross- or same-site request, a client that sends neither, two
 * values merged by Envoy — is not authenticated by its cookie; it can use Authorization.
 */
export function cookieCredentialAllowed(headers: Readonly<Record<string, string>>, trustedOrigins: ReadonlySet<string>): boolean {
  const origin = headers["origin"];
  if (origin !== undefined) return trustedOrigins.has(origin);
  return headers["sec-fetch-site"] === "same-origin";
}

/** The named cookie; two cookies of that name are invalid (which one would the upstream see?). */
export function cookieToken(headers: Readonly<Record<string, string>>, cookieName: string): CredentialLookup {
  const header = headers["cookie"];
  if (header === undefined) return ABSENT;
  const values: string[] = [];
  for (const pair of header.split(/[;,]/)) {
    const eq = pair.indexOf("=");
    if (eq === -1) continue;
    if (pair.slice(0, eq).trim() === cookieName) values.push(pair.slice(eq + 1).trim());
  }
  if (values.length === 0) return ABSENT;
  if (values.length > 1) return { kind: "invalid", detail: `more than one ${cookieName} cookie` };
  return asToken("cookie", values[0]!);
}

/** A named header holding the bare token; two values (merged by Envoy with ", ") are not a compact JWS, so invalid. */
export function headerToken(headers: Readonly<Record<string, string>>, headerName: string): CredentialLookup {
  const value = headers[headerName];
  if (value === undefined || value.trim() === "") return ABSENT;
  return asToken("header", value.trim());
}

/** `Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.<base64url(jwt)>`, as kubectl sends it. */
export function websocketBearerToken(headers: Readonly<Record<string, string>>): CredentialLookup {
  const header = headers["sec-websocket-protocol"];
  if (header === undefined) return ABSENT;
  const encoded = header
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.startsWith(WEBSOCKET_BEARER_PREFIX))
    .map((p) => p.slice(WEBSOCKET_BEARER_PREFIX.length));
  if (encoded.length === 0) return ABSENT;
  if (encoded.length > 1) return { kind: "invalid", detail: "more than one bearer subprotocol" };
  const value = encoded[0]!;
  if (value.length > MAX_TOKEN_LENGTH * 2 || !/^[A-Za-z0-9_-]+$/.test(value)) {
    return { kind: "invalid", detail: "malformed bearer subprotocol" };
  }
  return asToken("websocket-protocol", Buffer.from(value, "base64url").toString("latin1"));
}

/**
 * The subprotocol list without any bearer entry (undefined when nothing else is left): the injected
 * credential travels in Authorization only, never in a header that proxies and logs do not redact.
 */
export function withoutWebsocketBearer(headerValue: string): string | undefined {
  const kept = headerValue
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "" && !p.startsWith(WEBSOCKET_BEARER_PREFIX));
  return kept.length === 0 ? undefined : kept.join(", ");
}

/**
 * Most tokens one request may carry across all its carriers. A request carries one credential, two
 * when a browser adds its cookie to a Bearer call; more is refused without verifying them all, so a
 * request cannot buy one signature check per token it stuffs into a header.
 */
export const MAX_CARRIED_TOKENS = 4;

export interface CarriedToken {
  readonly source: CredentialSource;
  readonly token: string;
}

/**
 * The most Authorization, Cookie and Sec-WebSocket-Protocol may hold together, in characters (at
 * most their bytes). Above Envoy's default header limit (60 KiB, max_request_headers_kb), so nothing
 * Envoy forwards by default is refused; a larger request is refused before any of them is split.
 */
export const MAX_CREDENTIAL_HEADERS_LENGTH = 64 * 1024;

/** Whether the credential carriers together exceed MAX_CREDENTIAL_HEADERS_LENGTH. */
export function credentialHeadersTooLarge(headers: Readonly<Record<string, string>>): boolean {
  const length = (headers["authorization"]?.length ?? 0) + (headers["cookie"]?.length ?? 0) + (headers["sec-websocket-protocol"]?.length ?? 0);
  return length > MAX_CREDENTIAL_HEADERS_LENGTH;
}

/**
 * Whether carriedTokens() holds nothing but the credential read from `readSource`: no cookie, no
 * subprotocol, and Authorization absent or the carrier read — bearerToken() reads exactly one token
 * there (a scheme, then one run without whitespace that is a compact JWS), so it holds no other.
 * Nearly every request: nothing to split or verify.
 */
export function carriesNoOtherToken(headers: Readonly<Record<string, string>>, readSource: CredentialSource | undefined): boolean {
  if (headers["cookie"] !== undefined || headers["sec-websocket-protocol"] !== undefined) return false;
  return headers["authorization"] === undefined || readSource === "bearer";
}

/**
 * Every token the request carries wherever a Fundament service or a Kubernetes client library
 * could read one, whether or not the route reads it as its credential: each compact JWS in
 * Authorization (any scheme, any spelling, merged values too), each value of the named cookie
 * (whatever the Origin: the services behind read it without asking), each WebSocket bearer
 * subprotocol. What is not a compact JWS is no token anyone verifies and is left out. Lazy: a
 * reader that has seen enough stops.
 */
export function* carriedTokens(headers: Readonly<Record<string, string>>, cookieName: string): Generator<CarriedToken> {
  const isToken = (token: string) => token.length <= MAX_TOKEN_LENGTH && COMPACT_JWS.test(token);
  for (const part of (headers["authorization"] ?? "").split(/[\s,]+/)) if (isToken(part)) yield { source: "bearer", token: part };
  for (const pair of (headers["cookie"] ?? "").split(/[;,]/)) {
    const eq = pair.indexOf("=");
    if (eq === -1 || pair.slice(0, eq).trim() !== cookieName) continue;
    const token = pair.slice(eq + 1).trim();
    if (isToken(token)) yield { source: "cookie", token };
  }
  for (const protocol of (headers["sec-websocket-protocol"] ?? "").split(",")) {
    const entry = protocol.trim();
    if (!entry.startsWith(WEBSOCKET_BEARER_PREFIX)) continue;
    const encoded = entry.slice(WEBSOCKET_BEARER_PREFIX.length);
    if (!/^[A-Za-z0-9_-]+$/.test(encoded) || encoded.length > MAX_TOKEN_LENGTH * 2) continue;
    const token = Buffer.from(encoded, "base64url").toString("latin1");
    if (isToken(token)) yield { source: "websocket-protocol", token };
  }
}

/**
 * The Cookie header without any pair of the named cookie: the value itself when it holds none,
 * undefined when nothing else is left. Pairs are separated by `;` as browsers send them and as Go
 * reads them; a pair that hides the cookie behind a comma (`a=1, name=…`, which cookieToken reads
 * as two pairs) is dropped whole: the token goes nowhere, whichever reading the upstream makes.
 * Every other pair goes on verbatim.
 */
export function withoutCookie(headerValue: string, cookieName: string): string | undefined {
  const named = (pair: string) => {
    const eq = pair.indexOf("=");
    return eq !== -1 && pair.slice(0, eq).trim() === cookieName;
  };
  const segments = headerValue.split(";");
  const kept = segments.filter((segment) => !segment.split(",").some(named));
  if (kept.length === segments.length) return headerValue;
  const rest = kept.map((segment) => segment.trim()).filter((segment) => segment !== "");
  return rest.length === 0 ? undefined : rest.join("; ");
}

/**
 * Whether a header value holds a token the named issuer minted, or one for the named audiences,
 * read from its claims without verifying it: what decides is what a service behind could accept,
 * and a token portcullis cannot verify (expired, signed with a key it no longer trusts) may still
 * verify there. Pure; no key set is consulted.
 */
export function holdsTokenOf(value: string | undefined, issuer: string, audiences: readonly string[]): boolean {
  if (value === undefined) return false;
  return value.split(/[\s,]+/).some((part) => {
    if (part.length > MAX_TOKEN_LENGTH || !COMPACT_JWS.test(part)) return false;
    const claims = unverifiedClaims(part);
    if (claims === undefined) return false;
    return Object.entries(claims).some(([name, claim]) => {
      const key = goFieldName(name);
      if (key === "iss") return claim === issuer;
      if (key !== "aud") return false;
      const auds: unknown[] = typeof claim === "string" ? [claim] : Array.isArray(claim) ? claim : [];
      return auds.some((a) => typeof a === "string" && audiences.includes(a));
    });
  });
}

/**
 * A JSON key as Go's encoding/json matches it to a struct field (golang-jwt's claims): without
 * regard to case, and with U+017F (ſ) folding to s — so `ISS` or `iſs` are the `iss` a Go service reads.
 */
function goFieldName(key: string): string {
  return key.toLowerCase().replaceAll("\u017f", "s");
}

function unverifiedClaims(token: string): Record<string, unknown> | undefined {
  try {
    const payload: unknown = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8"));
    return typeof payload === "object" && payload !== null && !Array.isArray(payload) ? (payload as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
