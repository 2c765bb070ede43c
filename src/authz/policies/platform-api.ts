/**
 * platform-api: the platform's user-facing services (authn-api, organization-api, dcim-api and any
 * other a platform team lists) — FUN-17 §3's escalation wall, enforced once at the mesh:
 *  - UserToken only (aud=fundament-user), from `Authorization: Bearer` (functl, the Terraform
 *    provider, API-key exchange results) or the `fundament_auth` cookie from a Console origin, with
 *    the same verification as kube-api-proxy (issuer, algorithm, expiry, secret rotation);
 *  - a PluginToken is refused 401 `wrong-audience` wherever the request carries it — Authorization
 *    in any spelling, the fundament_auth cookie from any Origin, a WebSocket bearer subprotocol —,
 *    not only where portcullis reads its credential: "a plugin holding a PluginToken could replay
 *    it against organization-api/CreateAPIKey and obtain a long-lived token". Fundament's services
 *    read Authorization only when it starts with exactly "Bearer " and otherwise fall back to the
 *    cookie (common/auth/auth.go), whatever its Origin. It is counted and logged as a security
 *    event, and so authn-api's MintPluginToken accepts a UserToken only: a PluginToken cannot mint
 *    another. More than MAX_CARRIED_TOKENS tokens in one request are refused `invalid-token`, or as a
 *    replay when the one token among them that names the plugin audience verifies as a PluginToken;
 *  - on allow the service receives exactly one Fundament credential, the UserToken verified here
 *    (the services still validate it themselves: defence in depth), and portcullis adds the identity
 *    it verified: a Bearer the client spelled otherwise (`bearer`, extra blanks) goes on as
 *    `Bearer <token>`, and beside it the fundament_auth cookie is removed (its other cookies go
 *    on); a WebSocket bearer subprotocol never goes on. Client-sent x-fundament-* never reach them.
 */
import type { AuditTrail } from "../audit-trail.ts";
import { allow, deny, type Decision } from "../decision.ts";
import { carriedPluginToken, otherCarriersTrace, tooManyCredentials, FUNDAMENT_COOKIE, identifyFundamentCaller, type AcceptedCredentials, type Identified } from "../fundament-identity.ts";
import type { Policy } from "../policy.ts";
import { trace, traceVerdict } from "../trace.ts";
import type { HttpRequest } from "../../envoy/check-request.ts";
import { cookieDropped, mutations, websocketBearerDropped } from "../../headers/mutations.ts";
import { publishPluginTokenReplay } from "../../metrics/events.ts";
import { isUuid } from "../../tokens/claim-formats.ts";
import type { CredentialSource } from "../../tokens/credentials.ts";
import type { PluginClaims, TokenVerifier, UserClaims } from "../../tokens/fundament.ts";

export interface PlatformApiDeps {
  readonly tokens: TokenVerifier;
  /** Browser origins whose requests may authenticate with the session cookie (the Console's). */
  readonly cookieOrigins: ReadonlySet<string>;
  /** `platform.services[].name`: the services Envoy may name in `context_extensions.service`. */
  readonly services: ReadonlySet<string>;
}

/** The verified identity portcullis adds for services that want it; the client's own are always replaced or removed. */
export const IDENTITY_HEADERS = {
  userId: "x-fundament-user-id",
  organizationIds: "x-fundament-organization-ids",
} as const;

/**
 * Both token types are read from both places so that a PluginToken is recognised — and refused,
 * counted and logged — rather than passed over as "no credential".
 */
const READ: AcceptedCredentials = { bearer: ["user", "plugin"], cookie: ["user", "plugin"] };

/** Longest path kept as the replay metric's `method` label (a Connect RPC path is far shorter). */
const MAX_METHOD_LABEL = 128;

/** The service Envoy's route names; anything else is a route portcullis was not configured for. */
export function platformService(request: HttpRequest, services: ReadonlySet<string>): string | undefined {
  const name = request.contextExtensions["service"];
  return name !== undefined && services.has(name) ? name : undefined;
}

