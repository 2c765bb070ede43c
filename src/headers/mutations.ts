/**
 * Header mutations on allow: what the upstream request gets set, overwritten or removed.
 * Hygiene rules (DESIGN.md "Header hygiene") live here so every policy applies them the same way.
 */
import { withoutCookie, withoutWebsocketBearer } from "../tokens/credentials.ts";

export interface HeaderMutations {
  /** Set on the upstream request, overwriting whatever the client sent under that name. */
  readonly set: Readonly<Record<string, string>>;
  /** Removed from the upstream request. */
  readonly remove: readonly string[];
}

/** Prefixes of headers that identify the caller to upstreams; a client can never smuggle them through. */
const CALLER_IDENTITY_PREFIXES = ["x-fundament-", "x-konfidence-"] as const;

export function isCallerIdentityHeader(name: string): boolean {
  return name.startsWith(CALLER_IDENTITY_PREFIXES[0]) || name.startsWith(CALLER_IDENTITY_PREFIXES[1]);
}

declare const checkedBrand: unique symbol;
/**
 * A header value isSafeHeaderValue accepted where it was produced — a ServiceAccount token once,
 * when it was cached (src/kube-calls/service-account-tokens.ts), not in every response that carries it.
 */
export type SafeHeaderValue = string & { readonly [checkedBrand]: true };

export function safeHeaderValue(value: string): SafeHeaderValue | undefined {
  return isSafeHeaderValue(value) ? (value as SafeHeaderValue) : undefined;
}

/** `Bearer <token>`: a safe token after a safe scheme is safe. */
export function bearerCredential(token: SafeHeaderValue): SafeHeaderValue {
  return `Bearer ${token}` as SafeHeaderValue;
}

const NONE_CHECKED: Readonly<Record<string, SafeHeaderValue>> = Object.freeze({});
const NONE_REMOVED: readonly string[] = Object.freeze([]);

/** What an allow does to the upstream request, beyond the hygiene mutations() always applies. */
export interface MutationOptions {
  /** Set, overwriting whatever the client sent under that name; the values are checked here. */
  readonly set?: Record<string, string>;
  /** Dropped, when the request carries them. */
  readonly remove?: readonly string[];
  /** Set like `set`, with values checked where they were produced (a ServiceAccount token). */
  readonly checked?: Readonly<Record<string, SafeHeaderValue>>;
}

/**
 * Builds the mutations for an allow: `checked` and `set` overwrite (`set`'s values are checked here,
 * `checked`'s were where they were produced), `remove` drops those of the named headers the request
 * carries, and every caller-identity header the client sent that portcullis does not set itself is
 * removed as well.
 */
export function mutations(
  requestHeaders: Readonly<Record<string, string>>,
  { set = {}, remove = NONE_REMOVED, checked = NONE_CHECKED }: MutationOptions = {},
): HeaderMutations {
  for (const name in set) {
    if (!isSafeHeaderValue(set[name]!)) {
      // A programming mistake: callers validate claims before they become headers.
      throw new TypeError(`unsafe value for header ${name}`);
    }
  }
  const all = checked === NONE_CHECKED ? set : { ...checked, ...set };
  const removed: string[] = [];
  const drop = (name: string) => {
    if (!(name in all) && !removed.includes(name)) removed.push(name);
  };
  for (const name of remove) if (name in requestHeaders) drop(name);
  for (const name in requestHeaders) if (isCallerIdentityHeader(name)) drop(name);
  return { set: all, remove: removed.sort() };
}

/**
 * The mutations that keep a caller's WebSocket bearer subprotocol (a credential) from travelling on,
 * whatever the route: the list rewritten without it, or the header removed when nothing else is
 * left, or when what is left is not a safe header value (the client's own text, which portcullis
 * will not re-emit; a TypeError from mutations() would be a 500).
 */
export function websocketBearerDropped(requestHeaders: Readonly<Record<string, string>>): { set: Record<string, string>; remove: string[] } {
  const protocols = requestHeaders["sec-websocket-protocol"];
  if (protocols === undefined) return { set: {}, remove: [] };
  const rest = withoutWebsocketBearer(protocols);
  if (rest === protocols) return { set: {}, remove: [] };
  if (rest === undefined || !isSafeHeaderValue(rest)) return { set: {}, remove: ["sec-websocket-protocol"] };
  return { set: { "sec-websocket-protocol": rest }, remove: [] };
}

/**
 * The mutations that keep one cookie (a credential) from travelling on while every other cookie
 * does: the Cookie header rewritten without it, or removed when nothing else is left or when what
 * is left is not a safe header value (as websocketBearerDropped).
 */
export function cookieDropped(requestHeaders: Readonly<Record<string, string>>, cookieName: string): { set: Record<string, string>; remove: string[] } {
  const cookies = requestHeaders["cookie"];
  if (cookies === undefined) return { set: {}, remove: [] };
  const rest = withoutCookie(cookies, cookieName);
  if (rest === cookies) return { set: {}, remove: [] };
  if (rest === undefined || !isSafeHeaderValue(rest)) return { set: {}, remove: ["cookie"] };
  return { set: { cookie: rest }, remove: [] };
}

/** Visible ASCII and spaces only: no CR, LF, NUL or other control characters, nothing non-ASCII. */
export function isSafeHeaderValue(value: string): boolean {
  return /^[\x20-\x7e]*$/.test(value);
}
