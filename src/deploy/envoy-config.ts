/**
 * portcullis's configuration → Envoy's bootstrap. Pure: the same Config always gives the same
 * object. Routes, the policy each route names, CORS and CSP origins and the ext_authz deadline all
 * come from the one file portcullis itself runs with, so they cannot drift apart.
 *
 * One listener, one virtual host per public origin (kube-api-proxy, plugin-proxy, Konfidence, and
 * each origin of the platform's user-facing services).
 * HTTP filters, in order:
 *   cors            answers preflights before anyone asks for a token (FUN-17 §7)
 *   ext_authz       portcullis decides every request; `clear_route_cache` so its headers can route
 *   header_mutation builds the plugin Service's host name from the headers portcullis set
 *   dynamic_forward_proxy  resolves that host name (plugin-proxy routes only)
 *   router
 *
 * Paths: `normalize_path` and `merge_slashes` so the path portcullis authorizes is the path the
 * upstream serves. Escaped slashes (`%2F`, `%5C`) are rejected with 400 rather than unescaped and
 * redirected: no Kubernetes name, API path or plugin route contains one, so a request carrying one
 * is probing for a split between what Envoy routes on and what the upstream decodes; and a redirect
 * would be re-sent by browsers and clients with their Authorization header to a path nobody
 * authorized yet, where a plain 400 ends the request.
 *
 * plugin-proxy routing: the upstream is not in the URL. On allow, portcullis sets
 * x-fundament-cluster-id, x-fundament-upstream-namespace and x-fundament-upstream-service
 * (UPSTREAM_HEADERS), and ext_authz's `clear_route_cache` makes Envoy match routes again with them.
 * Each cluster has its own routes, matched on x-fundament-cluster-id; they build
 * `{service}.{namespace}.{serviceDomain}:{port}` from the other two headers (header_mutation) and
 * hand it to a dynamic forward proxy, which resolves it by DNS. One route per cluster keeps each
 * cluster's DNS suffix in configuration and never lets a header choose a DNS domain; a dynamic
 * forward proxy spares Envoy a static cluster per plugin installation. Before ext_authz runs, the
 * client's own x-fundament-* headers may match one of these routes: every one of them names policy
 * plugin-proxy, so the check is the same, and portcullis overwrites or removes those headers on allow.
 *
 * Platform services (FUN-17 §3, FUN-19 §5): per service, first one exact-path route per public path
 * (policy `public`), then one route per configured prefix (policy `platform-api`); both name the
 * service in `context_extensions.service`. A path not listed public therefore always lands on
 * platform-api and needs a UserToken. A prefix ending in `.` or `/` is an Envoy `prefix` (a Connect
 * package or service); any other is a `path_separated_prefix` (`/login` and `/login/…`, never
 * `/loginx`). Paths under no route get a 404 from Envoy without a check: nothing serves them.
 * CORS admits the Console only, with credentials (its session cookie); a plugin page's preflight fails.
 */
import { isIP } from "node:net";
import { Document } from "yaml";
import type { PolicyName } from "../config/policy-names.ts";
import { UPSTREAM_HEADERS } from "../authz/policies/plugin-proxy.ts";
import { KUBE_API_CLUSTER_HEADER, kubeApiEnvoyCluster } from "../envoy/kube-api-upstream.ts";
import type { Config } from "../config/schema.ts";
import { EXT_AUTHZ_MARGIN_MS, type EnvoyConfig } from "../config/envoy-schema.ts";
import { buildRouteTable, type CorsPolicy, type PathMatch, type TableHost, type TableRoute } from "../config/route-table.ts";

const T = "type.googleapis.com/";
const FILTER = {
  cors: "envoy.filters.http.cors",
  extAuthz: "envoy.filters.http.ext_authz",
  headerMutation: "envoy.filters.http.header_mutation",
  dynamicForwardProxy: "envoy.filters.http.dynamic_forward_proxy",
  router: "envoy.filters.http.router",
} as const;

