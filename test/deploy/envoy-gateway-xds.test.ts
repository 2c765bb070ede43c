/**
 * The proof that Envoy Gateway does with the generated manifests what plain Envoy does: Envoy
 * Gateway's own translator (`egctl experimental translate`, v1.9.1, built from the Go module proxy by
 * scripts/deps/install.sh; offline, about a second) turns the Gateway, the kit's ClusterIP Service and
 * every object `portcullis gateway-config --target envoy-gateway` prints for the example configuration
 * into Envoy's xDS. From that output, decoded strictly against the vendored Envoy protos:
 *   - every generated object is Accepted (its references resolved) by Envoy Gateway;
 *   - every route of every route configuration reaches the ext_authz filter: the filter is in the
 *     listener's chain before the router, fail closed (failure_mode_allow false, 503 on error), and
 *     the route enables it with ExtAuthzPerRoute check_settings.context_extensions equal to what
 *     plain Envoy's route names for the same host and path (envoy-config);
 *   - no route goes without the check, and no route of plain Envoy's that a gateway can serve is
 *     missing; the CORS filter runs before ext_authz.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { parseConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/schema.ts";
import { extAuthzTimeoutMs } from "../../src/deploy/envoy-config.ts";
import { gatewayManifests, gatewayRoutes, placeRules, type GatewayOptions } from "../../src/deploy/gateway-config.ts";
import { decodeMessage } from "../../src/envoy/bootstrap.ts";
import { resolveBinary } from "../harness/binaries.ts";
import { TestPki } from "../support/certificates.ts";
import { backendServices, exampleConfig as config, extAuthzService, gatewayObjects, type Json, PLACEMENT } from "../support/gateway.ts";
import { type Manifest, ROOT } from "../support/kustomize.ts";

const OPTIONS: GatewayOptions = { target: "envoy-gateway", ...PLACEMENT, proxyNamespace: "envoy-gateway-system" };
const EXT_AUTHZ = "envoy.filters.http.ext_authz";

/** What Envoy Gateway's translator reads beside the generated objects: the Gateway, and the Services and CAs the routes name. */
function world(caPem: string, generated: Manifest[]): Manifest[] {
  // ClusterIPs stand in for the ones the API server would assign.
  const extAuthz = extAuthzService();
  const services: Manifest[] = [{ ...extAuthz, spec: { ...extAuthz["spec"], clusterIP: "10.96.0.10" } }, ...backendServices(config, (i) => `10.96.0.${20 + i}`)];
  const caNames = new Set(generated.flatMap((o) => [...(o["spec"]?.validation?.caCertificateRefs ?? []), ...(o["spec"]?.tls?.caCertificateRefs ?? [])].map((ref: Json) => `${o["metadata"].namespace}/${ref["name"]}`)));
  const cas = [...caNames].map((key) => {
    const [namespace, name] = key.split("/");
    return { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace }, data: { "ca.crt": caPem } };
  });
  return [...gatewayObjects(OPTIONS, { name: "envoy-gateway", controllerName: "gateway.envoyproxy.io/gatewayclass-controller" }), ...services, ...cas];
}

let output: Json;
let generated: Manifest[];
let dir: string;
let ca: string;

