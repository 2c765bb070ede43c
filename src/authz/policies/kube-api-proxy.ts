/**
 * kube-api-proxy: the gateway, the single policy-enforcement point for the Kubernetes data path
 * (FUN-17 §4, §11). It accepts both token types:
 *  - UserToken: unchanged path, now enforcing aud=fundament-user; the user's own per-user
 *    ServiceAccount token is injected downstream.
 *  - PluginToken: the gates of §11 in order, then the plugin installation's ServiceAccount token is
 *    injected, so the cluster caps the call at the plugin's RBAC after the gateway capped it at the
 *    user's: effective permission is exactly user ∩ plugin.
 * An allowed stream (a watch, exec, attach, port-forward, logs, proxy) is bounded so it never
 * outlives its token, a PluginToken's watches within `streams.pluginWatchMaxSeconds` (stream-bound.ts).
 * Every request that carries a PluginToken writes one audit line, on every outcome (DESIGN.md "Audit
 * line"), whichever carrier holds it: the cookie takes a UserToken only, and a PluginToken found
 * there — planted by a plugin page on the parent domain, say — refuses the request 401
 * `wrong-audience` whatever else it carries; a PluginToken beside another credential, or in a
 * carrier the request's form does not read (the cookie on a proxy subresource, an Origin the
 * Console does not have), is audited with the denial the request gets.
 */
import type { AuditTrail } from "../audit-trail.ts";
import { allow, type Decision, deny, type Deny } from "../decision.ts";
import { carriedPluginToken, otherCarriersTrace, tooManyCredentials, identifyFundamentCaller, type AcceptedCredentials, type Identified } from "../fundament-identity.ts";
import type { Policy } from "../policy.ts";
import { askedOf, type KubeRequest, readKubeRequest, reviewAttributes } from "../kube-request.ts";
import type {
  AccessAttributes,
  ClusterViewCheck,
  Installation,
  MintedToken,
  InstallationLookup,
  KnownClusters,
  ServiceAccountTokens,
  UserAccessReview,
} from "../../ports/policy-ports.ts";
import { prefetch } from "../started.ts";
import { trace, traceVerdict } from "../trace.ts";
import type { HttpRequest } from "../../envoy/check-request.ts";
import { impersonates } from "../../headers/impersonation.ts";
import { mutations, type SafeHeaderValue, websocketBearerDropped } from "../../headers/mutations.ts";
import { KUBE_API_CLUSTER_HEADER } from "../../envoy/kube-api-upstream.ts";
import { parseGatewayPath } from "../../kube-reading/gateway-path.ts";
import type { RequestInfo } from "../../kube-reading/request-info.ts";
import { pluginServiceAccount, userServiceAccount } from "../../kube-reading/service-accounts.ts";
import { installationDenial, type InstallationVerdict, installationVerdict } from "../installation.ts";
import { revokedDenial, tokenSubject } from "../revocation-gate.ts";
import type { RevocationList } from "../../kube-watch/revocations.ts";
import { type StreamLimits, streamBound } from "../stream-bound.ts";
import { streamKindOf } from "../../kube-reading/long-running.ts";
import type { PluginClaims, TokenVerifier, UserClaims } from "../../tokens/fundament.ts";

export interface KubeApiProxyDeps {
  readonly tokens: TokenVerifier;
  readonly clusters: KnownClusters;
  readonly canView: ClusterViewCheck;
  readonly userAccess: UserAccessReview;
  readonly installations: InstallationLookup;
  readonly serviceAccountTokens: ServiceAccountTokens;
  /** The sub-TTL deny-list (FUN-17 §10); NO_REVOCATIONS when none is configured. */
  readonly revocations: RevocationList;
  /** Browser origins whose requests may authenticate with the session cookie (the Console's). */
  readonly cookieOrigins: ReadonlySet<string>;
  /** FUN-19's local-dev escape hatch: accept installations whose definition hash is not pinned. */
  readonly allowUnpinned: boolean;
  /** A PluginToken watch ends within this (`streams.pluginWatchMaxSeconds`); a stream never outlives its token. */
  readonly pluginWatchMaxSeconds: number;
}

/** kubectl and client libraries send Bearer or the WebSocket subprotocol; the Console sends the cookie (UserToken only). */
const ACCEPTED: AcceptedCredentials = {
  bearer: ["user", "plugin"],
  "websocket-protocol": ["user", "plugin"],
  cookie: ["user"],
};

/**
 * The proxy subresources relay whatever a pod, service or node serves, HTML and scripts included. A
 * page served there is same-origin with every kube-api-proxy path, so it could act with the
 * session cookie (Sec-Fetch-Site: same-origin): proxy requests need an explicit credential.
 */
