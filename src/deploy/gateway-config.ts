/**
 * portcullis's configuration → the manifests that put it behind a Gateway API gateway instead of
 * the Envoy it generates itself (envoy-config.ts): Envoy Gateway or Istio. Pure.
 *
 * The routes are read from the same Envoy bootstrap `envoy-config` generates (envoyBootstrap), so a
 * gateway route names the policy and service the plain-Envoy route names, and the two can never
 * disagree. Each virtual host becomes HTTPRoutes for its hostname (Fundament's shape: one
 * HTTPRoute per service hostname); each Envoy route one rule, named so a policy can target it.
 *
 * What a gateway can route and what it cannot:
 *   - routes to a cluster (platform services, Konfidence, plugin assets, the static API servers)
 *     become rules with a Service backend (or, for an API server outside the cluster, an Envoy
 *     Gateway Backend), TLS checked by a BackendTLSPolicy against the CA Envoy would have used;
 *   - routes Envoy answers itself (the checked 404 under /clusters/ and /installations/) become an
 *     Envoy Gateway HTTPRouteFilter's 404, still behind the check (FUN-12: 401 before 404); Istio
 *     checks every request to a listed host before routing, so there they need no rule;
 *   - routes whose upstream portcullis chooses (plugin-proxy's per-cluster routes, the registered
 *     clusters' route from CDS) have no Gateway API form: a gateway cannot route on a header to a
 *     host it builds, and has no place for portcullis's CDS. Their paths fall to the checked 404;
 *     docs/deployment.md says what to deploy for them.
 *   - the unrouted 404 of a platform host, with ext_authz disabled, needs no rule: the gateway's own
 *     404 for an unmatched path is the same answer.
 *
 * Envoy Gateway: one SecurityPolicy per (policy, service) targeting its rules by sectionName, with
 * contextExtensions {policy, service}: the checks arrive exactly as from plain Envoy. Istio's CUSTOM
 * provider sets no context extensions (istio/istio#59390): portcullis chooses the policy from the
 * request (request mode), and the AuthorizationPolicy only decides that every request to the hosts is
 * checked.
 */
import { Document } from "yaml";
import type { Config } from "../config/schema.ts";
import type { PolicyName } from "../config/policy-names.ts";
import { envoyBootstrap, extAuthzTimeoutMs, MissingEnvoySection, ENVOY_CLUSTERS } from "./envoy-config.ts";

export const GATEWAY_TARGETS = ["envoy-gateway", "istio"] as const;
export type GatewayTarget = (typeof GATEWAY_TARGETS)[number];

/** Where the generated objects go and which Gateway they attach to. */
export interface GatewayOptions {
  readonly target: GatewayTarget;
  /** portcullis's namespace: its Services, and the HTTPRoutes and SecurityPolicies generated here. */
  readonly namespace: string;
  /** The Gateway every HTTPRoute attaches to. */
  readonly gateway: { readonly namespace: string; readonly name: string; readonly sectionName?: string | undefined };
  /**
   * The namespace the gateway's proxy pods run in: the Gateway's own under Istio, Envoy Gateway's
   * controller namespace (envoy-gateway-system) by default under Envoy Gateway.
   */
  readonly proxyNamespace: string;
  /** Only these hostnames' HTTPRoutes (Fundament's `httproute.hostnames`); every origin when empty. */
  readonly hostnames?: readonly string[] | undefined;
}

/** The ClusterIP Service the gateways call (deploy/k8s/services.yaml): they balance over its endpoints themselves. */
export const EXT_AUTHZ_SERVICE = "portcullis-ext-authz";
/** The name of Istio's extension provider (meshConfig.extensionProviders[].name) and of the AuthorizationPolicy. */
export const ISTIO_PROVIDER = "portcullis";
/** The proxy pods' labels each gateway sets (Istio's Gateway API deployment; Envoy Gateway's proxy Deployment). */
export const GATEWAY_POD_LABELS: Readonly<Record<GatewayTarget, (gateway: GatewayOptions["gateway"]) => Record<string, string>>> = {
  istio: (g) => ({ "gateway.networking.k8s.io/gateway-name": g.name }),
  "envoy-gateway": (g) => ({ "gateway.envoyproxy.io/owning-gateway-name": g.name, "gateway.envoyproxy.io/owning-gateway-namespace": g.namespace }),
};

