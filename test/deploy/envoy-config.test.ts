/**
 * The generated Envoy configuration: the committed file is exactly the generator's output for the
 * committed example, it decodes strictly against Envoy's own protos, and every route, origin and
 * deadline comes from portcullis's configuration.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { loadConfig, parseConfig } from "../../src/config/load.ts";
import { envoyBootstrap, kubeApiCluster, MissingEnvoySection, pluginCsp, renderEnvoyYaml } from "../../src/deploy/envoy-config.ts";
import { decodeBootstrap, decodeMessage } from "../../src/envoy/bootstrap.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const EXAMPLE = resolve(ROOT, "deploy/examples/portcullis.yaml");
const COMMITTED = resolve(ROOT, "deploy/examples/envoy.yaml");
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const C2 = "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c";

type Json = Record<string, any>;

const example = () => loadConfig(EXAMPLE);
const hcmOf = (b: Json): Json => b["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config;
const filter = (b: Json, name: string): Json => hcmOf(b).http_filters.find((f: Json) => f.name === name).typed_config;
const vhost = (b: Json, name: string): Json => hcmOf(b).route_config.virtual_hosts.find((v: Json) => v.name === name);
const route = (b: Json, name: string): Json => {
  for (const v of hcmOf(b).route_config.virtual_hosts) {
    const r = v.routes.find((x: Json) => x.name === name);
    if (r !== undefined) return r;
  }
  throw new Error(`no route ${name}`);
};
const cluster = (b: Json, name: string): Json => b["static_resources"].clusters.find((c: Json) => c.name === name);
const authzOf = (r: Json): Json => r.typed_per_filter_config["envoy.filters.http.ext_authz"];
/** The policy a route names, or `disabled` where the route has no check at all. */
const policyOf = (r: Json) => (authzOf(r).disabled === true ? "disabled" : authzOf(r).check_settings.context_extensions.policy);