/** Envoy cluster names. */
export const ENVOY_CLUSTERS = {
  portcullis: "portcullis",
  plugins: "plugin-services",
  assets: "plugin-assets",
  konfidence: "konfidence-api",
  collector: "opentelemetry-collector",
  kubeApi: kubeApiEnvoyCluster,
  platform: (service: string) => `platform-${service}`,
} as const;

/** Set by header_mutation on plugin-proxy routes for the dynamic forward proxy, removed before the upstream. */
export const PLUGIN_HOST_HEADER = "x-fundament-upstream-host";

/** Watches, log tails, exec and port-forward streams stay open; an idle one is closed after this. */
const STREAM_IDLE_TIMEOUT = "3600s";

/** Every kube-api-proxy route, static or registered (a new object each: shared ones would render as YAML anchors). */
function kubeApiStreams(): Record<string, unknown> {
  return {
    // Watches and log streams live as long as the client keeps them; only idleness ends them.
    timeout: "0s",
    idle_timeout: STREAM_IDLE_TIMEOUT,
    // exec, attach, port-forward: WebSocket (kubectl ≥ 1.30), SPDY for older clients.
    upgrade_configs: [{ upgrade_type: "websocket" }, { upgrade_type: "spdy/3.1" }],
  };
}

/** `/clusters/{id}/`, stripped by the registered clusters' route as `prefix_rewrite` does on the static ones. */
const REGISTERED_PREFIX = "/clusters/[^/]+/";

/** The exact Content-Security-Policy of FUN-17 §7, with this deployment's origins. */
export function pluginCsp(origins: EnvoyConfig["origins"]): string {
  const proxies = `${origins.kubeApiProxy} ${origins.pluginProxy}`;
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    `connect-src ${proxies}`,
    `form-action ${proxies}`,
    `frame-ancestors ${origins.console}`,
    "base-uri 'none'",
    "object-src 'none';",
  ].join("; ");
}

/** Envoy's ext_authz deadline in milliseconds: always longer than portcullis's own. */
export function extAuthzTimeoutMs(config: Config): number {
  return config.envoy?.extAuthzTimeoutMs ?? config.check.timeoutMs + EXT_AUTHZ_MARGIN_MS;
}

export class MissingEnvoySection extends Error {
  readonly code = "missing-envoy-section";
}

export function envoyBootstrap(config: Config): Record<string, unknown> {
  const envoy = config.envoy;
  if (envoy === undefined) throw new MissingEnvoySection("the configuration has no envoy section");
  const virtualHosts = buildRouteTable({ envoy, platform: config.platform }).hosts.map((h) => virtualHost(envoy, h));

  const clusters = [
    portcullisCluster(envoy, config),
    ...envoy.clusters.map((c) => kubeApiCluster(ENVOY_CLUSTERS.kubeApi(c.id), { server: c.apiServer, trustedCa: { filename: c.caFile } })),
    pluginServicesCluster(),
    upstreamCluster(ENVOY_CLUSTERS.assets, envoy.upstreams.assets.url, { streams: false, trustedCa: caFileOf(envoy.upstreams.assets) }),
  ];
  if (envoy.upstreams.konfidence !== undefined) {
    clusters.push(upstreamCluster(ENVOY_CLUSTERS.konfidence, envoy.upstreams.konfidence.url, { streams: false, trustedCa: caFileOf(envoy.upstreams.konfidence) }));
  }
  for (const p of envoy.platform) clusters.push(upstreamCluster(ENVOY_CLUSTERS.platform(p.name), p.upstream.url, { streams: false, trustedCa: caFileOf(p.upstream) }));
  if (envoy.tracing !== undefined) clusters.push(collectorCluster(envoy.tracing.collector));

  return {
    // xDS needs a node id and cluster; `--service-node`/`--service-cluster` override them per pod.
    node: { id: "fundament-envoy", cluster: "fundament-envoy" },
    admin: { address: socketAddress(envoy.admin.address, envoy.admin.port) },
    static_resources: {
      listeners: [listener(envoy, config, virtualHosts)],
      clusters,
    },
    dynamic_resources: { cds_config: clusterDiscovery() },
  };
}