const GATEWAY_API = "gateway.networking.k8s.io";
const ENVOY_GATEWAY = "gateway.envoyproxy.io";
const NOT_FOUND_FILTER = "portcullis-not-found";
const NOT_FOUND_BODY = '{"error":{"code":"not-found","message":"no route"}}';
/** Gateway API: at most 16 rules in one HTTPRoute. */
const RULES_PER_ROUTE = 16;
/** Envoy reads a ServiceAccount's mounted CA from here; every namespace has it as ConfigMap kube-root-ca.crt. */
const IN_CLUSTER_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
const IN_CLUSTER_CA_CONFIGMAP = "kube-root-ca.crt";

export type PathMatch = { readonly type: "Exact" | "PathPrefix" | "RegularExpression"; readonly value: string };

/** Where a gateway sends a checked request. */
export type GatewayBackend =
  | { readonly kind: "service"; readonly name: string; readonly namespace: string; readonly port: number; readonly tls: UpstreamTls | undefined }
  | { readonly kind: "external"; readonly hostname: string; readonly port: number; readonly tls: UpstreamTls }
  | { readonly kind: "not-found" };

/** The name the upstream's certificate carries, and the ConfigMap (key ca.crt) with the CAs it must chain to. */
export interface UpstreamTls {
  readonly hostname: string;
  readonly caConfigMap: string;
}

/** One Envoy route as a gateway serves it. */
export interface GatewayRoute {
  readonly host: string;
  /** The Envoy route's name. */
  readonly envoyRoute: string;
  readonly path: PathMatch;
  readonly policy: PolicyName;
  readonly service: string | undefined;
  readonly backend: GatewayBackend;
  /** Envoy's prefix_rewrite "/": the matched prefix is replaced by "/". */
  readonly stripPrefix: boolean;
  /** Watches, logs and exec streams: no request timeout. */
  readonly streams: boolean;
  /** The host's CORS policy (one admitted origin), as plain Envoy's virtual host has it. */
  readonly cors: GatewayCors | undefined;
}

/** A host's CORS policy in Envoy Gateway's terms (SecurityPolicy.cors). */
export interface GatewayCors {
  readonly allowOrigins: readonly string[];
  readonly allowMethods: readonly string[];
  readonly allowHeaders: readonly string[];
  readonly exposeHeaders: readonly string[];
  readonly maxAge: string;
  readonly allowCredentials: boolean;
}

/** Envoy routes a gateway cannot express: the upstream is chosen from headers portcullis sets. */
export interface UnroutableRoute {
  readonly host: string;
  readonly envoyRoute: string;
  readonly policy: PolicyName;
  readonly why: string;
}

type Json = Record<string, any>;

/**
 * The gateway's routes, read from the plain-Envoy bootstrap: same hosts, same order, same policy and
 * service per route. `unroutable` lists the routes left out (see the file comment).
 */
