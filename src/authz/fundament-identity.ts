/**
 * The identity phase for Fundament tokens: find the one credential the route accepts, verify it,
 * and check its audience is accepted in that position (FUN-17 §3 audience binding).
 */
import { type Deny, deny } from "./decision.ts";
import {
  bearerToken,
  carriedTokens,
  cookieCredentialAllowed,
  cookieToken,
  type CredentialLookup,
  type CredentialSource,
  websocketBearerToken,
} from "../tokens/credentials.ts";
import type { PluginClaims, TokenVerifier, UserClaims } from "../tokens/fundament.ts";

export const FUNDAMENT_COOKIE = "fundament_auth";

const NO_ORIGINS: ReadonlySet<string> = new Set();
const ABSENT: CredentialLookup = { kind: "absent" };

export type TokenType = "user" | "plugin";

/** Which token types a route accepts from which source. */
export type AcceptedCredentials = Readonly<Partial<Record<CredentialSource, readonly TokenType[]>>>;

export interface Identified {
  readonly kind: "identified";
  readonly claims: UserClaims | PluginClaims;
  readonly source: CredentialSource;
  /** The token that was verified, as read from `source`. */
  readonly token: string;
}

/**
 * Bearer and WebSocket subprotocol are explicit credentials and may not both be present; a cookie is
 * only read when neither is (a browser sends it along with everything).
 */
export async function identifyFundamentCaller(
  headers: Readonly<Record<string, string>>,
  accepted: AcceptedCredentials,
  verifier: TokenVerifier,
  cookieOrigins: ReadonlySet<string> = NO_ORIGINS,
): Promise<Identified | Deny> {
  const bearer = accepted.bearer ? bearerToken(headers) : ABSENT;
  const websocket = accepted["websocket-protocol"] ? websocketBearerToken(headers) : ABSENT;
  if (bearer.kind === "invalid" || websocket.kind === "invalid") return deny("invalid-token", "the credential is malformed");
  if (bearer.kind === "found" && websocket.kind === "found") return deny("invalid-token", "more than one credential");
  let credential = bearer.kind === "found" ? bearer : websocket.kind === "found" ? websocket : undefined;
  // The cookie only from a page the browser vouches for (a listed Origin, or same-origin): browsers
  // send it along with cross-site navigations, forms and WebSocket upgrades, which skip CORS; without
  // this a plugin page could act with the user's whole reach instead of user ∩ plugin.
  if (credential === undefined && accepted.cookie && cookieCredentialAllowed(headers, cookieOrigins)) {
    const cookie = cookieToken(headers, FUNDAMENT_COOKIE);
    if (cookie.kind === "invalid") return deny("invalid-token", "the credential is malformed");
    if (cookie.kind === "found") credential = cookie;
  }
  if (credential === undefined) return deny("missing-token", "no credentials");

  const verified = await verifier.verify(credential.token);
  if (!verified.ok) return deny("invalid-token", `the token is not valid: ${verified.detail}`);
  const { claims } = verified;
  if (claims.type === "other-audience" || !(accepted[credential.source] ?? []).includes(claims.type)) {
    return deny("wrong-audience", "the token is not accepted here");
  }
  return { kind: "identified", claims, source: credential.source, token: credential.token };
}

/** A PluginToken a request carries, and where. */
export interface CarriedPluginToken {
  readonly source: CredentialSource;
  readonly claims: PluginClaims;
}

export interface CarriedPluginTokens {
  /** The first carried token that verifies as a PluginToken, if any. */
  readonly plugin: CarriedPluginToken | undefined;
  /** More than MAX_CARRIED_TOKENS tokens: none was verified, the request is to be refused. */
  readonly tooMany: boolean;
}

/**
 * Whether the request carries a PluginToken in any carrier (credentials.ts carriedTokens: every
 * Authorization token, every fundament_auth cookie whatever the Origin, every WebSocket bearer
 * subprotocol) other than `read`, the credential identifyFundamentCaller() verified. It reads one
 * credential, the one the route accepts; the services behind and a probing plugin are not bound
 * by that choice, so a PluginToken anywhere else must be found too. Throws as verify() does.
 */
export async function carriedPluginToken(
  headers: Readonly<Record<string, string>>,
  verifier: TokenVerifier,
  read?: Pick<Identified, "source" | "token">,
): Promise<CarriedPluginTokens> {
  const carried = carriedTokens(headers, FUNDAMENT_COOKIE);
  if (carried.kind === "too-many") return { plugin: undefined, tooMany: true };
  for (const { source, token } of carried.tokens) {
    if (source === read?.source && token === read.token) continue;
    const verified = await verifier.verify(token);
    if (verified.ok && verified.claims.type === "plugin") return { plugin: { source, claims: verified.claims }, tooMany: false };
  }
  return { plugin: undefined, tooMany: false };
}