/**
 * The registered clusters' upstreams come from portcullis's Cluster Discovery Service
 * (deploy/cluster-discovery.ts), State of the World over the connection Envoy already has to
 * portcullis (the ext_authz port, cluster `portcullis`: HTTP/2, TLS when listen.tls is set).
 */
function clusterDiscovery(): Record<string, unknown> {
  return {
    resource_api_version: "V3",
    api_config_source: {
      api_type: "GRPC",
      transport_api_version: "V3",
      grpc_services: [{ envoy_grpc: { cluster_name: ENVOY_CLUSTERS.portcullis } }],
      set_node_on_first_message_only: true,
    },
  };
}

/** The bootstrap as YAML, with a header saying where it came from. */
export function renderEnvoyYaml(config: Config): string {
  const doc = new Document(envoyBootstrap(config));
  doc.commentBefore = [
    " Generated by `portcullis envoy-config` from portcullis's own configuration; do not edit.",
    " Design notes (filter order, escaped slashes, plugin-proxy routing): src/deploy/envoy-config.ts.",
  ].join("\n");
  return doc.toString({ lineWidth: 0 });
}

function listener(envoy: EnvoyConfig, config: Config, virtualHosts: unknown[]): Record<string, unknown> {
  const hcm = {
    "@type": `${T}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`,
    stat_prefix: "public",
    codec_type: "AUTO",
    // Edge proxy: x-forwarded-for and x-request-id come from Envoy, not from the client.
    use_remote_address: true,
    normalize_path: true,
    merge_slashes: true,
    path_with_escaped_slashes_action: "REJECT_REQUEST",
    strip_any_host_port: true,
    common_http_protocol_options: { headers_with_underscores_action: "REJECT_REQUEST", idle_timeout: STREAM_IDLE_TIMEOUT },
    // WebSockets over HTTP/2 (RFC 8441) for browsers.
    http2_protocol_options: { allow_connect: true },
    request_headers_timeout: "10s",
    access_log: [accessLog()],
    ...(envoy.tracing === undefined ? {} : { tracing: hcmTracing(envoy.tracing) }),
    route_config: { name: "public", virtual_hosts: virtualHosts },
    http_filters: [
      { name: FILTER.cors, typed_config: { "@type": `${T}envoy.extensions.filters.http.cors.v3.Cors` } },
      { name: FILTER.extAuthz, typed_config: extAuthzFilter(config) },
      { name: FILTER.headerMutation, typed_config: { "@type": `${T}envoy.extensions.filters.http.header_mutation.v3.HeaderMutation` } },
      {
        name: FILTER.dynamicForwardProxy,
        typed_config: { "@type": `${T}envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig`, dns_cache_config: PLUGIN_DNS_CACHE },
      },
      { name: FILTER.router, typed_config: { "@type": `${T}envoy.extensions.filters.http.router.v3.Router` } },
    ],
  };
  const chain: Record<string, unknown> = { filters: [{ name: "envoy.filters.network.http_connection_manager", typed_config: hcm }] };
  const tls = envoy.listener.tls;
  if (tls !== undefined) {
    chain["transport_socket"] = {
      name: "envoy.transport_sockets.tls",
      typed_config: {
        "@type": `${T}envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext`,
        common_tls_context: {
          tls_certificates: [{ certificate_chain: { filename: tls.certificateChainFile }, private_key: { filename: tls.privateKeyFile } }],
          alpn_protocols: ["h2", "http/1.1"],
        },
      },
    };
  }
  return {
    name: "public",
    address: socketAddress(envoy.listener.address, envoy.listener.port),
    per_connection_buffer_limit_bytes: 32768,
    filter_chains: [chain],
  };
}

