/**
 * The identity phase for Fundament tokens: find the one credential the route accepts, verify it,
 * and check its audience is accepted in that position (FUN-17 §3 audience binding).
 */
import { type Deny, deny } from "./decision.ts";
import {
  bearerToken,
  type CarriedToken,
  carriedTokens,
  cookieCredentialAllowed,
  carriesNoOtherToken,
  credentialHeadersTooLarge,
  cookieToken,
  type CredentialLookup,
  type CredentialSource,
  MAX_CARRIED_TOKENS,
  websocketBearerToken,
} from "../tokens/credentials.ts";
import { mentionsPluginAudience, type PluginClaims, type TokenVerifier, type UserClaims } from "../tokens/fundament.ts";

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
  if (credentialHeadersTooLarge(headers)) return deny("invalid-token", "credential headers too large");
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
  /** The carried token, other than the one read, that verifies as a PluginToken, if any. */
  readonly plugin: CarriedPluginToken | undefined;
  /** More than MAX_CARRIED_TOKENS tokens: the request is to be refused, whatever `plugin` is. */
  readonly tooMany: boolean;
  /**
   * Tokens other than the one read whose unverified payload names the plugin audience. Past
   * MAX_CARRIED_TOKENS only the first is verified: the count says in the decision's trace that a
   * PluginToken may hide behind a forged one.
   */
  readonly pluginAudienceCandidates: number;
}

/**
 * Whether the request carries a PluginToken in any carrier (credentials.ts carriedTokens: every
 * Authorization token, every fundament_auth cookie whatever the Origin, every WebSocket bearer
 * subprotocol) other than `read`, the credential identifyFundamentCaller() verified. It reads one
 * credential, the one the route accepts; the services behind and a probing plugin are not bound
 * by that choice, so a PluginToken anywhere else must be found too. Rejects as verify() does.
 *
 * Carriers over MAX_CREDENTIAL_HEADERS_LENGTH together are not read: identifyFundamentCaller(),
 * which every policy runs first, refuses such a request, and nothing here splits them. Up to
 * MAX_CARRIED_TOKENS tokens, each is verified. Past it the request is refused, but a plugin must not
 * probe unaudited by stuffing tokens: exactly one is verified, the first whose unverified payload
 * names the plugin audience, never one per stuffed value. A forged candidate put before the real one
 * hides it from the audit line, and buys nothing: the refusal is the same, and logged with the
 * number of candidates.
 */
export function carriedPluginToken(
  headers: Readonly<Record<string, string>>,
  verifier: TokenVerifier,
  read?: Pick<Identified, "source" | "token">,
): Promise<CarriedPluginTokens> {
  if (credentialHeadersTooLarge(headers) || carriesNoOtherToken(headers, read?.source)) return NONE_CARRIED;
  return verifiedCarriers(headers, verifier, read);
}

/** Settled once and shared: the answer that reads nothing. */
const NONE_CARRIED: Promise<CarriedPluginTokens> = Promise.resolve(Object.freeze({ plugin: undefined, tooMany: false, pluginAudienceCandidates: 0 }));

async function verifiedCarriers(
  headers: Readonly<Record<string, string>>,
  verifier: TokenVerifier,
  read: Pick<Identified, "source" | "token"> | undefined,
): Promise<CarriedPluginTokens> {
  const others: CarriedToken[] = [];
  let candidate: CarriedToken | undefined;
  let candidates = 0;
  let count = 0;
  // Every value is looked at (bounded by the size cap): the candidates are counted, not parsed.
  for (const carried of carriedTokens(headers, FUNDAMENT_COOKIE)) {
    count += 1;
    if (carried.source === read?.source && carried.token === read.token) continue;
    if (count <= MAX_CARRIED_TOKENS) others.push(carried);
    if (mentionsPluginAudience(carried.token)) {
      candidates += 1;
      candidate ??= carried;
    }
  }
  const tooMany = count > MAX_CARRIED_TOKENS;
  const outcome = { tooMany, pluginAudienceCandidates: candidates };
  for (const { source, token } of tooMany ? (candidate === undefined ? [] : [candidate]) : others) {
    const verified = await verifier.verify(token);
    if (verified.ok && verified.claims.type === "plugin") return { plugin: { source, claims: verified.claims }, ...outcome };
  }
  return { plugin: undefined, ...outcome };
}

/**
 * The refusal of more than MAX_CARRIED_TOKENS tokens. When none verified as a PluginToken, its log
 * line counts the plugin-audience candidates: a PluginToken may hide behind a forged first one.
 */
export function tooManyCredentials(carried: CarriedPluginTokens): Deny {
  const refused = deny("invalid-token", "too many credentials");
  return carried.plugin === undefined ? { ...refused, logged: { plugin_audience_candidates: carried.pluginAudienceCandidates } } : refused;
}

/** The decision trace's step for the other carriers, when they matter: a PluginToken found, or too many tokens. */
export function otherCarriersTrace(carried: CarriedPluginTokens): string {
  if (!carried.tooMany) return `plugin token in ${carried.plugin?.source ?? "none"}`;
  return carried.plugin === undefined ? `too many tokens; plugin_audience_candidates: ${carried.pluginAudienceCandidates}` : "too many tokens";
}