export function gatewayRoutes(config: Config): { routes: GatewayRoute[]; unroutable: UnroutableRoute[] } {
  const bootstrap = envoyBootstrap(config) as Json;
  const hcm = bootstrap["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config;
  const upstreams = upstreamsByCluster(config);
  const routes: GatewayRoute[] = [];
  const unroutable: UnroutableRoute[] = [];
  for (const vhost of hcm.route_config.virtual_hosts as Json[]) {
    const host = vhost["domains"][0] as string;
    const cors = corsOf(vhost["typed_per_filter_config"]?.["envoy.filters.http.cors"]);
    for (const route of vhost["routes"] as Json[]) {
      const authz = route["typed_per_filter_config"]?.["envoy.filters.http.ext_authz"];
      // Envoy answers it without a check (a platform host's unrouted 404): so does the gateway.
      if (authz === undefined || authz.disabled === true) continue;
      const context = authz.check_settings.context_extensions as { policy: PolicyName; service?: string };
      const match = route["match"] as Json;
      const action = route["route"] as Json | undefined;
      if (match["headers"] !== undefined || action?.["cluster_header"] !== undefined || action?.["cluster"] === ENVOY_CLUSTERS.plugins) {
        unroutable.push({ host, envoyRoute: route["name"], policy: context.policy, why: "its upstream is chosen from the headers portcullis sets" });
        continue;
      }
      let backend: GatewayBackend;
      if (action === undefined) backend = { kind: "not-found" };
      else {
        const upstream = upstreams.get(action["cluster"]);
        if (upstream === undefined) throw new Error(`route ${route["name"]}: no upstream for Envoy cluster ${action["cluster"]}`);
        backend = backendOf(upstream.url, upstream.caFile, route["name"]);
      }
      routes.push({
        host,
        envoyRoute: route["name"],
        path: pathMatch(match, route["name"]),
        policy: context.policy,
        service: context.service,
        backend,
        stripPrefix: action?.["prefix_rewrite"] === "/",
        streams: action?.["timeout"] === "0s",
        cors,
      });
    }
  }
  return { routes, unroutable };
}

/** Envoy's CorsPolicy → Envoy Gateway's CORS: the same origin, methods, headers and max age. */
function corsOf(policy: Json | undefined): GatewayCors | undefined {
  if (policy === undefined) return undefined;
  const list = (text: string) => text.split(",").map((t) => t.trim()).filter((t) => t !== "");
  return {
    allowOrigins: (policy["allow_origin_string_match"] as Json[]).map((m) => m["exact"] as string),
    allowMethods: list(policy["allow_methods"]),
    allowHeaders: list(policy["allow_headers"]),
    exposeHeaders: list(policy["expose_headers"]),
    maxAge: `${policy["max_age"]}s`,
    allowCredentials: policy["allow_credentials"] === true,
  };
}

/** Envoy's route match → Gateway API's path match with the same meaning. */
function pathMatch(match: Json, name: string): PathMatch {
  if (typeof match["path"] === "string") return { type: "Exact", value: match["path"] };
  if (typeof match["path_separated_prefix"] === "string") return { type: "PathPrefix", value: match["path_separated_prefix"] };
  if (typeof match["prefix"] === "string") {
    const prefix = match["prefix"] as string;
    // A Gateway API PathPrefix is whole path segments, as Envoy's prefix is when it ends in "/".
    // A Connect package prefix (`/authn.v1.`) is a plain string prefix: a regular expression.
    return prefix.endsWith("/") ? { type: "PathPrefix", value: prefix } : { type: "RegularExpression", value: `${escapeRegex(prefix)}.*` };
  }
  if (typeof match["safe_regex"]?.regex === "string") return { type: "RegularExpression", value: match["safe_regex"].regex };
  throw new Error(`route ${name}: no Gateway API form for match ${JSON.stringify(match)}`);
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Every Envoy cluster a route may name, with the URL and CA it was generated from. */
function upstreamsByCluster(config: Config): Map<string, { url: string; caFile: string | undefined }> {
  const envoy = config.envoy!;
  const map = new Map<string, { url: string; caFile: string | undefined }>();
  for (const c of envoy.clusters) map.set(ENVOY_CLUSTERS.kubeApi(c.id), { url: c.apiServer, caFile: c.caFile });
  map.set(ENVOY_CLUSTERS.assets, { url: envoy.upstreams.assets.url, caFile: envoy.upstreams.assets.caFile });
  if (envoy.upstreams.konfidence !== undefined) map.set(ENVOY_CLUSTERS.konfidence, { url: envoy.upstreams.konfidence.url, caFile: envoy.upstreams.konfidence.caFile });
  for (const p of envoy.platform) map.set(ENVOY_CLUSTERS.platform(p.name), { url: p.upstream.url, caFile: p.upstream.caFile });
  return map;
}

/** `{service}.{namespace}.svc[.{cluster domain}]`: a Service of this cluster. */
const SERVICE_HOST = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.[a-z0-9.-]+)?$/;

function backendOf(url: string, caFile: string | undefined, routeName: string): GatewayBackend {
  const parsed = new URL(url);
  const https = parsed.protocol === "https:";
  const port = parsed.port === "" ? (https ? 443 : 80) : Number(parsed.port);
  const hostname = parsed.hostname;
  const tls = https ? { hostname, caConfigMap: caConfigMapOf(caFile, routeName) } : undefined;
  const service = SERVICE_HOST.exec(hostname);
  if (service !== null) return { kind: "service", name: service[1]!, namespace: service[3]!, port, tls };
  if (tls === undefined) throw new Error(`route ${routeName}: ${url} is neither a Service ({name}.{namespace}.svc…) nor https; a gateway sends plaintext only to Services of its cluster`);
  return { kind: "external", hostname, port, tls };
}

/**
 * The ConfigMap holding the CA file Envoy would read: the in-cluster CA is every namespace's
 * kube-root-ca.crt; any other is a ConfigMap the platform creates from that file (docs/deployment.md).
 */
function caConfigMapOf(caFile: string | undefined, routeName: string): string {
  if (caFile === IN_CLUSTER_CA_FILE) return IN_CLUSTER_CA_CONFIGMAP;
  return `portcullis-ca-${slug(routeName)}`.slice(0, 63).replace(/-+$/, "");
}

/** A Kubernetes name (and Gateway API section name) from free text. */
function slug(text: string): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
}