const ACCEPTED_ON_PROXY: AcceptedCredentials = { bearer: ACCEPTED.bearer, "websocket-protocol": ACCEPTED["websocket-protocol"] };

function relaysPages(asked: RequestInfo | undefined): boolean {
  return asked?.isResourceRequest === true && (asked.verb === "proxy" || asked.subresource === "proxy");
}

export function kubeApiProxy(deps: KubeApiProxyDeps): Policy {
  return {
    name: "kube-api-proxy",
    bodyShape: "kube-status",
    async decide(request, trail) {
      const target = parseGatewayPath(request.path);
      trace("gateway-path", target.kind);
      if (target.kind === "malformed") return auditedBadRequest(request, target.detail, deps, trail);
      // Read once, before any gate (pure): every audit line, an early denial's too, says what was asked.
      const kube = readKubeRequest(request, target.rest);
      trail.asked = askedOf(kube);
      const identity = await identifyFundamentCaller(request.headers, relaysPages(trail.asked) ? ACCEPTED_ON_PROXY : ACCEPTED, deps.tokens, deps.cookieOrigins);
      trace("token", identity.kind === "deny" ? identity.reason : `${identity.claims.type} token from ${identity.source}`);
      // Audited from here on, whatever follows: reading another carrier's token can fail (a JWKS
      // outage), and check() then audits the denial it gives.
      const installation = identity.kind !== "deny" && identity.claims.type === "plugin" ? auditPluginToken(trail, identity.claims, deps) : undefined;
      const carried = await otherCarriers(request, identity, deps, trail);
      if (carried !== undefined) return carried;
      if (identity.kind === "deny") return identity;
      const { claims } = identity;
      return claims.type === "user"
        ? userRequest(request, target.clusterId, kube, claims, deps)
        : // Set above for the request's own PluginToken.
          pluginRequest(request, target.clusterId, kube, claims, installation!, deps);
    },
    // Request mode refuses paths and headers the gateway did not normalise (request-mode.ts); a
    // PluginToken request is audited all the same.
    refuse: (request, detail, trail) => auditedBadRequest(request, detail, deps, trail),
  };
}

/**
 * What the carriers identifyFundamentCaller() did not take as the credential change: a PluginToken
 * in the cookie (UserToken only) refuses the request; one elsewhere makes the identity's denial an
 * audited one; too many tokens are refused `invalid-token`. The denial; undefined when nothing changes. A
 * PluginToken found is recorded for the audit line, unless the request's own already is, too many
 * tokens or not.
 */
async function otherCarriers(request: HttpRequest, identity: Identified | Deny, deps: KubeApiProxyDeps, trail: AuditTrail): Promise<Deny | undefined> {
  const read = identity.kind === "deny" ? undefined : identity;
  const carried = await carriedPluginToken(request.headers, deps.tokens, read);
  // Traced only when they matter: nearly every request carries one credential.
  if (carried.tooMany || carried.plugin !== undefined) trace("other-carriers", otherCarriersTrace(carried));
  if (carried.plugin !== undefined && trail.pluginToken === undefined) auditPluginToken(trail, carried.plugin.claims, deps);
  if (carried.tooMany) return tooManyCredentials(carried);
  if (carried.plugin === undefined) return undefined;
  return carried.plugin.source === "cookie" || identity.kind !== "deny" ? deny("wrong-audience", "the token is not accepted here") : identity;
}

/** Gate 6's verdict, reached before any gate (the index is read synchronously), or the error it threw there. */
type EarlyVerdict = { readonly read: true; readonly verdict: InstallationVerdict } | { readonly read: false; readonly error: unknown };

/**
 * The request carries a PluginToken: it is audited on every outcome, with the index's pin at request
 * time. The installation looked up for that pin, and whether it is usable, are gate 6's, read now:
 * unsynced, the index throws (the pin then unknown, "") and the error is rethrown at gate 6.
 */
function auditPluginToken(trail: AuditTrail, claims: PluginClaims, deps: KubeApiProxyDeps): EarlyVerdict {
  trail.pluginToken = claims;
  try {
    const found = tokenInstallation(claims, deps);
    trail.pinnedDefinitionHash = found?.definitionHash ?? "";
    return { read: true, verdict: installationVerdict(found, claims, deps.allowUnpinned) };
  } catch (error) {
    return { read: false, error };
  }
}

/** The verdict auditPluginToken() read; its error, thrown where gate 6 reports it. */
function verdictAtGate6(early: EarlyVerdict): InstallationVerdict {
  if (!early.read) throw early.error;
  return early.verdict;
}