function extAuthzFilter(config: Config): Record<string, unknown> {
  return {
    "@type": `${T}envoy.extensions.filters.http.ext_authz.v3.ExtAuthz`,
    transport_api_version: "V3",
    grpc_service: { envoy_grpc: { cluster_name: ENVOY_CLUSTERS.portcullis }, timeout: seconds(extAuthzTimeoutMs(config)) },
    // Deny by default: portcullis down or slow is a 503, never an allow.
    failure_mode_allow: false,
    status_on_error: { code: "ServiceUnavailable" },
    // plugin-proxy routes on the headers portcullis sets (see the file comment).
    clear_route_cache: true,
    validate_mutations: true,
    include_peer_certificate: false,
    stat_prefix: "portcullis",
  };
}

/**
 * One virtual host of the route table (src/config/route-table.ts): its CORS policy and, per table
 * route, the Envoy routes that serve it. Every Envoy route built for a table route matches only
 * paths that route matches and names its policy and service, so Envoy and the checker's request
 * mode choose the same policy (test/config/route-table.envoy-oracle.test.ts).
 */
function virtualHost(envoy: EnvoyConfig, host: TableHost): Record<string, unknown> {
  return {
    name: host.name,
    domains: [host.host],
    ...(host.cors === undefined ? {} : { typed_per_filter_config: corsFor(host.cors) }),
    routes: host.routes.flatMap((r) => envoyRoutes(envoy, r)),
  };
}

function envoyRoutes(envoy: EnvoyConfig, r: TableRoute): Record<string, unknown>[] {
  switch (r.upstream.kind) {
    case "kube-api":
      return kubeApiRoutes(envoy, r);
    case "plugin-services":
      return pluginProxyRoutes(envoy, r);
    case "plugin-assets":
      return [pluginAssetsRoute(envoy, r)];
    case "konfidence":
      return [{ name: r.name, match: envoyMatch(r.match), route: { cluster: ENVOY_CLUSTERS.konfidence }, typed_per_filter_config: perRouteAuthz(r) }];
    case "platform":
      return [{ name: r.name, match: envoyMatch(r.match), route: { cluster: ENVOY_CLUSTERS.platform(r.upstream.service) }, typed_per_filter_config: perRouteAuthz(r) }];
    case "none":
      return [fallback(r.name, r)];
  }
}

/** `service` names a platform service for the platform-api and public policies. */
function perRouteAuthz(r: Pick<TableRoute, "policy" | "service">): Record<string, unknown> {
  if (r.policy === undefined) {
    return { [FILTER.extAuthz]: { "@type": `${T}envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute`, disabled: true } };
  }
  return {
    [FILTER.extAuthz]: {
      "@type": `${T}envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute`,
      check_settings: { context_extensions: r.service === undefined ? { policy: r.policy } : { policy: r.policy, service: r.service } },
    },
  };
}

/**
 * One origin admitted; a preflight from any other origin is answered by Envoy, without CORS headers,
 * and never reaches portcullis.
 */
function corsFor(cors: CorsPolicy): Record<string, unknown> {
  return {
    [FILTER.cors]: {
      "@type": `${T}envoy.extensions.filters.http.cors.v3.CorsPolicy`,
      allow_origin_string_match: [{ exact: cors.allowOrigin }],
      allow_methods: cors.allowMethods,
      allow_headers: cors.allowHeaders,
      expose_headers: cors.exposeHeaders,
      max_age: String(cors.maxAgeSeconds),
      allow_credentials: cors.allowCredentials,
      forward_not_matching_preflights: false,
    },
  };
}

/** As the table reads it: `prefix` and `path_separated_prefix` for prefixes, `path` for exact paths. */
function envoyMatch(m: PathMatch): Record<string, unknown> {
  switch (m.kind) {
    case "exact":
      return { path: m.path };
    case "prefix":
      return { prefix: m.prefix };
    case "segment-prefix":
      return { path_separated_prefix: m.prefix };
  }
}