/** The HTTPRoute names of a host: `portcullis-{host}`, then `-2`, `-3` … past 16 rules. */
function routeNameOf(host: string, chunk: number): string {
  const base = `portcullis-${slug(host)}`.slice(0, 240);
  return chunk === 0 ? base : `${base}-${chunk + 1}`;
}

/** A rule as placed: which HTTPRoute, which section name. */
export interface PlacedRule {
  readonly route: GatewayRoute;
  readonly httpRoute: string;
  readonly sectionName: string;
}

/** Assigns every gateway route to an HTTPRoute (per host, 16 rules each) and a unique section name. */
export function placeRules(routes: readonly GatewayRoute[]): PlacedRule[] {
  const byHost = new Map<string, GatewayRoute[]>();
  for (const r of routes) byHost.set(r.host, [...(byHost.get(r.host) ?? []), r]);
  const placed: PlacedRule[] = [];
  for (const [host, hostRoutes] of byHost) {
    const used = new Set<string>();
    hostRoutes.forEach((route, i) => {
      let section = slug(route.envoyRoute).slice(0, 60).replace(/-+$/, "") || "rule";
      for (let n = 2; used.has(section); n++) section = `${slug(route.envoyRoute).slice(0, 56)}-${n}`;
      used.add(section);
      placed.push({ route, httpRoute: routeNameOf(host, Math.floor(i / RULES_PER_ROUTE)), sectionName: section });
    });
  }
  return placed;
}

export class GatewayConfigError extends Error {
  readonly code = "gateway-config";
}

/** Every object a gateway deployment of portcullis needs beside the kit (deploy/k8s), in apply order. */
export function gatewayManifests(config: Config, options: GatewayOptions): Json[] {
  if (config.envoy === undefined) throw new MissingEnvoySection("the configuration has no envoy section");
  const { routes: all } = gatewayRoutes(config);
  const known = new Set(all.map((r) => r.host));
  for (const h of options.hostnames ?? []) {
    if (!known.has(h)) throw new GatewayConfigError(`hostname ${h} is not the host of any origin in envoy.origins or envoy.platform`);
  }
  const wanted = new Set(options.hostnames !== undefined && options.hostnames.length > 0 ? options.hostnames : known);
  // Istio checks every request to the hosts before routing (request mode): a 404 rule adds nothing.
  const routes = all.filter((r) => wanted.has(r.host) && (options.target === "envoy-gateway" || r.backend.kind !== "not-found"));
  const placed = placeRules(routes);
  const objects: Json[] = [];
  objects.push(...portcullisTls(config, options));
  objects.push(...referenceGrants(routes, options));
  objects.push(...backendTlsPolicies(routes, options));
  if (options.target === "envoy-gateway") {
    objects.push(...externalBackends(routes, options));
    if (routes.some((r) => r.backend.kind === "not-found")) objects.push(notFoundFilter(options));
  }
  objects.push(...httpRoutes(placed, options));
  if (options.target === "envoy-gateway") {
    objects.push(...securityPolicies(placed, config, options));
    objects.push(clientTrafficPolicy(options));
  } else {
    objects.push(authorizationPolicy([...wanted], options));
  }
  objects.push(gatewayNetworkPolicy(config, options));
  return objects;
}