/**
 * A 400 whoever asks (a gateway path whose cluster id cannot be read, or a request request mode
 * refuses); a request carrying a PluginToken, in any carrier, is still audited, as on every
 * outcome (DESIGN.md "Audit line"). Nothing was read before this refusal, so the tokens are read
 * here, only for that line.
 */
async function auditedBadRequest(request: HttpRequest, detail: string, deps: KubeApiProxyDeps, trail: AuditTrail): Promise<Deny> {
  try {
    const claims = (await carriedPluginToken(request.headers, deps.tokens)).plugin?.claims;
    if (claims !== undefined) auditPluginToken(trail, claims, deps);
  } catch {
    // Not knowing who asked does not change the answer.
  }
  return deny("bad-request", detail);
}

/** The installation the PluginToken names, from the index of the cluster it is bound to. Throws while that index is not synced. */
function tokenInstallation(claims: PluginClaims, deps: KubeApiProxyDeps): Installation | undefined {
  return deps.clusters.has(claims.clusterId) ? deps.installations.byUid(claims.clusterId, claims.installationId) : undefined;
}

/** UserToken: can_view, then forward with the user's own per-user ServiceAccount token. */
async function userRequest(
  request: HttpRequest,
  clusterId: string,
  kube: KubeRequest,
  claims: UserClaims,
  deps: KubeApiProxyDeps,
): Promise<Decision> {
  const known = deps.clusters.has(clusterId);
  const sa = userServiceAccount(claims.sub);
  const canView = prefetch(() => deps.canView.canView(claims.sub, clusterId));
  const token = prefetch(() => (known ? deps.serviceAccountTokens.token(clusterId, sa.namespace, sa.name) : NO_TOKEN));

  if (!traceVerdict("can_view", await canView)) return deny("can-view-denied", "you cannot view this cluster");
  if (!traceVerdict("cluster-known", known)) return deny("unknown-cluster", "no such cluster");
  // The user acts as themself: a request malformed past its path is kube-apiserver's to refuse, to them.
  const pathRefused = kube.kind === "bad-request" && kube.inPath;
  trace("kube-path", kube.kind === "not-found" ? "not-found" : pathRefused ? "malformed" : "ok");
  if (kube.kind === "not-found") return deny("not-found", "not a Kubernetes API path");
  if (pathRefused) return deny("bad-request", kube.detail);
  // A stream is bounded by the user's token: one whose query the API server may read otherwise cannot
  // be, nor can a request whose query it reads otherwise (a pair not UTF-8, past Go's parameter
  // limit: request.targetError), for what was not read may be its `watch`.
  if (kube.kind === "bad-request" && (request.targetError !== undefined || streamKindOf(kube.asked!) !== undefined)) return deny("bad-request", kube.detail);
  const limits = { tokenExp: claims.exp, watchMaxSeconds: undefined };
  const bound = kube.kind === "ok" ? streamBound(request, kube.info, { ...limits, nowMs: Date.now() }) : undefined;
  if (bound?.kind === "deny") return bound;
  const saToken = await token;
  trace("user-serviceaccount-token", saToken === undefined ? "no such serviceaccount" : "issued");
  if (saToken === undefined) return deny("user-unavailable", "you have no identity on this cluster yet");
  return allowBounded(request, saToken, kube, limits);
}

/**
 * PluginToken, FUN-17 §11, in the seed's order: the local gates; then the remote ones (OpenFGA, the
 * SubjectAccessReview, the TokenRequest) prefetched together; then each awaited in the seed's order,
 * so the first denial in that order is the one reported.
 */