/**
 * `/clusters/{id}/…` → that cluster's API server, with the prefix stripped. A static cluster has a
 * route of its own; a registered one is reached through `kube-api-registered`, which takes its
 * Envoy cluster (served by CDS) from the header portcullis sets on every kube-api-proxy allow
 * (KUBE_API_CLUSTER_HEADER). Before the check that route matches only a client's own copy of the
 * header, under the same policy; portcullis overwrites it from the URL and `clear_route_cache`
 * routes again, so the upstream is always the URL's cluster. A request without it (denied, or no
 * check yet) falls through to the 404.
 */
function kubeApiRoutes(envoy: EnvoyConfig, r: TableRoute): Record<string, unknown>[] {
  const routes: Record<string, unknown>[] = envoy.clusters.map((c) => ({
    name: `kube-api-${c.id}`,
    match: { prefix: `/clusters/${c.id}/` },
    route: { cluster: ENVOY_CLUSTERS.kubeApi(c.id), prefix_rewrite: "/", ...kubeApiStreams() },
    typed_per_filter_config: perRouteAuthz(r),
  }));
  routes.push({
    name: "kube-api-registered",
    match: { safe_regex: { regex: `^${REGISTERED_PREFIX}.*` }, headers: [{ name: KUBE_API_CLUSTER_HEADER, present_match: true }] },
    route: { cluster_header: KUBE_API_CLUSTER_HEADER, regex_rewrite: { pattern: { regex: `^${REGISTERED_PREFIX}` }, substitution: "/" }, ...kubeApiStreams() },
    // Read when the route is chosen; the API server has no use for it.
    request_headers_to_remove: [KUBE_API_CLUSTER_HEADER],
    typed_per_filter_config: perRouteAuthz(r),
  });
  // Any other cluster id: portcullis still answers (401 before 404, FUN-12); Envoy has nowhere to send it.
  routes.push(fallback("kube-api-unknown-cluster", r));
  return routes;
}

/**
 * Per static cluster, its runtime and controller routes, matched on its id, with its domain from
 * the configuration. Then one pair for every registered cluster, matched while portcullis's
 * x-fundament-upstream-domain is present and taking the domain from it (the cluster's Secret,
 * `service-domain`): portcullis sets it on allow only for a registered cluster that has one, and
 * removes a client's copy on every allow; before the check a client's copy reaches only this
 * policy, as the cluster-id routes do. Anything else under `/installations/`: 404 after the check.
 */
function pluginProxyRoutes(envoy: EnvoyConfig, r: TableRoute): Record<string, unknown>[] {
  const routes: Record<string, unknown>[] = [];
  const ports = { runtime: envoy.plugins.runtimePort, controller: envoy.plugins.controllerPort };
  for (const c of envoy.clusters) {
    for (const upstream of ["runtime", "controller"] as const) {
      routes.push(pluginRoute(r, upstream, ports[upstream], { name: c.id, header: { name: UPSTREAM_HEADERS.clusterId, string_match: { exact: c.id } }, domain: c.serviceDomain }));
    }
  }
  for (const upstream of ["runtime", "controller"] as const) {
    routes.push(pluginRoute(r, upstream, ports[upstream], { name: "registered", header: { name: UPSTREAM_HEADERS.domain, present_match: true }, domain: `%REQ(${UPSTREAM_HEADERS.domain})%` }));
  }
  routes.push(fallback("plugin-proxy-unrouted", r));
  return routes;
}

function pluginAssetsRoute(envoy: EnvoyConfig, r: TableRoute): Record<string, unknown> {
  return {
    name: r.name,
    match: envoyMatch(r.match),
    route: { cluster: ENVOY_CLUSTERS.assets },
    // Set here, outside the plugin's HTML, so plugin authors cannot weaken it (FUN-17 §7).
    response_headers_to_add: [
      overwrite("content-security-policy", pluginCsp(envoy.origins)),
      // A (name, version) resolves to one immutable definition forever (FUN-19), and so do its assets.
      overwrite("cache-control", "public, max-age=31536000, immutable"),
      overwrite("x-content-type-options", "nosniff"),
    ],
    typed_per_filter_config: perRouteAuthz(r),
  };
}