function meta(name: string, namespace: string): Json {
  return { name, namespace, labels: { "app.kubernetes.io/name": "portcullis", "app.kubernetes.io/component": "gateway" } };
}

function parentRef(options: GatewayOptions): Json {
  return {
    group: GATEWAY_API,
    kind: "Gateway",
    namespace: options.gateway.namespace,
    name: options.gateway.name,
    ...(options.gateway.sectionName === undefined ? {} : { sectionName: options.gateway.sectionName }),
  };
}

function httpRoutes(placed: readonly PlacedRule[], options: GatewayOptions): Json[] {
  const byRoute = new Map<string, PlacedRule[]>();
  for (const p of placed) byRoute.set(p.httpRoute, [...(byRoute.get(p.httpRoute) ?? []), p]);
  return [...byRoute].map(([name, rules]) => ({
    apiVersion: `${GATEWAY_API}/v1`,
    kind: "HTTPRoute",
    metadata: meta(name, options.namespace),
    spec: {
      parentRefs: [parentRef(options)],
      hostnames: [rules[0]!.route.host],
      rules: rules.map((p) => httpRouteRule(p, options)),
    },
  }));
}

function httpRouteRule({ route, sectionName }: PlacedRule, options: GatewayOptions): Json {
  const rule: Json = { name: sectionName, matches: [{ path: { type: route.path.type, value: route.path.value } }] };
  const filters: Json[] = [];
  if (route.stripPrefix) filters.push({ type: "URLRewrite", urlRewrite: { path: { type: "ReplacePrefixMatch", replacePrefixMatch: "/" } } });
  const backend = route.backend;
  if (backend.kind === "not-found") {
    filters.push({ type: "ExtensionRef", extensionRef: { group: ENVOY_GATEWAY, kind: "HTTPRouteFilter", name: NOT_FOUND_FILTER } });
  } else if (backend.kind === "service") {
    rule["backendRefs"] = [{ group: "", kind: "Service", name: backend.name, ...(backend.namespace === options.namespace ? {} : { namespace: backend.namespace }), port: backend.port }];
  } else if (options.target === "envoy-gateway") {
    rule["backendRefs"] = [{ group: ENVOY_GATEWAY, kind: "Backend", name: externalBackendName(backend.hostname) }];
  } else {
    // Istio: a ServiceEntry's host (networking.istio.io Hostname).
    rule["backendRefs"] = [{ group: "networking.istio.io", kind: "Hostname", name: backend.hostname, port: backend.port }];
  }
  if (filters.length > 0) rule["filters"] = filters;
  // Watches and log streams live as long as the client keeps them (Gateway API: 0s disables the timeout).
  if (route.streams) rule["timeouts"] = { request: "0s" };
  return rule;
}

/** The ConfigMap (key ca.crt) with the CA of portcullis's own certificate (listen.tls), for Envoy Gateway. */
export const PORTCULLIS_CA_CONFIGMAP = "portcullis-grpc-ca";

/**
 * portcullis's listeners with TLS (listen.tls): Envoy Gateway checks its certificate as plain Envoy
 * does (the CA of envoy.portcullis.tls.caFile, the name envoy.portcullis.tls.serverName or host). A
 * client certificate (requireClientCert) and Istio's plaintext extension provider cannot be
 * generated: refused rather than generating a gateway that answers every request 503.
 */