async function pluginRequest(
  request: HttpRequest,
  clusterId: string,
  kube: KubeRequest,
  claims: PluginClaims,
  installation: EarlyVerdict,
  deps: KubeApiProxyDeps,
): Promise<Decision> {
  // Gate 1, aud=fundament-plugin: identifyFundamentCaller() accepted the token as a PluginToken.
  // FUN-17 §10 places the deny-list "at proxy validation time": it is part of accepting the token,
  // so it runs right after it, before any other gate and before any remote call is started (a
  // revoked plugin costs no OpenFGA Check, review or TokenRequest). Unsynced, it throws: a 503.
  const revoked = revokedDenial(deps.revocations, tokenSubject(claims), "kube-api-proxy", "revocation");
  if (revoked !== undefined) return revoked;
  // Impersonation would let the plugin step outside the user's SubjectAccessReview.
  if (!traceVerdict("no-impersonation", !impersonates(request.headers))) {
    return deny("impersonation-forbidden", "impersonation is not allowed for plugin requests");
  }
  // Gate 2: cluster_id in the URL equals claims.cluster_id.
  if (!traceVerdict("cluster-binding", clusterId === claims.clusterId)) return deny("cluster-mismatch", "the token is bound to another cluster");

  const known = deps.clusters.has(clusterId);
  // Whether the stream it opens can be bounded (pure; reported at gate 4, where the request is read).
  const limits = { tokenExp: claims.exp, watchMaxSeconds: deps.pluginWatchMaxSeconds };
  const bound = kube.kind === "ok" ? streamBound(request, kube.info, { ...limits, nowMs: Date.now() }) : undefined;
  const readable = kube.kind === "ok" && bound?.kind !== "deny";
  const canView = prefetch(() => deps.canView.canView(claims.sub, clusterId));
  // Nothing is reviewed or minted for a request gate 4 refuses.
  const userMay = prefetch(() =>
    known && readable ? allAllowed(deps.userAccess, clusterId, claims.sub, reviewAttributes(kube.info, request)) : NOT_ASKED,
  );
  const pluginToken = prefetch(() => {
    // Nothing is minted for an installation gate 6 refuses (or cannot read).
    if (!readable || !installation.read || installation.verdict.kind !== "usable") return NO_TOKEN;
    const sa = pluginServiceAccount(claims.installationName);
    return deps.serviceAccountTokens.token(clusterId, sa.namespace, sa.name, installation.verdict.installation.uid);
  });

  // Gate 3: OpenFGA can_view on (user, cluster).
  if (!traceVerdict("can_view", await canView)) return deny("can-view-denied", "the user cannot view this cluster");
  if (!traceVerdict("cluster-known", known)) return deny("unknown-cluster", "no such cluster");
  // Gate 4: parse the Kubernetes request into (apiGroup, resource, verb, namespace, name?, subresource?),
  // refused as kube-apiserver would refuse it before any authorization (kube-request.ts).
  trace("kube-path", kube.kind === "bad-request" ? "malformed" : kube.kind);
  if (kube.kind === "not-found") return deny("not-found", "not a Kubernetes API path");
  if (kube.kind === "bad-request") return deny("bad-request", kube.detail);
  if (bound?.kind === "deny") return bound;
  // Gate 5: SubjectAccessReview on the target cluster for the user's per-user ServiceAccount.
  if (!traceVerdict("user-sar", await userMay)) return deny("user-sar-denied", "the user may not do this");
  // Gate 6: resolve (cluster, installation_id) → plugin ServiceAccount from the PluginInstallation index.
  const unavailable = installationDenial(verdictAtGate6(installation), claims, { revocations: deps.revocations, policy: "kube-api-proxy" });
  if (unavailable !== undefined) return unavailable;
  const saToken = await pluginToken;
  trace("plugin-serviceaccount-token", saToken === undefined ? "no such serviceaccount" : "issued");
  if (saToken === undefined) return deny("installation-unavailable", "the plugin's ServiceAccount does not exist");
  return allowBounded(request, saToken, kube, limits);
}

/** No review was asked, no token minted: the gate before them refuses the request. */
const NOT_ASKED = Promise.resolve(false);
const NO_TOKEN = Promise.resolve(undefined);

function allAllowed(review: UserAccessReview, clusterId: string, userId: string, attributes: readonly AccessAttributes[]): Promise<boolean> {
  // Nearly every request is one review: its own promise, without an async frame or an array of answers.
  if (attributes.length === 1) return review.allowed(clusterId, userId, attributes[0]!);
  return Promise.all(attributes.map((a) => review.allowed(clusterId, userId, a))).then((answers) => answers.every(Boolean));
}

/**
 * The allow, its stream bounded from now: the stream starts when Envoy has the answer, and the
 * remote gates awaited since the bound was first read have used up part of the token's lifetime.
 */
function allowBounded(request: HttpRequest, minted: MintedToken, kube: KubeRequest, limits: Omit<StreamLimits, "nowMs">): Decision {
  const bound = kube.kind === "ok" ? streamBound(request, kube.info, { ...limits, nowMs: Date.now() }) : undefined;
  if (bound?.kind === "deny") return bound;
  return allow(credentialSwap(request, minted), bound);
}

/**
 * The caller's credential never travels on: the injected ServiceAccount token replaces it, in
 * Authorization only. The upstream is the URL's cluster (a known id: checked before any allow, and
 * the id the token was asked of) as it was when the token was minted: the Envoy cluster of that
 * API server, whatever the client sent and whatever the cluster was re-pointed to since
 * (kube-api-upstream.ts).
 */
function credentialSwap(request: HttpRequest, minted: MintedToken) {
  const ws = websocketBearerDropped(request.headers);
  return mutations(request.headers, {
    set: { ...ws.set, [KUBE_API_CLUSTER_HEADER]: minted.envoyCluster },
    remove: ["cookie", ...ws.remove],
    checked: { authorization: minted.authorization },
  });
}
