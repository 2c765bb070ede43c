/**
 * The policies' composition: which policies a configuration serves, over which ports. The one
 * place that knows both the configuration and the policies' options (Konfidence's included).
 */
import { konfidenceApi } from "../authz/policies/konfidence-api.ts";
import { kubeApiProxy } from "../authz/policies/kube-api-proxy.ts";
import { platformApi } from "../authz/policies/platform-api.ts";
import { pluginAssets } from "../authz/policies/plugin-assets.ts";
import { pluginProxy } from "../authz/policies/plugin-proxy.ts";
import { publicRoutes } from "../authz/policies/public.ts";
import type { Policy } from "../authz/policy.ts";
import type { ClusterViewCheck } from "../ports/policy-ports.ts";
import { NO_REVOCATIONS, type RevocationList } from "../kube-watch/revocations.ts";
import type { KonfidenceConfig } from "../config/konfidence-schema.ts";
import type { Config } from "../config/schema.ts";
import { compilePermissions, compileRoutes, type PermissionMatrix, type RouteSpec } from "../konfidence-model/permissions.ts";
import type { KonfidencePorts } from "../konfidence/ports.ts";
import type { PolicyPorts } from "./ports.ts";
import { tokenVerifierFor } from "./token-verifier.ts";

/**
 * The policies this configuration serves. Without the Fundament sections (tokens, openfga: a
 * Konfidence-only deployment) only konfidence-api is registered, and a route naming a Fundament
 * policy is denied 403 `no-policy`: a routing mistake that no retry fixes, never an allow.
 */
export function policiesFor(config: Config, ports: PolicyPorts): Policy[] {
  const fundament = config.tokens === undefined || ports.canView === undefined ? [] : fundamentPolicies(config, config.tokens, ports.canView, ports);
  return [...fundament, ...(config.konfidence === undefined ? [] : [konfidencePolicy(config.konfidence, ports.konfidence)])];
}

function fundamentPolicies(config: Config, tokenConfig: NonNullable<Config["tokens"]>, canView: ClusterViewCheck, ports: PolicyPorts): Policy[] {
  const tokens = tokenVerifierFor(tokenConfig);
  const cookieOrigins = new Set(tokenConfig.cookieOrigins.map((origin) => new URL(origin).origin));
  const platform = config.platform.services;
  return [
    kubeApiProxy({
      tokens,
      clusters: ports.clusters,
      canView,
      userAccess: ports.userAccess,
      installations: ports.installations,
      serviceAccountTokens: ports.serviceAccountTokens,
      revocations: revocationListFor(config, ports),
      cookieOrigins,
      allowUnpinned: config.plugins.allowUnpinned,
      pluginWatchMaxSeconds: config.streams.pluginWatchMaxSeconds,
    }),
    pluginProxy({
      tokens,
      clusters: ports.clusters,
      canView,
      installations: ports.installations,
      revocations: revocationListFor(config, ports),
      allowUnpinned: config.plugins.allowUnpinned,
      controller: config.plugins.controller,
    }),
    pluginAssets(),
    platformApi({ tokens, cookieOrigins, services: new Set(platform.map((s) => s.name)) }),
    publicRoutes({ publicPaths: new Map(platform.map((s) => [s.name, new Set(s.public)])), issuer: tokenConfig.issuer }),
  ];
}

/**
 * The deny-list the policies and GetInstallationManifest consult. None only when the operator
 * configured none (documented, and warned about at start); a configured list that is not connected
 * is a wiring mistake that would silently allow revoked plugins, so it is refused at start.
 */
export function revocationListFor(config: Config, ports: PolicyPorts): RevocationList {
  if (ports.revocations !== undefined) return ports.revocations;
  if (config.revocations !== undefined) throw new Error("revocations is configured but no revocation list is connected");
  return NO_REVOCATIONS;
}

export function konfidencePolicy(config: KonfidenceConfig, ports: KonfidencePorts | undefined): Policy {
  if (ports === undefined) throw new TypeError("konfidence is configured but its ports are not connected");
  const s = config.session;
  return konfidenceApi({
    routes: compileRoutes(config.routes as readonly RouteSpec[]),
    permissions: compilePermissions(config.permissions as PermissionMatrix),
    projects: ports.projects,
    workloadTokens: ports.workloadTokens,
    platformAudiences: config.providers.platformAudiences,
    ...(s === undefined || ports.sessions === undefined
      ? {}
      : { session: { tokens: ports.sessions, credential: s.cookie !== undefined ? { cookie: s.cookie, cookieOrigins: new Set(s.cookieOrigins) } : { header: s.header! } } }),
  });
}