/**
 * `/installations/{id}/{runtime|controller}/…` on one static cluster, or on the registered ones,
 * once portcullis has set the routing headers: `on.header` selects it, `on.domain` ends the host.
 */
function pluginRoute(
  r: TableRoute,
  upstream: "runtime" | "controller",
  port: number,
  on: { name: string; header: Record<string, unknown>; domain: string },
): Record<string, unknown> {
  const host = `%REQ(${UPSTREAM_HEADERS.service})%.%REQ(${UPSTREAM_HEADERS.namespace})%.${on.domain}:${port}`;
  return {
    name: `plugin-${upstream}-${on.name}`,
    match: {
      safe_regex: { regex: `^/installations/[^/]+/${upstream}(/.*)?$` },
      headers: [on.header],
    },
    route: {
      cluster: ENVOY_CLUSTERS.plugins,
      regex_rewrite: { pattern: { regex: `^/installations/[^/]+/${upstream}/?` }, substitution: "/" },
      ...(upstream === "runtime"
        ? { timeout: "0s", idle_timeout: STREAM_IDLE_TIMEOUT, upgrade_configs: [{ upgrade_type: "websocket" }] }
        : { timeout: "30s" }),
    },
    request_headers_to_remove: [PLUGIN_HOST_HEADER],
    typed_per_filter_config: {
      ...perRouteAuthz(r),
      [FILTER.headerMutation]: {
        "@type": `${T}envoy.extensions.filters.http.header_mutation.v3.HeaderMutationPerRoute`,
        mutations: { request_mutations: [{ append: overwrite(PLUGIN_HOST_HEADER, host) }] },
      },
      [FILTER.dynamicForwardProxy]: {
        "@type": `${T}envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig`,
        host_rewrite_header: PLUGIN_HOST_HEADER,
      },
    },
  };
}

/**
 * A 404 from Envoy for paths under `r` it has nowhere to send: after portcullis's answer where `r`
 * names a policy (401 before 404, FUN-12), without a check where it names none (the platform catch-all).
 */
function fallback(name: string, r: TableRoute): Record<string, unknown> {
  return {
    name,
    match: envoyMatch(r.match),
    direct_response: { status: 404, body: { inline_string: '{"error":{"code":"not-found","message":"no route"}}' } },
    typed_per_filter_config: perRouteAuthz(r),
  };
}

function portcullisCluster(envoy: EnvoyConfig, config: Config): Record<string, unknown> {
  return {
    name: ENVOY_CLUSTERS.portcullis,
    // A headless Service: Envoy resolves every replica and balances Checks across them.
    type: "STRICT_DNS",
    dns_lookup_family: "V4_PREFERRED",
    dns_refresh_rate: "5s",
    connect_timeout: "0.25s",
    typed_extension_protocol_options: http2Options(),
    load_assignment: endpoints(ENVOY_CLUSTERS.portcullis, envoy.portcullis.host, portOf(config.listen.grpc)),
    // portcullis reports NOT_SERVING until its indexes sync and from the moment it begins to shut down.
    health_checks: [
      {
        timeout: "0.5s",
        interval: "2s",
        unhealthy_threshold: 2,
        healthy_threshold: 1,
        grpc_health_check: { service_name: "envoy.service.auth.v3.Authorization" },
      },
    ],
    ...(envoy.portcullis.tls === undefined ? {} : { transport_socket: portcullisTlsSocket(envoy.portcullis.host, envoy.portcullis.tls) }),
  };
}

/**
 * Envoy → portcullis over TLS (listen.tls): SNI and the certificate's DNS name are the Service's
 * name, the chain is checked against portcullis's CA, and with mTLS Envoy presents its own
 * certificate. Envoy watches these files and reloads them itself.
 */