export function platformApi(deps: PlatformApiDeps): Policy {
  return {
    name: "platform-api",
    bodyShape: "json",
    async decide(request, trail): Promise<Decision> {
      const service = platformService(request, deps.services);
      if (!traceVerdict("platform-service", service !== undefined)) return deny("no-policy", "no platform service is configured for this route");
      const identity = await identifyFundamentCaller(request.headers, READ, deps.tokens, deps.cookieOrigins);
      trace("token", identity.kind === "deny" ? identity.reason : `${identity.claims.type} token from ${identity.source}`);
      if (identity.kind === "deny") return (await otherCarriers(request, service!, undefined, deps, trail)) ?? identity;
      const { claims } = identity;
      // aud=fundament-user: a PluginToken here is the cross-service replay of FUN-17 §3.
      trace("user-audience", claims.type === "user" ? "pass" : "fail");
      if (claims.type === "plugin") return replayRefused(request, service!, identity.source, claims, trail);
      return (await otherCarriers(request, service!, identity, deps, trail)) ?? userRequest(request, identity.token, identity.source, claims);
    },
  };
}

/**
 * A PluginToken in a carrier portcullis did not read is the same replay: the service behind may
 * read it (the module comment). Undefined when the other carriers hold none.
 */
async function otherCarriers(
  request: HttpRequest,
  service: string,
  read: Identified | undefined,
  deps: PlatformApiDeps,
  trail: AuditTrail,
): Promise<Decision | undefined> {
  const carried = await carriedPluginToken(request.headers, deps.tokens, read);
  // Traced only when they matter: nearly every request carries one credential.
  if (carried.tooMany || carried.plugin !== undefined) trace("other-carriers", otherCarriersTrace(carried));
  if (carried.plugin !== undefined) return replayRefused(request, service, carried.plugin.source, carried.plugin.claims, trail);
  return carried.tooMany ? tooManyCredentials(carried) : undefined;
}

/** The service gets the verified UserToken and no other Fundament credential, and the verified identity. */
function userRequest(request: HttpRequest, token: string, source: CredentialSource, claims: UserClaims): Decision {
  // Claims become header values only once they are known to be UUIDs (no separators, no CR/LF).
  if (!traceVerdict("organization-ids", claims.organizationIds.every(isUuid))) return deny("invalid-token", "the token's organization_ids are not UUIDs");
  const set: Record<string, string> = { [IDENTITY_HEADERS.userId]: claims.sub };
  // Without organizations the header is absent (and a client-sent one removed), never empty.
  if (claims.organizationIds.length > 0) set[IDENTITY_HEADERS.organizationIds] = claims.organizationIds.join(",");
  const remove: string[] = [];
  // The upstream must read the token verified here, and find no other beside it (the module comment).
  if (source === "bearer") {
    if (request.headers["authorization"] !== `Bearer ${token}`) set["authorization"] = `Bearer ${token}`;
    const cookie = cookieDropped(request.headers, FUNDAMENT_COOKIE);
    Object.assign(set, cookie.set);
    remove.push(...cookie.remove);
  }
  const ws = websocketBearerDropped(request.headers);
  Object.assign(set, ws.set);
  remove.push(...ws.remove);
  return allow(mutations(request.headers, { set, remove }));
}

/** The replay is refused, counted, and recorded for its audit line. */
function replayRefused(request: HttpRequest, service: string, credential: CredentialSource, claims: PluginClaims, trail: AuditTrail): Decision {
  publishPluginTokenReplay(service, request.path.slice(0, MAX_METHOD_LABEL));
  trail.replay = {
    audit: "plugin_token_replay",
    service,
    path: request.path,
    http_method: request.method,
    credential,
    user: claims.sub,
    cluster_id: claims.clusterId,
    installation_id: claims.installationId,
    installation_name: claims.installationName,
    plugin_name: claims.pluginName,
    plugin_version: claims.pluginVersion,
    definition_hash: claims.definitionHash,
    origin: request.headers["origin"] ?? "",
    request_id: request.requestId,
  };
  return deny("wrong-audience", "the token is not accepted here");
}