/** A minimal valid configuration with an envoy section, for rows that vary one thing. */
function config(envoy: Json = {}, rest: Json = {}) {
  return parseConfig(
    stringify({
      tokens: { secrets: [{ env: "S" }] },
      openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
      clusters: [{ id: C1 }],
      ...rest,
      envoy: {
        origins: { console: "https://console.example", kubeApiProxy: "https://kube.example", pluginProxy: "https://plugins.example:8443" },
        clusters: [{ id: C1, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" }],
        upstreams: { assets: { url: "http://assets:8080" } },
        ...envoy,
      },
    }),
  );
}

describe("the committed Envoy configuration", () => {
  it("is exactly what `portcullis envoy-config` generates from deploy/examples/portcullis.yaml", () => {
    // Regenerate: npx node src/cli/main.ts envoy-config --config deploy/examples/portcullis.yaml > deploy/examples/envoy.yaml
    expect(readFileSync(COMMITTED, "utf8")).toBe(renderEnvoyYaml(example()));
  });

  it("decodes strictly into Envoy's Bootstrap", () => {
    const result = decodeBootstrap(readFileSync(COMMITTED, "utf8"));
    if (!result.ok) expect.fail(result.errors.join("\n"));
  });

  it("decodes for a minimal configuration too (no TLS, no Konfidence, an IP API server)", () => {
    const result = decodeBootstrap(renderEnvoyYaml(config()));
    if (!result.ok) expect.fail(result.errors.join("\n"));
  });
});

describe("the decoder catches typos in the generated configuration", () => {
  const mutations: Array<{ name: string; mutate: (b: Json) => void; expected: RegExp }> = [
    { name: "misspelt ext_authz field", mutate: (b) => (filter(b, "envoy.filters.http.ext_authz")["clear_route_cach"] = true), expected: /unknown field "clear_route_cach"/ },
    { name: "string for a bool", mutate: (b) => (filter(b, "envoy.filters.http.ext_authz")["failure_mode_allow"] = "false"), expected: /failure_mode_allow: expected bool/ },
    { name: "misspelt enum", mutate: (b) => (hcmOf(b)["path_with_escaped_slashes_action"] = "REJECT"), expected: /invalid value string "REJECT"/ },
    { name: "misspelt @type", mutate: (b) => (filter(b, "envoy.filters.http.cors")["@type"] = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Corrs"), expected: /unknown type/ },
    { name: "misspelt route field", mutate: (b) => (route(b, `kube-api-${C1}`).route["prefix_rewirte"] = "/"), expected: /unknown field "prefix_rewirte"/ },
    { name: "bad duration", mutate: (b) => (route(b, `kube-api-${C1}`).route.timeout = "0"), expected: /expected duration string/ },
    { name: "misspelt cds_config field", mutate: (b) => (b["dynamic_resources"].cds_config["api_config_sorce"] = {}), expected: /unknown field "api_config_sorce"/ },
    { name: "misspelt header matcher", mutate: (b) => (route(b, "kube-api-registered").match.headers[0]["present"] = true), expected: /unknown field "present"/ },
    { name: "misspelt per-route CORS field", mutate: (b) => (vhost(b, "plugin-proxy").typed_per_filter_config["envoy.filters.http.cors"]["allow_origin"] = []), expected: /unknown field "allow_origin"/ },
  ];
  it.each(mutations)("$name", ({ mutate, expected }) => {
    const b = envoyBootstrap(example()) as Json;
    mutate(b);
    const result = decodeBootstrap(stringify(b));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.errors.join("\n")).toMatch(expected);
  });
});

describe("ext_authz", () => {
  it("fails closed, with a deadline longer than portcullis's own", () => {
    const c = example();
    const authz = filter(envoyBootstrap(c) as Json, "envoy.filters.http.ext_authz");
    expect(authz).toMatchObject({
      transport_api_version: "V3",
      grpc_service: { envoy_grpc: { cluster_name: "portcullis" } },
      failure_mode_allow: false,
      status_on_error: { code: "ServiceUnavailable" },
      clear_route_cache: true,
      include_peer_certificate: false,
    });
    expect(authz).not.toHaveProperty("with_request_body");
    expect(Number.parseFloat(authz.grpc_service.timeout) * 1000).toBeGreaterThan(c.check.timeoutMs);
  });

  it("applies the stream bounds portcullis sets (issue 54): no header mutation rules to refuse x-envoy-upstream-stream-duration-ms", () => {
    // With decoder_header_mutation_rules and no allow_envoy, Envoy would refuse x-envoy-* headers from the check.
    expect(filter(envoyBootstrap(example()) as Json, "envoy.filters.http.ext_authz")).not.toHaveProperty("decoder_header_mutation_rules");
  });

  it.each([
    { name: "default: check.timeoutMs + 200", envoy: {}, check: { timeoutMs: 800 }, timeout: "1s" },
    { name: "default follows check.timeoutMs", envoy: {}, check: { timeoutMs: 1500 }, timeout: "1.7s" },
    { name: "explicit", envoy: { extAuthzTimeoutMs: 2500 }, check: { timeoutMs: 800 }, timeout: "2.5s" },
  ])("timeout: $name", ({ envoy, check, timeout }) => {
    expect(filter(envoyBootstrap(config(envoy, { check })) as Json, "envoy.filters.http.ext_authz").grpc_service.timeout).toBe(timeout);
  });

  it("reaches portcullis over HTTP/2 on listen.grpc's port, health-checked", () => {
    const c = cluster(envoyBootstrap(config({}, { listen: { grpc: "0.0.0.0:7001" } })) as Json, "portcullis");
    expect(c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].explicit_http_config).toEqual({ http2_protocol_options: {} });
    expect(c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({ address: "portcullis-grpc.fundament-system.svc.cluster.local", port_value: 7001 });
    expect(c.health_checks[0].grpc_health_check).toEqual({ service_name: "envoy.service.auth.v3.Authorization" });
  });

  it("runs after CORS and before the routing filters", () => {
    expect(hcmOf(envoyBootstrap(example()) as Json).http_filters.map((f: Json) => f.name)).toEqual([
      "envoy.filters.http.cors",
      "envoy.filters.http.ext_authz",
      "envoy.filters.http.header_mutation",
      "envoy.filters.http.dynamic_forward_proxy",
      "envoy.filters.http.router",
    ]);
  });
});

describe("the connection manager: the path portcullis sees is the path the upstream serves", () => {
  it("normalises, merges slashes, rejects escaped slashes and underscored headers", () => {
    expect(hcmOf(envoyBootstrap(example()) as Json)).toMatchObject({
      normalize_path: true,
      merge_slashes: true,
      path_with_escaped_slashes_action: "REJECT_REQUEST",
      use_remote_address: true,
      common_http_protocol_options: { headers_with_underscores_action: "REJECT_REQUEST" },
    });
  });

  it("keeps the admin interface on loopback", () => {
    expect((envoyBootstrap(example()) as Json)["admin"].address.socket_address.address).toBe("127.0.0.1");
  });

  it("terminates TLS only when configured", () => {
    const withTls = (envoyBootstrap(example()) as Json)["static_resources"].listeners[0].filter_chains[0];
    expect(withTls.transport_socket.typed_config.common_tls_context.tls_certificates).toEqual([
      { certificate_chain: { filename: "/etc/envoy/tls/tls.crt" }, private_key: { filename: "/etc/envoy/tls/tls.key" } },
    ]);
    expect((envoyBootstrap(config()) as Json)["static_resources"].listeners[0].filter_chains[0]).not.toHaveProperty("transport_socket");
  });
});

describe("routes and their policies", () => {
  it("names a policy on every route, and the policy matching the route", () => {
    const b = envoyBootstrap(example()) as Json;
    const policies = Object.fromEntries(
      hcmOf(b).route_config.virtual_hosts.flatMap((v: Json) => v.routes.map((r: Json) => [r.name, policyOf(r)])),
    );
    expect(policies).toEqual({
      [`kube-api-${C1}`]: "kube-api-proxy",
      [`kube-api-${C2}`]: "kube-api-proxy",
      "kube-api-registered": "kube-api-proxy",
      "kube-api-unknown-cluster": "kube-api-proxy",
      [`plugin-runtime-${C1}`]: "plugin-proxy",
      [`plugin-controller-${C1}`]: "plugin-proxy",
      [`plugin-runtime-${C2}`]: "plugin-proxy",
      [`plugin-controller-${C2}`]: "plugin-proxy",
      "plugin-runtime-registered": "plugin-proxy",
      "plugin-controller-registered": "plugin-proxy",
      "plugin-proxy-unrouted": "plugin-proxy",
      "plugin-assets": "plugin-assets",
      "konfidence-api": "konfidence-api",
      "authn-api public /authn.v1.TokenService/ExchangeToken": "public",
      "authn-api public /authn.v1.TokenService/ExchangeWorkloadToken": "public",
      "authn-api public /login": "public",
      "authn-api public /login/password": "public",
      "authn-api public /callback": "public",
      "authn-api /authn.v1.": "platform-api",
      "authn-api /login": "platform-api",
      "authn-api /callback": "platform-api",
      "authn-api /logout": "platform-api",
      "authn-api /refresh": "platform-api",
      "platform-authn.fundament.io-unrouted": "disabled",
      "organization-api public /organization.v1.PluginService/GetPluginDefinition": "public",
      "organization-api /organization.v1.": "platform-api",
      "dcim-api /dcim.v1.": "platform-api",
      "platform-api.fundament.io-unrouted": "disabled",
    });
  });

  it("gives each public origin its virtual host", () => {
    const hosts = hcmOf(envoyBootstrap(example()) as Json).route_config.virtual_hosts.map((v: Json) => [v.name, v.domains]);
    expect(hosts).toEqual([
      ["kube-api-proxy", ["kube-api-proxy.fundament.io"]],
      ["plugin-proxy", ["plugin-proxy.fundament.io"]],
      ["konfidence-api", ["konfidence.fundament.io"]],
      ["platform-authn.fundament.io", ["authn.fundament.io"]],
      // organization-api and dcim-api share an origin, so a virtual host.
      ["platform-api.fundament.io", ["api.fundament.io"]],
    ]);
  });

  it("sends /clusters/{id}/ to that cluster's API server with the prefix stripped, streams unbounded", () => {
    const b = envoyBootstrap(example()) as Json;
    for (const id of [C1, C2]) {
      expect(route(b, `kube-api-${id}`)).toMatchObject({
        match: { prefix: `/clusters/${id}/` },
        route: {
          cluster: `kube-api-${id}`,
          prefix_rewrite: "/",
          timeout: "0s",
          idle_timeout: "3600s",
          upgrade_configs: [{ upgrade_type: "websocket" }, { upgrade_type: "spdy/3.1" }],
        },
      });
    }
  });

  it("sends a registered cluster's /clusters/{id}/ to the Envoy cluster portcullis's header names (served by CDS), after the static routes, streams unbounded", () => {
    const b = envoyBootstrap(example()) as Json;
    const registered = route(b, "kube-api-registered");
    expect(registered.match).toEqual({ safe_regex: { regex: "^/clusters/[^/]+/.*" }, headers: [{ name: "x-fundament-kube-api-cluster", present_match: true }] });
    expect(registered.route).toEqual({
      cluster_header: "x-fundament-kube-api-cluster",
      regex_rewrite: { pattern: { regex: "^/clusters/[^/]+/" }, substitution: "/" },
      timeout: "0s",
      idle_timeout: "3600s",
      upgrade_configs: [{ upgrade_type: "websocket" }, { upgrade_type: "spdy/3.1" }],
    });
    expect(registered.request_headers_to_remove).toEqual(["x-fundament-kube-api-cluster"]);
    expect(vhost(b, "kube-api-proxy").routes.map((r: Json) => r.name)).toEqual([`kube-api-${C1}`, `kube-api-${C2}`, "kube-api-registered", "kube-api-unknown-cluster"]);
  });

  // Envoy's RE2 and JavaScript agree on these patterns (no look-around, no back-references).
  it.each([
    { path: "/clusters/c1/api/v1/pods", matches: true, upstream: "/api/v1/pods" },
    { path: "/clusters/c1/", matches: true, upstream: "/" },
    { path: "/clusters/c1/clusters/c2/api", matches: true, upstream: "/clusters/c2/api" },
    { path: "/clusters/c1", matches: false },
    { path: "/clusters//api", matches: false },
    { path: "/cluster/c1/api", matches: false },
    { path: "/x/clusters/c1/api", matches: false },
  ])("the registered route on $path", ({ path, matches, upstream }) => {
    const registered = route(envoyBootstrap(example()) as Json, "kube-api-registered");
    // safe_regex matches the whole path.
    const match = new RegExp(`^(?:${registered.match.safe_regex.regex})$`);
    expect(match.test(path)).toBe(matches);
    if (matches) expect(path.replace(new RegExp(registered.route.regex_rewrite.pattern.regex), registered.route.regex_rewrite.substitution)).toBe(upstream);
  });

  it("asks portcullis for the registered clusters' upstreams: CDS, State of the World over gRPC v3, on the portcullis cluster", () => {
    const b = envoyBootstrap(example()) as Json;
    expect(b["dynamic_resources"]).toEqual({
      cds_config: {
        resource_api_version: "V3",
        api_config_source: { api_type: "GRPC", transport_api_version: "V3", grpc_services: [{ envoy_grpc: { cluster_name: "portcullis" } }], set_node_on_first_message_only: true },
      },
    });
    expect(b["node"]).toEqual({ id: "fundament-envoy", cluster: "fundament-envoy" });
  });

  it.each([
    { name: "a DNS name, CA file", upstream: { server: "https://api.c.example:6443", trustedCa: { filename: "/ca.crt" } }, sni: "api.c.example", san: { san_type: "DNS", matcher: { exact: "api.c.example" } } },
    { name: "an IP, inline CA", upstream: { server: "https://10.1.2.3:6443", trustedCa: { inline_string: "PEM" } }, sni: undefined, san: { san_type: "IP_ADDRESS", matcher: { exact: "10.1.2.3" } } },
    { name: "an IP and tls-server-name", upstream: { server: "https://10.1.2.3", trustedCa: { inline_string: "PEM" }, tlsServerName: "kubernetes.default" }, sni: "kubernetes.default", san: { san_type: "DNS", matcher: { exact: "kubernetes.default" } } },
  ])("kubeApiCluster: $name, decoded strictly into Envoy's Cluster", ({ upstream, sni, san }) => {
    const built = kubeApiCluster(`kube-api-${C1}`, upstream) as Json;
    const decoded = decodeMessage("envoy.config.cluster.v3.Cluster", built);
    if (!decoded.ok) expect.fail(decoded.errors.join("\n"));
    expect(built.name).toBe(`kube-api-${C1}`);
    expect(built.transport_socket.typed_config.sni).toBe(sni);
    expect(built.transport_socket.typed_config.common_tls_context.validation_context).toEqual({ trusted_ca: upstream.trustedCa, match_typed_subject_alt_names: [san] });
    expect(built.circuit_breakers.thresholds[0].max_connections).toBe(16384);
  });

  it("verifies each API server against its CA and name", () => {
    const b = envoyBootstrap(example()) as Json;
    const remote = cluster(b, `kube-api-${C2}`);
    expect(remote.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({ address: "api.workload-1.fundament.io", port_value: 6443 });
    expect(remote.transport_socket.typed_config).toMatchObject({
      sni: "api.workload-1.fundament.io",
      common_tls_context: {
        validation_context: {
          trusted_ca: { filename: `/etc/envoy/clusters/${C2}/ca.crt` },
          match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: "api.workload-1.fundament.io" } }],
        },
      },
    });
    const ip = cluster(envoyBootstrap(config()) as Json, `kube-api-${C1}`);
    expect(ip.type).toBe("STATIC");
    expect(ip.transport_socket.typed_config).not.toHaveProperty("sni");
    expect(ip.transport_socket.typed_config.common_tls_context.validation_context.match_typed_subject_alt_names).toEqual([
      { san_type: "IP_ADDRESS", matcher: { exact: "10.0.0.1" } },
    ]);
  });

  it("routes plugin-proxy on the cluster header portcullis sets, to {service}.{namespace}.{serviceDomain}", () => {
    const b = envoyBootstrap(example()) as Json;
    const runtime = route(b, `plugin-runtime-${C2}`);
    expect(runtime.match).toEqual({
      safe_regex: { regex: "^/installations/[^/]+/runtime(/.*)?$" },
      headers: [{ name: "x-fundament-cluster-id", string_match: { exact: C2 } }],
    });
    expect(runtime.route).toMatchObject({
      cluster: "plugin-services",
      regex_rewrite: { pattern: { regex: "^/installations/[^/]+/runtime/?" }, substitution: "/" },
    });
    expect(runtime.typed_per_filter_config["envoy.filters.http.header_mutation"].mutations.request_mutations).toEqual([
      {
        append: {
          header: {
            key: "x-fundament-upstream-host",
            value: "%REQ(x-fundament-upstream-service)%.%REQ(x-fundament-upstream-namespace)%.svc.workload-1.fundament.internal:8080",
          },
          append_action: "OVERWRITE_IF_EXISTS_OR_ADD",
        },
      },
    ]);
    expect(runtime.typed_per_filter_config["envoy.filters.http.dynamic_forward_proxy"].host_rewrite_header).toBe("x-fundament-upstream-host");
    expect(runtime.request_headers_to_remove).toEqual(["x-fundament-upstream-host"]);
    expect(route(b, `plugin-controller-${C1}`).route.regex_rewrite.pattern.regex).toBe("^/installations/[^/]+/controller/?");
  });

  it("routes a registered cluster's plugin-proxy requests on the domain header portcullis sets from its Secret, after every static cluster's routes", () => {
    const b = envoyBootstrap(example()) as Json;
    const names = hcmOf(b).route_config.virtual_hosts.find((v: Json) => v.routes.some((r: Json) => r.name === "plugin-proxy-unrouted")).routes.map((r: Json) => r.name);
    const at = names.indexOf("plugin-runtime-registered");
    expect(names.slice(at, at + 3)).toEqual(["plugin-runtime-registered", "plugin-controller-registered", "plugin-proxy-unrouted"]);
    expect(names.slice(0, at).filter((n: string) => n.startsWith("plugin-"))).toEqual([C1, C2].flatMap((id) => [`plugin-runtime-${id}`, `plugin-controller-${id}`]));
    for (const [upstream, port] of [["runtime", 8080], ["controller", 8080]] as const) {
      const registered = route(b, `plugin-${upstream}-registered`);
      expect(registered.match).toEqual({ safe_regex: { regex: `^/installations/[^/]+/${upstream}(/.*)?$` }, headers: [{ name: "x-fundament-upstream-domain", present_match: true }] });
      expect(registered.route).toMatchObject({ cluster: "plugin-services", regex_rewrite: { pattern: { regex: `^/installations/[^/]+/${upstream}/?` }, substitution: "/" } });
      expect(registered.typed_per_filter_config["envoy.filters.http.header_mutation"].mutations.request_mutations[0].append.header).toEqual({
        key: "x-fundament-upstream-host",
        value: `%REQ(x-fundament-upstream-service)%.%REQ(x-fundament-upstream-namespace)%.%REQ(x-fundament-upstream-domain)%:${port}`,
      });
      expect(registered.typed_per_filter_config["envoy.filters.http.ext_authz"].check_settings.context_extensions).toEqual({ policy: "plugin-proxy" });
    }
  });

  it("answers 404 for what Envoy cannot route, after portcullis's check", () => {
    const b = envoyBootstrap(example()) as Json;
    expect(route(b, "kube-api-unknown-cluster")).toMatchObject({ match: { prefix: "/clusters/" }, direct_response: { status: 404 } });
    expect(route(b, "plugin-proxy-unrouted")).toMatchObject({ match: { prefix: "/installations/" }, direct_response: { status: 404 } });
    // The catch-alls come after the routes they back up.
    const kubeRoutes = vhost(b, "kube-api-proxy").routes.map((r: Json) => r.name);
    expect(kubeRoutes.at(-1)).toBe("kube-api-unknown-cluster");
  });

  it("sends /api/v1/ to Konfidence only when it is configured", () => {
    expect(route(envoyBootstrap(example()) as Json, "konfidence-api")).toMatchObject({ match: { prefix: "/api/v1/" }, route: { cluster: "konfidence-api" } });
    const b = envoyBootstrap(config()) as Json;
    expect(vhost(b, "konfidence-api")).toBeUndefined();
    expect(cluster(b, "konfidence-api")).toBeUndefined();
  });

  it("needs an envoy section", () => {
    const { envoy: _, ...rest } = config();
    expect(() => envoyBootstrap(rest)).toThrow(MissingEnvoySection);
  });
});

describe("plugin assets (FUN-17 §7)", () => {
  const CSP =
    "default-src 'self'; script-src 'self'; style-src 'self'; " +
    "connect-src https://kube-api-proxy.fundament.io https://plugin-proxy.fundament.io; " +
    "form-action https://kube-api-proxy.fundament.io https://plugin-proxy.fundament.io; " +
    "frame-ancestors https://console.fundament.io; base-uri 'none'; object-src 'none';";

  it("carry exactly the seed's Content-Security-Policy, and long-lived caching", () => {
    const assets = route(envoyBootstrap(example()) as Json, "plugin-assets");
    expect(assets.match).toEqual({ prefix: "/plugins/" });
    expect(assets.route.cluster).toBe("plugin-assets");
    expect(assets.response_headers_to_add).toEqual([
      { header: { key: "content-security-policy", value: CSP }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" },
      { header: { key: "cache-control", value: "public, max-age=31536000, immutable" }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" },
      { header: { key: "x-content-type-options", value: "nosniff" }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" },
    ]);
  });

  it("take their origins from the configuration", () => {
    expect(pluginCsp({ console: "https://c.example", kubeApiProxy: "https://k.example", pluginProxy: "https://p.example:8443" })).toBe(
      "default-src 'self'; script-src 'self'; style-src 'self'; connect-src https://k.example https://p.example:8443; " +
        "form-action https://k.example https://p.example:8443; frame-ancestors https://c.example; base-uri 'none'; object-src 'none';",
    );
  });
});

describe("CORS (FUN-17 §7)", () => {
  it.each(["kube-api-proxy", "plugin-proxy"])("%s answers preflights for the plugin-proxy origin only, without credentials", (name) => {
    const cors = vhost(envoyBootstrap(config()) as Json, name).typed_per_filter_config["envoy.filters.http.cors"];
    expect(cors).toEqual({
      "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
      allow_origin_string_match: [{ exact: "https://plugins.example:8443" }],
      allow_methods: "GET, POST, PUT, PATCH, DELETE",
      allow_headers: "authorization, content-type, accept, x-request-id",
      expose_headers: "www-authenticate, retry-after, x-portcullis-reason",
      max_age: "600",
      allow_credentials: false,
      forward_not_matching_preflights: false,
    });
  });

  it("is not offered by the Konfidence host", () => {
    expect(vhost(envoyBootstrap(example()) as Json, "konfidence-api")).not.toHaveProperty("typed_per_filter_config");
  });
});

describe("the generated YAML", () => {
  it("parses back to the generator's object", () => {
    const c = example();
    expect(parse(renderEnvoyYaml(c))).toEqual(envoyBootstrap(c));
  });
});

describe("platform services (FUN-17 §3, FUN-19 §5)", () => {
  /** Envoy's route matching for the match kinds the generator uses: the first route that matches wins. */
  function matches(match: Json, path: string): boolean {
    if (match.path !== undefined) return path === match.path;
    if (match.prefix !== undefined) return path.startsWith(match.prefix);
    if (match.path_separated_prefix !== undefined) return path === match.path_separated_prefix || path.startsWith(`${match.path_separated_prefix}/`);
    throw new Error(`unexpected match ${JSON.stringify(match)}`);
  }
  function routed(b: Json, host: string, path: string): { policy: string; service?: string; cluster?: string } {
    const v = hcmOf(b).route_config.virtual_hosts.find((x: Json) => x.domains.includes(host));
    const r = v.routes.find((x: Json) => matches(x.match, path));
    const ext = authzOf(r).check_settings?.context_extensions;
    return { policy: policyOf(r), ...(ext?.service === undefined ? {} : { service: ext.service }), ...(r.route === undefined ? {} : { cluster: r.route.cluster }) };
  }

  it("has, per listed service, exactly one platform-api route per configured prefix and one public route per public path", () => {
    const c = example();
    const b = envoyBootstrap(c) as Json;
    const all = hcmOf(b).route_config.virtual_hosts.flatMap((v: Json) => v.routes);
    for (const s of c.platform.services) {
      const mine = all.filter((r: Json) => authzOf(r).check_settings?.context_extensions?.service === s.name);
      expect(mine.filter((r: Json) => policyOf(r) === "platform-api").map((r: Json) => r.match.prefix ?? r.match.path_separated_prefix)).toEqual(s.routes);
      expect(mine.filter((r: Json) => policyOf(r) === "public").map((r: Json) => r.match)).toEqual(s.public.map((path) => ({ path })));
      for (const r of mine) expect(r.route).toEqual({ cluster: `platform-${s.name}` });
    }
    expect(c.platform.services.map((s) => s.name)).toEqual(["authn-api", "organization-api", "dcim-api"]);
  });

  it.each([
    // FUN-19 §5: the plugin-controller's definition fetch carries no token.
    { host: "api.fundament.io", path: "/organization.v1.PluginService/GetPluginDefinition", expected: { policy: "public", service: "organization-api", cluster: "platform-organization-api" } },
    { host: "api.fundament.io", path: "/organization.v1.PluginService/PutPluginDefinition", expected: { policy: "platform-api", service: "organization-api", cluster: "platform-organization-api" } },
    // FUN-17 §3's replay target.
    { host: "api.fundament.io", path: "/organization.v1.APIKeyService/CreateAPIKey", expected: { policy: "platform-api", service: "organization-api", cluster: "platform-organization-api" } },
    { host: "api.fundament.io", path: "/dcim.v1.SiteService/ListSites", expected: { policy: "platform-api", service: "dcim-api", cluster: "platform-dcim-api" } },
    { host: "api.fundament.io", path: "/authn.v1.TokenService/MintPluginToken", expected: { policy: "disabled" } },
    { host: "api.fundament.io", path: "/", expected: { policy: "disabled" } },
    { host: "authn.fundament.io", path: "/authn.v1.TokenService/MintPluginToken", expected: { policy: "platform-api", service: "authn-api", cluster: "platform-authn-api" } },
    { host: "authn.fundament.io", path: "/authn.v1.TokenService/ExchangeToken", expected: { policy: "public", service: "authn-api", cluster: "platform-authn-api" } },
    { host: "authn.fundament.io", path: "/authn.v1.AuthnService/GetUserInfo", expected: { policy: "platform-api", service: "authn-api", cluster: "platform-authn-api" } },
    { host: "authn.fundament.io", path: "/login", expected: { policy: "public", service: "authn-api", cluster: "platform-authn-api" } },
    { host: "authn.fundament.io", path: "/login/password", expected: { policy: "public", service: "authn-api", cluster: "platform-authn-api" } },
    // Under a route but not listed public: a UserToken is needed.
    { host: "authn.fundament.io", path: "/login/other", expected: { policy: "platform-api", service: "authn-api", cluster: "platform-authn-api" } },
    { host: "authn.fundament.io", path: "/refresh", expected: { policy: "platform-api", service: "authn-api", cluster: "platform-authn-api" } },
    // A path-separated prefix is a whole segment: /loginx is nobody's.
    { host: "authn.fundament.io", path: "/loginx", expected: { policy: "disabled" } },
    { host: "authn.fundament.io", path: "/organization.v1.PluginService/GetPluginDefinition", expected: { policy: "disabled" } },
  ])("$host$path → $expected.policy", ({ host, path, expected }) => {
    expect(routed(envoyBootstrap(example()) as Json, host, path)).toEqual(expected);
  });

  it("answers what no service serves with Envoy's own 404, unchecked, after every service route", () => {
    for (const name of ["platform-authn.fundament.io", "platform-api.fundament.io"]) {
      const last = vhost(envoyBootstrap(example()) as Json, name).routes.at(-1);
      expect(last).toMatchObject({ match: { prefix: "/" }, direct_response: { status: 404 } });
      expect(authzOf(last)).toEqual({ "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute", disabled: true });
    }
  });

  it("sends each service to its upstream", () => {
    const b = envoyBootstrap(example()) as Json;
    expect(cluster(b, "platform-organization-api").load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({
      address: "organization-api.fundament-system.svc.cluster.local",
      port_value: 8080,
    });
    expect(cluster(b, "platform-authn-api").type).toBe("LOGICAL_DNS");
  });

  it("admits the Console only, with credentials (its session cookie), to CORS", () => {
    expect(vhost(envoyBootstrap(example()) as Json, "platform-api.fundament.io").typed_per_filter_config["envoy.filters.http.cors"]).toEqual({
      "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
      allow_origin_string_match: [{ exact: "https://console.fundament.io" }],
      allow_methods: "GET, POST",
      allow_headers: "authorization, content-type, connect-protocol-version, connect-timeout-ms, x-user-agent, x-request-id",
      expose_headers: "www-authenticate, retry-after, x-portcullis-reason",
      max_age: "600",
      allow_credentials: true,
      forward_not_matching_preflights: false,
    });
  });

  it("decodes strictly for a minimal configuration with one platform service", () => {
    const c = config(
      { platform: [{ name: "dcim-api", origin: "https://dcim.example", upstream: { url: "https://10.0.0.9:8443", caFile: "/dcim-ca.crt" } }] },
      { platform: { services: [{ name: "dcim-api", routes: ["/dcim.v1."] }] } },
    );
    const result = decodeBootstrap(renderEnvoyYaml(c));
    if (!result.ok) expect.fail(result.errors.join("\n"));
  });

  const service = (name: string, routes: string[], pub: string[] = []) => ({ name, routes, public: pub });
  const entry = (name: string, origin = "https://api.example") => ({ name, origin, upstream: { url: `http://${name}:8080` } });
  it.each([
    { name: "a service without an Envoy entry", services: [service("dcim-api", ["/dcim.v1."])], entries: [], error: /platform service dcim-api has no entry/ },
    { name: "an Envoy entry for no service", services: [], entries: [entry("dcim-api")], error: /dcim-api is not in platform.services/ },
    { name: "an entry listed twice", services: [service("dcim-api", ["/dcim.v1."])], entries: [entry("dcim-api"), entry("dcim-api")], error: /dcim-api is listed twice/ },
    {
      name: "overlapping routes of two services on one origin",
      services: [service("a-api", ["/login"]), service("b-api", ["/login/password"])],
      entries: [entry("a-api"), entry("b-api")],
      error: /b-api's route \/login\/password overlaps a-api's \/login/,
    },
    {
      name: "a Connect package and one of its services on one origin",
      services: [service("a-api", ["/org.v1."]), service("b-api", ["/org.v1.KeyService/"])],
      entries: [entry("a-api"), entry("b-api")],
      error: /overlaps/,
    },
    { name: "the origin of kube-api-proxy", services: [service("dcim-api", ["/dcim.v1."])], entries: [entry("dcim-api", "https://kube.example")], error: /already kube-api-proxy's/ },
  ])("rejects $name", ({ services, entries, error }) => {
    expect(() => config({ platform: entries }, { platform: { services } })).toThrow(error);
  });

  it("accepts the same routes on two different origins", () => {
    const c = config(
      { platform: [entry("a-api", "https://a.example"), entry("b-api", "https://b.example")] },
      { platform: { services: [service("a-api", ["/login"]), service("b-api", ["/login"])] } },
    );
    expect(hcmOf(envoyBootstrap(c) as Json).route_config.virtual_hosts.map((v: Json) => v.name)).toContain("platform-b.example");
  });
});

describe("Envoy → portcullis over TLS (listen.tls ↔ envoy.portcullis.tls)", () => {
  const HOST = "portcullis-grpc.fundament-system.svc.cluster.local";
  const listenTls = (tls: Json = {}) => ({ listen: { tls: { certFile: "/tls/tls.crt", keyFile: "/tls/tls.key", ...tls } } });
  const mtls = () =>
    config(
      { portcullis: { host: HOST, tls: { caFile: "/etc/envoy/portcullis/ca.crt", clientCertificateChainFile: "/etc/envoy/portcullis/tls.crt", clientPrivateKeyFile: "/etc/envoy/portcullis/tls.key" } } },
      listenTls({ clientCaFile: "/tls/ca.crt", requireClientCert: true }),
    );
  const socketOf = (b: Json): Json => cluster(b, "portcullis").transport_socket;

  it("decodes strictly into Envoy's Bootstrap, with an UpstreamTlsContext on the portcullis cluster", () => {
    const yaml = renderEnvoyYaml(mtls());
    const result = decodeBootstrap(yaml);
    if (!result.ok) expect.fail(result.errors.join("\n"));
    expect(socketOf(parse(yaml) as Json)).toEqual({
      name: "envoy.transport_sockets.tls",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        sni: HOST,
        common_tls_context: {
          tls_certificates: [{ certificate_chain: { filename: "/etc/envoy/portcullis/tls.crt" }, private_key: { filename: "/etc/envoy/portcullis/tls.key" } }],
          validation_context: {
            trusted_ca: { filename: "/etc/envoy/portcullis/ca.crt" },
            match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: HOST } }],
          },
          alpn_protocols: ["h2"],
        },
      },
    });
  });

  it("the decoder catches a misspelt field inside the TLS context", () => {
    const b = envoyBootstrap(mtls()) as Json;
    socketOf(b).typed_config.common_tls_context.validation_context["trusted_cert"] = { filename: "/x" };
    const result = decodeBootstrap(stringify(b));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.errors.join("\n")).toMatch(/unknown field "trusted_cert"/);
  });

  it("TLS without a client certificate, and an explicit server name for SNI and the SAN check", () => {
    const b = envoyBootstrap(config({ portcullis: { host: HOST, tls: { caFile: "/ca.crt", serverName: "portcullis.internal" } } }, listenTls())) as Json;
    const tls = socketOf(b).typed_config;
    expect(tls.sni).toBe("portcullis.internal");
    expect(tls.common_tls_context.tls_certificates).toBeUndefined();
    expect(tls.common_tls_context.validation_context.match_typed_subject_alt_names).toEqual([{ san_type: "DNS", matcher: { exact: "portcullis.internal" } }]);
    const result = decodeBootstrap(stringify(b));
    if (!result.ok) expect.fail(result.errors.join("\n"));
  });

  it("plaintext when portcullis listens in plaintext", () => {
    expect(socketOf(envoyBootstrap(config()) as Json)).toBeUndefined();
  });

  it.each([
    { name: "listen.tls without envoy.portcullis.tls", envoy: {}, rest: listenTls(), error: /envoy\.portcullis\.tls.*Envoy needs caFile/s },
    { name: "envoy.portcullis.tls without listen.tls", envoy: { portcullis: { tls: { caFile: "/ca.crt" } } }, rest: {}, error: /portcullis listens in plaintext/ },
    {
      name: "mTLS required but Envoy has no client certificate",
      envoy: { portcullis: { tls: { caFile: "/ca.crt" } } },
      rest: listenTls({ clientCaFile: "/tls/ca.crt", requireClientCert: true }),
      error: /requireClientCert is set: Envoy needs a client certificate/,
    },
    {
      name: "a client certificate without its key",
      envoy: { portcullis: { tls: { caFile: "/ca.crt", clientCertificateChainFile: "/c.crt" } } },
      rest: listenTls(),
      error: /set both clientCertificateChainFile and clientPrivateKeyFile/,
    },
    { name: "a relative CA path", envoy: { portcullis: { tls: { caFile: "ca.crt" } } }, rest: listenTls(), error: /absolute file path/ },
  ])("rejects $name", ({ envoy, rest, error }) => {
    expect(() => config(envoy, rest)).toThrow(error);
  });
});

describe("Envoy's tracing (envoy.tracing)", () => {
  const traced = () => config({ tracing: { collector: { host: "otel-collector.observability.svc.cluster.local" }, samplingPercent: 5 } });

  it("decodes strictly, with the OpenTelemetry tracer on the connection manager and a collector cluster", () => {
    const yaml = renderEnvoyYaml(traced());
    const result = decodeBootstrap(yaml);
    if (!result.ok) expect.fail(result.errors.join("\n"));
    const b = parse(yaml) as Json;
    expect(hcmOf(b).tracing).toEqual({
      random_sampling: { value: 5 },
      provider: {
        name: "envoy.tracers.opentelemetry",
        typed_config: {
          "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
          grpc_service: { envoy_grpc: { cluster_name: "opentelemetry-collector" }, timeout: "1s" },
          service_name: "envoy",
        },
      },
    });
    expect(cluster(b, "opentelemetry-collector")).toMatchObject({
      type: "STRICT_DNS",
      load_assignment: { endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: "otel-collector.observability.svc.cluster.local", port_value: 4317 } } } }] }] },
    });
    expect(Object.keys(cluster(b, "opentelemetry-collector").typed_extension_protocol_options)).toEqual(["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]);
  });

  it("the decoder catches a misspelt tracer field", () => {
    const b = envoyBootstrap(traced()) as Json;
    hcmOf(b).tracing.provider.typed_config["service_nam"] = "x";
    const result = decodeBootstrap(stringify(b));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.errors.join("\n")).toMatch(/unknown field "service_nam"/);
  });

  it("is absent unless configured", () => {
    const b = envoyBootstrap(config()) as Json;
    expect(hcmOf(b).tracing).toBeUndefined();
    expect(cluster(b, "opentelemetry-collector")).toBeUndefined();
  });

  it.each([
    { name: "a sampling percentage above 100", tracing: { collector: { host: "c" }, samplingPercent: 101 } },
    { name: "no collector", tracing: { samplingPercent: 1 } },
    { name: "an unknown key", tracing: { collector: { host: "c" }, sampling: 1 } },
  ])("rejects $name", ({ tracing }) => {
    expect(() => config({ tracing })).toThrow(/envoy\.tracing/);
  });
});