function portcullisTlsSocket(host: string, tls: NonNullable<EnvoyConfig["portcullis"]["tls"]>): Record<string, unknown> {
  const serverName = tls.serverName ?? host;
  const clientCertificate =
    tls.clientCertificateChainFile === undefined || tls.clientPrivateKeyFile === undefined
      ? {}
      : { tls_certificates: [{ certificate_chain: { filename: tls.clientCertificateChainFile }, private_key: { filename: tls.clientPrivateKeyFile } }] };
  return {
    name: "envoy.transport_sockets.tls",
    typed_config: {
      "@type": `${T}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext`,
      sni: serverName,
      common_tls_context: {
        ...clientCertificate,
        validation_context: {
          trusted_ca: { filename: tls.caFile },
          match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: serverName } }],
        },
        alpn_protocols: ["h2"],
      },
    },
  };
}

/**
 * Envoy's OpenTelemetry tracer: a span per request (continuing a client's traceparent) and, because
 * the connection manager traces, a child span per ext_authz call whose context Envoy's gRPC client
 * sends to portcullis in the call's metadata. Spans go to the collector over OTLP/gRPC.
 */
function hcmTracing(tracing: NonNullable<EnvoyConfig["tracing"]>): Record<string, unknown> {
  return {
    random_sampling: { value: tracing.samplingPercent },
    provider: {
      name: "envoy.tracers.opentelemetry",
      typed_config: {
        "@type": `${T}envoy.config.trace.v3.OpenTelemetryConfig`,
        grpc_service: { envoy_grpc: { cluster_name: ENVOY_CLUSTERS.collector }, timeout: "1s" },
        service_name: tracing.serviceName,
      },
    },
  };
}

function collectorCluster(collector: NonNullable<EnvoyConfig["tracing"]>["collector"]): Record<string, unknown> {
  return {
    name: ENVOY_CLUSTERS.collector,
    type: isIP(collector.host.replace(/^\[|\]$/g, "")) === 0 ? "STRICT_DNS" : "STATIC",
    dns_lookup_family: "V4_PREFERRED",
    connect_timeout: "1s",
    typed_extension_protocol_options: http2Options(),
    load_assignment: endpoints(ENVOY_CLUSTERS.collector, collector.host, collector.port),
  };
}

function pluginServicesCluster(): Record<string, unknown> {
  return {
    name: ENVOY_CLUSTERS.plugins,
    connect_timeout: "2s",
    lb_policy: "CLUSTER_PROVIDED",
    cluster_type: {
      name: "envoy.clusters.dynamic_forward_proxy",
      typed_config: { "@type": `${T}envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig`, dns_cache_config: PLUGIN_DNS_CACHE },
    },
  };
}

/** Shared by the dynamic forward proxy filter and its cluster, as Envoy requires. */
const PLUGIN_DNS_CACHE = {
  name: "plugin-services",
  dns_lookup_family: "V4_PREFERRED",
  host_ttl: "300s",
  max_hosts: 4096,
};

/** Where Envoy finds the CAs an upstream's certificate chain must end in (a DataSource). */
export type TrustedCa = { readonly filename: string } | { readonly inline_string: string };

function caFileOf(upstream: { caFile?: string | undefined }): TrustedCa | undefined {
  return upstream.caFile === undefined ? undefined : { filename: upstream.caFile };
}

/** An API server's address and how its certificate is checked (as a kubeconfig's cluster entry says it). */
export interface KubeApiUpstream {
  /** `https://host[:port]`. */
  readonly server: string;
  readonly trustedCa: TrustedCa;
  /** The name the certificate must carry, and the SNI; the server's host when absent. */
  readonly tlsServerName?: string | undefined;
}

/**
 * The Envoy cluster of one Kubernetes cluster's API server: a static `envoy.clusters` entry here,
 * a registered cluster in portcullis's CDS (deploy/cluster-discovery.ts). Pure. Never a credential:
 * Envoy forwards the ServiceAccount token portcullis put in Authorization.
 */
