/**
 * plugin-proxy's authenticated routes (FUN-17 §4, §11): `/installations/{id}/runtime/…` to the plugin
 * pod, `/installations/{id}/controller/…` to the plugin-controller. There is no Kubernetes scope to
 * apply, so authorization reduces to: aud=fundament-plugin, the URL's installation_id equals the
 * claim, and OpenFGA can_view on (user, claims.cluster_id) still holds; and, as on kube-api-proxy,
 * the token is not on the revocation list (FUN-17 §10) and the request carries no impersonation
 * headers (DESIGN.md "Denials").
 * To route, the installation is then resolved in the PluginInstallation index.
 *
 * The upstream is not in the URL: on allow, headers tell Envoy which cluster, namespace and Service
 * the request goes to, and the caller's own credential is removed (it never reaches a plugin pod).
 * Nothing in a request says whether its answer streams (a WebSocket, server-sent events, a long
 * download), so every allowed request is bounded as kube-api-proxy bounds exec: Envoy ends it at the
 * token's expiry, and a revoked plugin or a user who lost the cluster keeps no stream past it.
 */
import { allow, type Decision, deny } from "../decision.ts";
import { identifyFundamentCaller, type AcceptedCredentials } from "../fundament-identity.ts";
import { hasDotSegment } from "../dot-segments.ts";
import type { Policy } from "../policy.ts";
import { trace, traceVerdict } from "../trace.ts";
import type { ClusterViewCheck, InstallationLookup, KnownClusters } from "../../ports/policy-ports.ts";
import { installationDenial, installationVerdict } from "../installation.ts";
import { revokedDenial, tokenSubject } from "../revocation-gate.ts";
import { endsByTokenExpiry } from "../stream-bound.ts";
import type { RevocationList } from "../../kube-watch/revocations.ts";
import type { HttpRequest } from "../../envoy/check-request.ts";
import { impersonates } from "../../headers/impersonation.ts";
import { mutations, websocketBearerDropped } from "../../headers/mutations.ts";
import { pluginServiceAccount } from "../../kube-reading/service-accounts.ts";
import type { TokenVerifier } from "../../tokens/fundament.ts";

export interface PluginProxyDeps {
  readonly tokens: TokenVerifier;
  readonly clusters: KnownClusters;
  readonly canView: ClusterViewCheck;
  readonly installations: InstallationLookup;
  /** The sub-TTL deny-list (FUN-17 §10); NO_REVOCATIONS when none is configured. */
  readonly revocations: RevocationList;
  /** FUN-19's local-dev escape hatch, as for kube-api-proxy. */
  readonly allowUnpinned: boolean;
  /** Where the plugin-controller listens on every cluster. */
  readonly controller: { readonly namespace: string; readonly service: string };
}

/** Headers portcullis sets for Envoy's routing and for the upstream; the client's own are always replaced. */
export const UPSTREAM_HEADERS = {
  clusterId: "x-fundament-cluster-id",
  namespace: "x-fundament-upstream-namespace",
  service: "x-fundament-upstream-service",
  /** A registered cluster's Services' DNS suffix (its Secret's `service-domain`): Envoy's shared registered-cluster route builds the host from it. */
  domain: "x-fundament-upstream-domain",
  userId: "x-fundament-user-id",
  installationId: "x-fundament-installation-id",
} as const;

/** PluginToken from Bearer only: the cookie is a UserToken and belongs to the Console's origin. */
const ACCEPTED: AcceptedCredentials = { bearer: ["plugin"] };

export type PluginRoute =
  | { readonly kind: "ok"; readonly installationId: string; readonly upstream: "runtime" | "controller" }
  | { readonly kind: "not-found" }
  | { readonly kind: "malformed"; readonly detail: string };

/** `/installations/{installation_id}/{runtime|controller}[/…]`. Pure. */
export function pluginRoute(path: string): PluginRoute {
  const match = /^\/installations\/([^/]*)\/(runtime|controller)(?:\/.*)?$/.exec(path);
  if (match === null) return { kind: "not-found" };
  if (hasDotSegment(path)) return { kind: "malformed", detail: "dot segment in path" };
  // Any case is read as a UUID here; comparing with the claim (always lower case) decides.
  if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(match[1]!)) {
    return { kind: "malformed", detail: "installation id is not a UUID" };
  }
  return { kind: "ok", installationId: match[1]!, upstream: match[2] as "runtime" | "controller" };
}