/** `egctl experimental translate` of the world and what gateway-config generates for `from`: its JSON, and the generated objects. */
function translate(from: Config, name: string): { output: Json; generated: Manifest[] } {
  // The NetworkPolicy is Kubernetes', not Envoy Gateway's: the translator has no use for it.
  const objects = gatewayManifests(from, OPTIONS).filter((o) => o["kind"] !== "NetworkPolicy");
  const input = [...world(ca, objects), ...objects].map((o) => stringify(o)).join("---\n");
  writeFileSync(join(dir, `${name}.yaml`), input);
  const out = execFileSync(resolveBinary("egctl"), ["experimental", "translate", "--from", "gateway-api", "--to", "gateway-api,xds", "--file", join(dir, `${name}.yaml`), "--output", "json"], {
    encoding: "utf8",
    maxBuffer: 64 << 20,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return { output: JSON.parse(out) as Json, generated: objects };
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-egctl-"));
  const pki = new TestPki();
  ca = pki.ca("upstream-ca").cert.toString("utf8");
  pki.remove();
  ({ output, generated } = translate(config, "input"));
}, 60_000);

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The config dump of the one Gateway. */
function configDump(): Json[] {
  const xds = output["xds"] as Json;
  const keys = Object.keys(xds);
  expect(keys).toEqual([`${OPTIONS.gateway.namespace}/${OPTIONS.gateway.name}`]);
  return xds[keys[0]!].configs as Json[];
}
const dumpOf = (type: string) => configDump().find((c) => c["@type"] === `type.googleapis.com/envoy.admin.v3.${type}`)!;
/** The Gateway's listeners; Envoy Gateway's own readiness listener (port 19003, a fixed 500 for its probe) aside. */
const gatewayListeners = (): Json[] =>
  (dumpOf("ListenersConfigDump")["dynamicListeners"] as Json[])
    .map((l) => decoded("envoy.config.listener.v3.Listener", l["activeState"]["listener"]))
    .filter((l) => l["name"].startsWith(`${OPTIONS.gateway.namespace}/${OPTIONS.gateway.name}/`));

/**
 * Strict decode against the vendored protos; the decoded message as plain JSON with proto field
 * names. The dump's entries are Anys: their `@type` must be the type decoded.
 */
function decoded(typeName: string, value: Json): Json {
  const { "@type": type, ...fields } = value;
  expect(type).toBe(`type.googleapis.com/${typeName}`);
  const result = decodeMessage(typeName, fields);
  if (!result.ok) throw new Error(`${typeName} does not decode: ${result.errors.slice(0, 5).join("; ")}`);
  return result.message.toJSON() as Json;
}

describe("Envoy Gateway's translator", () => {
  it("accepts every generated object", () => {
    // egctl prints the translated objects, with their status, beside the xDS.
    const { xds: _, ...resources } = output;
    const notAccepted: string[] = [];
    const conditionsOf = (o: Json): Json[] => [...(o["status"]?.conditions ?? []), ...(o["status"]?.parents ?? []).flatMap((p: Json) => p.conditions), ...(o["status"]?.ancestors ?? []).flatMap((a: Json) => a.conditions)];
    for (const [kind, list] of Object.entries(resources)) {
      if (!Array.isArray(list)) continue;
      for (const o of list as Json[]) {
        const mine = generated.some((g) => g["metadata"].name === o["metadata"]?.name && g["metadata"].namespace === o["metadata"]?.namespace);
        if (!mine) continue;
        for (const c of conditionsOf(o)) {
          if ((c.type === "Accepted" || c.type === "ResolvedRefs") && c.status !== "True") notAccepted.push(`${kind} ${o["metadata"].name}: ${c.type} ${c.reason} ${c.message}`);
        }
      }
    }
    expect(notAccepted).toEqual([]);
  });
});

/**
 * The one field Envoy Gateway v1.9.1 sets that the vendored Envoy API (grpc-js-xds 1.14.1's, older)
 * does not have: DirectResponseAction.body_format, on the checked 404 (HTTPRouteFilter) routes. It is
 * removed there, and only there, before the strict decode; anything else unknown still fails.
 */
function withoutNewerFields(routeConfig: Json): Json {
  const copy = structuredClone(routeConfig);
  for (const vh of copy["virtualHosts"] as Json[]) {
    for (const route of vh["routes"] as Json[]) {
      const direct = route["directResponse"] as Json | undefined;
      if (direct?.["bodyFormat"] === undefined) continue;
      expect(direct["status"], route["name"]).toBe(404);
      delete direct["bodyFormat"];
    }
  }
  return copy;
}

describe("every route Envoy Gateway generates", () => {
  /** Every route, decoded; `origin` is the HTTPRoute rule Envoy Gateway records in the route's metadata. */
  const checkedRoutes = () => {
    const routeDump = dumpOf("RoutesConfigDump");
    return (routeDump["dynamicRouteConfigs"] as Json[]).flatMap((c) => {
      const rc = decoded("envoy.config.route.v3.RouteConfiguration", withoutNewerFields(c["routeConfig"]));
      return (rc["virtual_hosts"] as Json[]).flatMap((vh, i) =>
        (vh["routes"] as Json[]).map((route, j) => {
          const raw = c["routeConfig"]["virtualHosts"][i]["routes"][j] as Json;
          return { vh, route, origin: raw["metadata"]?.filterMetadata?.["envoy-gateway"]?.resources?.[0] as Json | undefined };
        }),
      );
    });
  };

  it("decodes strictly against Envoy's protos: every listener, its filters, every route configuration", () => {
    const all = (dumpOf("ListenersConfigDump")["dynamicListeners"] as Json[]).map((l) => decoded("envoy.config.listener.v3.Listener", l["activeState"]["listener"]));
    expect(all.length).toBe(2);
    expect(gatewayListeners()).toHaveLength(1);
    expect(checkedRoutes().length).toBeGreaterThan(0);
  });

  it("runs behind an ext_authz filter that fails closed, before the router, after CORS, calling portcullis's Service within the generated deadline", () => {
    for (const listener of gatewayListeners()) {
      for (const chain of [...(listener["filter_chains"] ?? []), ...(listener["default_filter_chain"] === undefined ? [] : [listener["default_filter_chain"]])] as Json[]) {
        const hcm = chain["filters"].find((f: Json) => f.name === "envoy.filters.network.http_connection_manager").typed_config;
        const names: string[] = hcm.http_filters.map((f: Json) => f.name);
        const authz = hcm.http_filters.filter((f: Json) => f.name.startsWith(EXT_AUTHZ));
        expect(authz.length, names.join(", ")).toBeGreaterThan(0);
        for (const f of authz) {
          expect(names.indexOf(f.name)).toBeLessThan(names.indexOf("envoy.filters.http.router"));
          expect(names.findIndex((n) => n.startsWith("envoy.filters.http.cors"))).toBeLessThan(names.indexOf(f.name));
          const c = f.typed_config;
          expect(c.failure_mode_allow ?? false).toBe(false);
          expect(c.status_on_error).toEqual({ code: "ServiceUnavailable" });
          const timeoutMs = Number(c.grpc_service.timeout.seconds) * 1000 + c.grpc_service.timeout.nanos / 1e6;
          expect(timeoutMs).toBe(extAuthzTimeoutMs(config));
          expect(timeoutMs).toBeGreaterThan(config.check.timeoutMs);
          expect(c.grpc_service.envoy_grpc.authority).toBe(`portcullis-ext-authz.${OPTIONS.namespace}:9001`);
        }
        // Each SecurityPolicy's filter is off by default: a route it targets turns it on (below).
        for (const f of authz) expect(f.disabled).toBe(true);
        expect(hcm.path_with_escaped_slashes_action).toBe("REJECT_REQUEST");
        expect(hcm.common_http_protocol_options?.headers_with_underscores_action).toBe("REJECT_REQUEST");
      }
    }
  });

  it("applies the stream bounds portcullis sets (issue 54): no header mutation rules to refuse x-envoy-upstream-stream-duration-ms", () => {
    for (const listener of gatewayListeners()) {
      for (const chain of [...(listener["filter_chains"] ?? []), ...(listener["default_filter_chain"] === undefined ? [] : [listener["default_filter_chain"]])] as Json[]) {
        const hcm = chain["filters"].find((f: Json) => f.name === "envoy.filters.network.http_connection_manager").typed_config;
        const authz = hcm.http_filters.filter((f: Json) => f.name.startsWith(EXT_AUTHZ));
        expect(authz.length).toBeGreaterThan(0);
        // With decoder_header_mutation_rules and no allow_envoy, Envoy would refuse x-envoy-* headers from the check.
        for (const f of authz) expect(f.typed_config).not.toHaveProperty("decoder_header_mutation_rules");
      }
    }
  });

  it("each ext_authz cluster reaches portcullis's Service over HTTP/2 (decoded strictly, with Envoy Gateway's load balancing policy)", () => {
    const clusters = (dumpOf("ClustersConfigDump")["dynamicActiveClusters"] as Json[]).map((c) => c["cluster"] as Json).filter((c) => /^securitypolicy\/.*\/extauth\//.test(c["name"]));
    expect(clusters).toHaveLength(9);
    for (const c of clusters) {
      const cluster = decoded("envoy.config.cluster.v3.Cluster", c);
      const options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
      expect(JSON.stringify(options), cluster["name"]).toContain("http2_protocol_options");
    }
    // Its endpoints: the ClusterIP of the kit's portcullis-ext-authz Service (egctl routes to Services, not Endpoints), its gRPC port.
    const endpoints = (dumpOf("EndpointsConfigDump")["dynamicEndpointConfigs"] as Json[]).map((e) => e["endpointConfig"] as Json).filter((e) => /\/extauth\//.test(e["clusterName"]));
    expect(endpoints).toHaveLength(9);
    for (const e of endpoints) {
      const addresses = (e["endpoints"] as Json[]).flatMap((l) => l["lbEndpoints"]).map((l: Json) => l.endpoint.address.socketAddress);
      expect(addresses, e["clusterName"]).toEqual([{ address: "10.96.0.10", portValue: 9001 }]);
    }
  });

  it("enables the check with the context extensions plain Envoy's route names; no route goes without it", () => {
    const placed = placeRules(gatewayRoutes(config).routes);
    const unchecked: string[] = [];
    const seen = new Set<string>();
    for (const { vh, route, origin } of checkedRoutes()) {
      const perFilter = route["typed_per_filter_config"] ?? {};
      const authz = Object.entries(perFilter).filter(([name]) => name.startsWith(EXT_AUTHZ));
      const where = `${vh["name"]} ${route["name"]}`;
      if (authz.length !== 1) {
        unchecked.push(`${where}: ${authz.length} ext_authz configs`);
        continue;
      }
      const value = authz[0]![1] as Json;
      // Envoy Gateway enables its (disabled) filter per route; contextExtensions ride in ExtAuthzPerRoute.
      const perRoute = value["@type"] === "type.googleapis.com/envoy.config.route.v3.FilterConfig" ? value.config : value;
      if (perRoute?.["@type"] !== "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute" || perRoute.disabled === true) {
        unchecked.push(`${where}: ${JSON.stringify(value)}`);
        continue;
      }
      // The rule it came from: Envoy Gateway records the HTTPRoute and section name in the route's metadata.
      const rule = placed.find((p) => p.httpRoute === origin!["name"] && p.sectionName === origin!["sectionName"]);
      expect(rule, where).toBeDefined();
      expect(perRoute.check_settings.context_extensions, where).toEqual({ policy: rule!.route.policy, ...(rule!.route.service === undefined ? {} : { service: rule!.route.service }) });
      seen.add(`${rule!.httpRoute}/${rule!.sectionName}`);
    }
    expect(unchecked).toEqual([]);
    // Every route the generator placed came out of the translator, checked.
    expect([...seen].sort()).toEqual(placed.map((p) => `${p.httpRoute}/${p.sectionName}`).sort());
  });
});

describe("portcullis with TLS (listen.tls)", () => {
  it("every ext_authz cluster speaks TLS to it, with the name and CA plain Envoy checks", () => {
    const raw = parse(readFileSync(resolve(ROOT, "deploy/examples/portcullis.yaml"), "utf8")) as Json;
    const tlsConfig = parseConfig(stringify({
      ...raw,
      listen: { ...raw["listen"], tls: { certFile: "/tls/tls.crt", keyFile: "/tls/tls.key" } },
      envoy: { ...raw["envoy"], portcullis: { ...raw["envoy"].portcullis, tls: { caFile: "/etc/envoy/portcullis-ca.crt" } } },
    }));
    const { output: tlsOutput } = translate(tlsConfig, "tls");
    const clusters = (tlsOutput["xds"][`${OPTIONS.gateway.namespace}/${OPTIONS.gateway.name}`].configs as Json[])
      .find((c) => c["@type"] === "type.googleapis.com/envoy.admin.v3.ClustersConfigDump")!["dynamicActiveClusters"] as Json[];
    const extAuthz = clusters.map((c) => c["cluster"]).filter((c: Json) => /^securitypolicy\/.*\/extauth\//.test(c.name));
    expect(extAuthz.length).toBe(9);
    for (const c of extAuthz) {
      // Envoy Gateway attaches BackendTLSPolicy's TLS to the endpoints through transportSocketMatches
      // (the cluster's own socket is its placeholder, an empty UpstreamTlsContext).
      const sockets = (c.transportSocketMatches ?? []).map((m: Json) => m.transportSocket);
      expect(sockets.length, c.name).toBeGreaterThan(0);
      for (const socket of sockets) {
        const tls = decoded("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", socket.typedConfig);
        const name = tlsConfig.envoy!.portcullis.host;
        expect(tls["sni"], c.name).toBe(name);
        const validation = tls["common_tls_context"].combined_validation_context;
        expect(validation.default_validation_context.match_typed_subject_alt_names, c.name).toEqual([{ san_type: "DNS", matcher: { exact: name } }]);
        // The CA: the BackendTLSPolicy's ConfigMap, served by SDS.
        expect(validation.validation_context_sds_secret_config.name, c.name).toMatch(/^portcullis-ext-authz\//);
      }
    }
  });
});