function portcullisTls(config: Config, options: GatewayOptions): Json[] {
  const tls = config.listen.tls;
  if (tls === undefined) return [];
  if (options.target === "istio") {
    throw new GatewayConfigError("listen.tls: Istio's envoyExtAuthzGrpc provider calls portcullis in plaintext; leave listen.tls unset and let the mesh's mTLS (sidecar or ambient) protect the hop");
  }
  if (tls.requireClientCert) {
    throw new GatewayConfigError("listen.tls.requireClientCert: Envoy Gateway presents a client certificate only gateway-wide (EnvoyProxy backendTLS.clientCertificateRef), which is not generated; set it there, or drop requireClientCert");
  }
  const portcullis = config.envoy!.portcullis;
  return [
    {
      apiVersion: `${GATEWAY_API}/v1`,
      kind: "BackendTLSPolicy",
      metadata: meta(EXT_AUTHZ_SERVICE, options.namespace),
      spec: {
        targetRefs: [{ group: "", kind: "Service", name: EXT_AUTHZ_SERVICE }],
        validation: {
          caCertificateRefs: [{ group: "", kind: "ConfigMap", name: PORTCULLIS_CA_CONFIGMAP }],
          hostname: portcullis.tls?.serverName ?? portcullis.host,
        },
      },
    },
  ];
}

/** Cross-namespace backends: each Service's namespace admits the HTTPRoutes of portcullis's namespace. */
function referenceGrants(routes: readonly GatewayRoute[], options: GatewayOptions): Json[] {
  const byNamespace = new Map<string, Set<string>>();
  for (const r of routes) {
    if (r.backend.kind !== "service" || r.backend.namespace === options.namespace) continue;
    byNamespace.set(r.backend.namespace, (byNamespace.get(r.backend.namespace) ?? new Set()).add(r.backend.name));
  }
  return [...byNamespace].map(([namespace, names]) => ({
    apiVersion: `${GATEWAY_API}/v1beta1`,
    kind: "ReferenceGrant",
    metadata: meta(`portcullis-routes-from-${options.namespace}`.slice(0, 63), namespace),
    spec: {
      from: [{ group: GATEWAY_API, kind: "HTTPRoute", namespace: options.namespace }],
      to: [...names].sort().map((name) => ({ group: "", kind: "Service", name })),
    },
  }));
}

/** TLS to an https upstream, checked as Envoy checks it: the URL's host name, the CA of its caFile. */
function backendTlsPolicies(routes: readonly GatewayRoute[], options: GatewayOptions): Json[] {
  const seen = new Map<string, Json>();
  for (const r of routes) {
    const b = r.backend;
    if (b.kind === "not-found" || b.tls === undefined) continue;
    if (b.kind === "external" && options.target === "envoy-gateway") continue; // the Backend carries its TLS
    const namespace = b.kind === "service" ? b.namespace : options.namespace;
    const target = b.kind === "service"
      ? { group: "", kind: "Service", name: b.name }
      : { group: "networking.istio.io", kind: "ServiceEntry", name: externalBackendName(b.hostname) };
    const name = `portcullis-${target.name}`.slice(0, 63);
    seen.set(`${namespace}/${name}`, {
      apiVersion: `${GATEWAY_API}/v1`,
      kind: "BackendTLSPolicy",
      metadata: meta(name, namespace),
      spec: {
        targetRefs: [target],
        validation: { caCertificateRefs: [{ group: "", kind: "ConfigMap", name: b.tls.caConfigMap }], hostname: b.tls.hostname },
      },
    });
  }
  const objects = [...seen.values()];
  if (options.target === "istio") objects.unshift(...istioServiceEntries(routes, options));
  return objects;
}

function externalBackendName(hostname: string): string {
  return `portcullis-${slug(hostname)}`.slice(0, 63).replace(/-+$/, "");
}