export function pluginProxy(deps: PluginProxyDeps): Policy {
  return {
    name: "plugin-proxy",
    bodyShape: "json",
    async decide(request: HttpRequest): Promise<Decision> {
      const route = pluginRoute(request.path);
      trace("plugin-route", route.kind === "ok" ? route.upstream : route.kind);
      if (route.kind === "not-found") return deny("not-found", "no such route");
      if (route.kind === "malformed") return deny("bad-request", route.detail);
      // aud=fundament-plugin.
      const identity = await identifyFundamentCaller(request.headers, ACCEPTED, deps.tokens);
      trace("token", identity.kind === "deny" ? identity.reason : `${identity.claims.type} token from ${identity.source}`);
      if (identity.kind === "deny") return identity;
      const claims = identity.claims;
      if (claims.type !== "plugin") return deny("wrong-audience", "the token is not accepted here");
      // The deny-list, "at proxy validation time" (FUN-17 §10): right after the token is accepted,
      // before the binding and the remote can_view. Unsynced, it throws: a 503, never an allow.
      const revoked = revokedDenial(deps.revocations, tokenSubject(claims), "plugin-proxy", "revocation");
      if (revoked !== undefined) return revoked;
      // As on kube-api-proxy: a plugin request names no identity but its token's.
      if (!traceVerdict("no-impersonation", !impersonates(request.headers))) {
        return deny("impersonation-forbidden", "impersonation is not allowed for plugin requests");
      }
      // The URL's installation_id matches the claim.
      if (!traceVerdict("installation-binding", route.installationId === claims.installationId)) {
        return deny("installation-mismatch", "the token is bound to another installation");
      }
      // OpenFGA can_view: the token's user still has access to claims.cluster_id.
      if (!traceVerdict("can_view", await deps.canView.canView(claims.sub, claims.clusterId))) {
        return deny("can-view-denied", "the user cannot view this cluster");
      }
      if (!traceVerdict("cluster-known", deps.clusters.has(claims.clusterId))) return deny("unknown-cluster", "no such cluster");
      // Routing, not a seed gate: the upstream is named after the installation, so it must still be the
      // one the token was minted for (a reinstall under the same name has a new uid) and not be going away.
      const installation = installationVerdict(deps.installations.byUid(claims.clusterId, claims.installationId), claims, deps.allowUnpinned);
      const unavailable = installationDenial(installation, claims, { revocations: deps.revocations, policy: "plugin-proxy" });
      if (unavailable !== undefined) return unavailable;

      const upstream =
        route.upstream === "runtime"
          ? { namespace: pluginServiceAccount(claims.installationName).namespace, service: `plugin-${claims.installationName}` }
          : deps.controller;
      // A static cluster's routes hold its domain; a registered one's comes from its Secret, and
      // without one (or for a static cluster) a client's copy of the header is removed like any x-fundament-*.
      const domain = deps.clusters.serviceDomainOf?.(claims.clusterId);
      const bound = endsByTokenExpiry(claims.exp, Date.now());
      if (bound.kind === "deny") return bound;
      // The caller's credential never reaches a plugin pod, wherever it was carried.
      const ws = websocketBearerDropped(request.headers);
      return allow(
        mutations(request.headers, {
          set: {
            [UPSTREAM_HEADERS.clusterId]: claims.clusterId,
            [UPSTREAM_HEADERS.namespace]: upstream.namespace,
            [UPSTREAM_HEADERS.service]: upstream.service,
            ...(domain === undefined ? {} : { [UPSTREAM_HEADERS.domain]: domain }),
            [UPSTREAM_HEADERS.userId]: claims.sub,
            [UPSTREAM_HEADERS.installationId]: claims.installationId,
            ...ws.set,
          },
          remove: ["authorization", "cookie", ...ws.remove],
        }),
        bound,
      );
    },
  };
}
