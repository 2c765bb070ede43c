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