/** Envoy Gateway: an API server outside the cluster, by name, TLS checked against its CA. */
function externalBackends(routes: readonly GatewayRoute[], options: GatewayOptions): Json[] {
  const seen = new Map<string, Json>();
  for (const r of routes) {
    const b = r.backend;
    if (b.kind !== "external") continue;
    seen.set(b.hostname, {
      apiVersion: `${ENVOY_GATEWAY}/v1alpha1`,
      kind: "Backend",
      metadata: meta(externalBackendName(b.hostname), options.namespace),
      spec: {
        endpoints: [{ fqdn: { hostname: b.hostname, port: b.port } }],
        tls: { caCertificateRefs: [{ group: "", kind: "ConfigMap", name: b.tls.caConfigMap }], sni: b.hostname },
      },
    });
  }
  return [...seen.values()];
}

/** Istio: an API server outside the mesh, as a ServiceEntry the HTTPRoute names by host. */
function istioServiceEntries(routes: readonly GatewayRoute[], options: GatewayOptions): Json[] {
  const seen = new Map<string, Json>();
  for (const r of routes) {
    const b = r.backend;
    if (b.kind !== "external") continue;
    seen.set(b.hostname, {
      apiVersion: "networking.istio.io/v1",
      kind: "ServiceEntry",
      metadata: meta(externalBackendName(b.hostname), options.namespace),
      spec: { hosts: [b.hostname], location: "MESH_EXTERNAL", resolution: "DNS", ports: [{ number: b.port, name: "https", protocol: "HTTPS" }] },
    });
  }
  return [...seen.values()];
}

/** Envoy Gateway: the 404 Envoy answers itself under /clusters/ and /installations/, after the check. */
function notFoundFilter(options: GatewayOptions): Json {
  return {
    apiVersion: `${ENVOY_GATEWAY}/v1alpha1`,
    kind: "HTTPRouteFilter",
    metadata: meta(NOT_FOUND_FILTER, options.namespace),
    spec: { directResponse: { statusCode: 404, contentType: "application/json", body: { type: "Inline", inline: NOT_FOUND_BODY } } },
  };
}

/** `1000ms`: Gateway API durations allow at most five digits per unit. */
function duration(ms: number): string {
  return `${ms}ms`;
}

/** One SecurityPolicy per (policy, service): its contextExtensions are what plain Envoy's route sets. */
function securityPolicies(placed: readonly PlacedRule[], config: Config, options: GatewayOptions): Json[] {
  const groups = new Map<string, PlacedRule[]>();
  for (const p of placed) {
    const key = p.route.service === undefined ? p.route.policy : `${p.route.policy}-${p.route.service}`;
    groups.set(key, [...(groups.get(key) ?? []), p]);
  }
  const grpcPort = Number(config.listen.grpc.slice(config.listen.grpc.lastIndexOf(":") + 1));
  return [...groups].map(([key, rules]) => {
    const { policy, service, cors } = rules[0]!.route;
    // A (policy, service) is served on one host, so its rules share that host's CORS policy.
    if (rules.some((p) => JSON.stringify(p.route.cors) !== JSON.stringify(cors))) throw new Error(`policy ${key} is served on hosts with different CORS policies`);
    return {
      apiVersion: `${ENVOY_GATEWAY}/v1alpha1`,
      kind: "SecurityPolicy",
      metadata: meta(`portcullis-${slug(key)}`.slice(0, 63), options.namespace),
      spec: {
        targetRefs: rules.map((p) => ({ group: GATEWAY_API, kind: "HTTPRoute", name: p.httpRoute, sectionName: p.sectionName })),
        extAuth: {
          grpc: { backendRefs: [{ group: "", kind: "Service", name: EXT_AUTHZ_SERVICE, port: grpcPort }] },
          contextExtensions: [
            { name: "policy", type: "Value", value: policy },
            ...(service === undefined ? [] : [{ name: "service", type: "Value", value: service }]),
          ],
          // Deny by default: portcullis down or slow is a 503, never an allow.
          failOpen: false,
          statusOnError: 503,
          timeout: duration(extAuthzTimeoutMs(config)),
          // plugin-proxy's upstream follows the headers portcullis sets on allow.
          recomputeRoute: policy === "plugin-proxy",
        },
        // Envoy Gateway's cors filter runs before ext_authz: preflights are answered without a token, as in plain Envoy.
        ...(cors === undefined ? {} : { cors: { ...cors } }),
      },
    };
  });
}