export function kubeApiCluster(name: string, upstream: KubeApiUpstream): Record<string, unknown> {
  return upstreamCluster(name, upstream.server, { streams: true, trustedCa: upstream.trustedCa, serverName: upstream.tlsServerName });
}

/**
 * An upstream from an http(s) URL; https is verified against `trustedCa` and `serverName` (the
 * URL's host when absent), which is also the SNI.
 */
function upstreamCluster(
  name: string,
  url: string,
  options: { streams: boolean; trustedCa: TrustedCa | undefined; serverName?: string | undefined },
): Record<string, unknown> {
  const parsed = new URL(url);
  const host = parsed.hostname.replace(/^\[|\]$/g, "");
  const tls = parsed.protocol === "https:";
  const port = parsed.port === "" ? (tls ? 443 : 80) : Number(parsed.port);
  const cluster: Record<string, unknown> = {
    name,
    type: isIP(host) === 0 ? "LOGICAL_DNS" : "STATIC",
    dns_lookup_family: "V4_PREFERRED",
    connect_timeout: "2s",
    load_assignment: endpoints(name, host, port),
  };
  if (options.streams) {
    // Every open watch holds an upstream connection (HTTP/1.1): Envoy's default limit of 1024 is too low.
    cluster["circuit_breakers"] = { thresholds: [{ max_connections: 16384, max_pending_requests: 4096, max_requests: 16384 }] };
  }
  if (tls) {
    const certificateName = options.serverName ?? host;
    const ip = isIP(certificateName) !== 0;
    cluster["transport_socket"] = {
      name: "envoy.transport_sockets.tls",
      typed_config: {
        "@type": `${T}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext`,
        ...(ip ? {} : { sni: certificateName }),
        common_tls_context: {
          validation_context: {
            trusted_ca: options.trustedCa,
            // Envoy checks only the chain unless told which name the certificate must carry.
            match_typed_subject_alt_names: [{ san_type: ip ? "IP_ADDRESS" : "DNS", matcher: { exact: certificateName } }],
          },
        },
      },
    };
  }
  return cluster;
}

function accessLog(): Record<string, unknown> {
  return {
    name: "envoy.access_loggers.stdout",
    typed_config: {
      "@type": `${T}envoy.extensions.access_loggers.stream.v3.StdoutAccessLog`,
      // Request line and outcome only: no header that could carry a credential.
      log_format: {
        json_format: {
          time: "%START_TIME%",
          request_id: "%REQ(X-REQUEST-ID)%",
          authority: "%REQ(:AUTHORITY)%",
          method: "%REQ(:METHOD)%",
          path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
          status: "%RESPONSE_CODE%",
          flags: "%RESPONSE_FLAGS%",
          portcullis_reason: "%RESP(X-PORTCULLIS-REASON)%",
          duration_ms: "%DURATION%",
          upstream_cluster: "%UPSTREAM_CLUSTER%",
          upstream_host: "%UPSTREAM_HOST%",
        },
      },
    },
  };
}

function http2Options(): Record<string, unknown> {
  return {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
      "@type": `${T}envoy.extensions.upstreams.http.v3.HttpProtocolOptions`,
      explicit_http_config: { http2_protocol_options: {} },
    },
  };
}

function endpoints(name: string, host: string, port: number): Record<string, unknown> {
  return { cluster_name: name, endpoints: [{ lb_endpoints: [{ endpoint: { address: socketAddress(host, port) } }] }] };
}

function socketAddress(address: string, port: number): Record<string, unknown> {
  return { socket_address: { address: address.replace(/^\[|\]$/g, ""), port_value: port } };
}

function overwrite(key: string, value: string): Record<string, unknown> {
  return { header: { key, value }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" };
}

/** `https://host:port` → `host`: with strip_any_host_port, virtual hosts match the name alone. */
function hostOf(origin: string): string {
  return new URL(origin).hostname;
}

/** `host:port` (listen.*) → port. */
function portOf(address: string): number {
  return Number(address.slice(address.lastIndexOf(":") + 1));
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(3).replace(/\.?0+$/, "")}s`;
}