/** What plain Envoy's connection manager does for portcullis: reject escaped slashes and headers with underscores. */
function clientTrafficPolicy(options: GatewayOptions): Json {
  return {
    apiVersion: `${ENVOY_GATEWAY}/v1alpha1`,
    kind: "ClientTrafficPolicy",
    metadata: meta(`portcullis-${slug(options.gateway.name)}`.slice(0, 63), options.gateway.namespace),
    spec: {
      targetRefs: [{ group: GATEWAY_API, kind: "Gateway", name: options.gateway.name, ...(options.gateway.sectionName === undefined ? {} : { sectionName: options.gateway.sectionName }) }],
      path: { escapedSlashesAction: "RejectRequest", disableMergeSlashes: false },
      headers: { withUnderscoresAction: "RejectRequest" },
    },
  };
}

/**
 * Istio: every request to the hosts goes to portcullis (CUSTOM). With or without a port in the
 * Host header (`host:*`): a host the rule did not list would not be checked at all.
 */
function authorizationPolicy(hosts: readonly string[], options: GatewayOptions): Json {
  return {
    apiVersion: "security.istio.io/v1",
    kind: "AuthorizationPolicy",
    metadata: meta(`${ISTIO_PROVIDER}-${slug(options.gateway.name)}`.slice(0, 63), options.gateway.namespace),
    spec: {
      targetRefs: [{ group: GATEWAY_API, kind: "Gateway", name: options.gateway.name }],
      action: "CUSTOM",
      provider: { name: ISTIO_PROVIDER },
      rules: [{ to: [{ operation: { hosts: [...hosts].sort().flatMap((h) => [h, `${h}:*`]) } }] }],
    },
  };
}

/** Beside the kit's NetworkPolicy (policies add up): the gateway's proxy pods may call the gRPC port. */
function gatewayNetworkPolicy(config: Config, options: GatewayOptions): Json {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: meta(`portcullis-from-${slug(options.gateway.name)}`.slice(0, 63), options.namespace),
    spec: {
      podSelector: { matchLabels: { "app.kubernetes.io/name": "portcullis" } },
      policyTypes: ["Ingress"],
      ingress: [
        {
          from: [
            {
              namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": options.proxyNamespace } },
              podSelector: { matchLabels: GATEWAY_POD_LABELS[options.target](options.gateway) },
            },
          ],
          ports: [{ port: "grpc", protocol: "TCP" }],
        },
      ],
    },
  };
}

/**
 * Istio's extension provider, for istiod's mesh configuration (the `meshConfig` of istiod's Helm
 * values): gRPC to the ClusterIP Service, fail closed with 503, a deadline above portcullis's own.
 * clearRouteCache is not set: Istio accepts it but does not wire it (istio/istio#61558).
 */
export function istioMeshConfig(config: Config, options: Pick<GatewayOptions, "namespace">): Json {
  const grpcPort = Number(config.listen.grpc.slice(config.listen.grpc.lastIndexOf(":") + 1));
  return {
    meshConfig: {
      extensionProviders: [
        {
          name: ISTIO_PROVIDER,
          envoyExtAuthzGrpc: {
            service: `${EXT_AUTHZ_SERVICE}.${options.namespace}.svc.cluster.local`,
            port: grpcPort,
            timeout: `${(extAuthzTimeoutMs(config) / 1000).toFixed(3).replace(/\.?0+$/, "")}s`,
            failOpen: false,
            statusOnError: "503",
          },
        },
      ],
    },
  };
}

/** The manifests as one YAML stream, with a header saying where they came from. */
export function renderGatewayYaml(config: Config, options: GatewayOptions): string {
  const header = ` Generated by \`portcullis gateway-config --target ${options.target}\` from portcullis's own configuration; do not edit.\n Design notes: src/deploy/gateway-config.ts.`;
  return gatewayManifests(config, options)
    .map((object, i) => {
      const doc = new Document(object);
      if (i === 0) doc.commentBefore = header;
      return doc.toString({ lineWidth: 0 });
    })
    .join("---\n");
}
