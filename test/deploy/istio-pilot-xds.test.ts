/**
 * The proof that Istio does with the generated manifests what plain Envoy does: Istio's own config
 * generation (pilot-discovery, istio.io/istio at the pseudo-version scripts/deps/install.sh pins,
 * built from the Go module proxy) watches a real kube-apiserver with the Gateway API and Istio CRDs,
 * the generated objects and the Services they name applied, and serves the gateway's xDS. This test
 * connects as the gateway's proxy over ADS (plaintext), asks for its listeners and routes, decodes
 * them with the vendored Envoy protos and checks:
 *   - every HTTP filter chain of the gateway's listener runs Istio's CUSTOM provider as an ext_authz
 *     filter, fail closed (failure_mode_allow false, 503 on error), calling portcullis's ClusterIP
 *     Service within the generated deadline;
 *   - every route of every generated host is there, and none turns ext_authz off;
 *   - for each route, portcullis's request-mode route table picks the intended policy (Istio's
 *     provider sends no context extensions).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readdirSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import type protobuf from "protobufjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { buildRouteTable, routeFinder } from "../../src/config/route-table.ts";
import { extAuthzTimeoutMs } from "../../src/deploy/envoy-config.ts";
import { gatewayManifests, gatewayRoutes, istioMeshConfig, placeRules, type GatewayOptions, type GatewayRoute } from "../../src/deploy/gateway-config.ts";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { applyManifests, freePort, resolveBinary, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { makeTempDir } from "../harness/binaries.ts";
import { backendServices, exampleConfig as config, extAuthzService, GATEWAY_PORT, gatewayObjects, type Json, PLACEMENT } from "../support/gateway.ts";
import type { Manifest } from "../support/kustomize.ts";

const OPTIONS: GatewayOptions = { target: "istio", ...PLACEMENT, proxyNamespace: "fundament-gateway" };
/** Istio's name for the gateway's listener on that port. */
const GATEWAY_LISTENER = `0.0.0.0_${GATEWAY_PORT}`;
/** The labels of the gateway's pods (Istio's deployment controller sets them). */
const GATEWAY_LABELS = { "gateway.networking.k8s.io/gateway-name": OPTIONS.gateway.name, "gateway.networking.k8s.io/gateway-class-name": "istio" };

/** What pilot reads beside the generated objects: Namespaces, the GatewayClass, the Gateway, the Services the routes and the provider name. */
function world(): Manifest[] {
  // The API server assigns the ClusterIPs.
  const extAuthz = extAuthzService();
  const services: Manifest[] = [{ ...extAuthz, metadata: { ...extAuthz["metadata"], namespace: OPTIONS.namespace }, spec: extAuthz["spec"] }, ...backendServices(config)];
  // The gateway's Service, as Istio's deployment controller would create it: pilot hands a Gateway's
  // servers to the proxies this Service selects (the proxy's labels, from its ADS metadata).
  services.push({
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: `${OPTIONS.gateway.name}-istio`, namespace: OPTIONS.gateway.namespace },
    spec: { selector: GATEWAY_LABELS, ports: [{ name: "http", port: GATEWAY_PORT, protocol: "TCP" }] },
  });
  return [...gatewayObjects(OPTIONS, { name: "istio", controllerName: "istio.io/gateway-controller" }, ["istio-system"]), ...services];
}

let api: KubeApiserver;
let pilot: ChildProcess | undefined;
let pilotLog = "";
let dir: string;
let listeners: Json[] = [];
let routeConfigs: Json[] = [];

const root = () => envoyRoot();
/** The types that had fields the vendored protos do not know (decoded without them). */
const lossy = new Set<string>();
/** A binary Any's message, decoded with the vendored protos; an Any of a type they lack stays as it is. */
function unpackAny(any: Json): Json {
  const typeName = String(any["type_url"]).replace(/^type\.googleapis\.com\//, "");
  const type = root().lookup(typeName) as protobuf.Type | null;
  if (type === null) return { "@type": typeName };
  const bytes: Uint8Array = any["value"] ?? new Uint8Array();
  const message = type.decode(bytes);
  // protobufjs skips fields it does not know; re-encoded, such a message comes out shorter.
  if (type.encode(message).finish().length !== bytes.length) lossy.add(typeName);
  return { "@type": typeName, ...toJson(type, message) };
}
/** The message as plain JSON with proto field names, Anys inside unpacked. */
function toJson(type: protobuf.Type, message: protobuf.Message): Json {
  const plain = type.toObject(message, { longs: String, enums: String, defaults: false, oneofs: false }) as Json;
  return unpackNested(plain);
}
function unpackNested(value: any): any {
  if (Array.isArray(value)) return value.map(unpackNested);
  if (value === null || typeof value !== "object" || value instanceof Uint8Array || Buffer.isBuffer(value)) return value;
  if ("type_url" in value && Object.keys(value).every((k) => k === "type_url" || k === "value")) return unpackAny(value);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, unpackNested(v)]));
}

const LDS = "type.googleapis.com/envoy.config.listener.v3.Listener";
const RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/** ADS as the gateway's proxy: one request per type, the first response of each; the resources decoded. */
async function fetchXds(address: string): Promise<void> {
  const Request = root().lookupType("envoy.service.discovery.v3.DiscoveryRequest");
  const Response = root().lookupType("envoy.service.discovery.v3.DiscoveryResponse");
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest<Json, protobuf.Message>(
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    (req) => Buffer.from(Request.encode(Request.fromObject(req)).finish()),
    (buf) => Response.decode(buf),
  );
  const str = (s: string) => ({ stringValue: s });
  const pod = `${OPTIONS.gateway.name}-istio-0`;
  const node = {
    id: `router~10.244.0.5~${pod}.${OPTIONS.gateway.namespace}~${OPTIONS.gateway.namespace}.svc.cluster.local`,
    cluster: `${OPTIONS.gateway.name}-istio.${OPTIONS.gateway.namespace}`,
    metadata: {
      fields: {
        ISTIO_VERSION: str("1.29.0"),
        CLUSTER_ID: str("Kubernetes"),
        NAMESPACE: str(OPTIONS.gateway.namespace),
        SERVICE_ACCOUNT: str(`${OPTIONS.gateway.name}-istio`),
        NAME: str(pod),
        INSTANCE_IPS: str("10.244.0.5"),
        WORKLOAD_NAME: str(`${OPTIONS.gateway.name}-istio`),
        LABELS: { structValue: { fields: Object.fromEntries(Object.entries(GATEWAY_LABELS).map(([k, v]) => [k, str(v)])) } },
      },
    },
  };
  let rdsNames: string[] = [];
  // Each type's resources as last pushed, and who waits for which state: pilot may push before it
  // has converted the Gateway (an empty LDS), then again once it has.
  const latest = new Map<string, Json[]>();
  const waiters: { typeUrl: string; accept: (r: Json[]) => boolean; resolve: (r: Json[]) => void }[] = [];
  let failure: Error | undefined;
  call.on("error", (e) => (failure = e));
  call.on("data", (msg: protobuf.Message) => {
    const r = Response.toObject(msg, { longs: String }) as Json;
    const typeUrl = r["type_url"] as string;
    const resources = ((r["resources"] ?? []) as Json[]).map(unpackAny);
    // ACK, as a proxy does.
    call.write({ node, type_url: typeUrl, version_info: r["version_info"], response_nonce: r["nonce"], resource_names: typeUrl === RDS ? rdsNames : [] });
    latest.set(typeUrl, resources);
    for (const w of waiters) if (w.typeUrl === typeUrl && w.accept(resources)) w.resolve(resources);
  });
  const until = (typeUrl: string, accept: (r: Json[]) => boolean) =>
    new Promise<Json[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        const seen = (latest.get(typeUrl) ?? []).map((x) => x["name"]).join(", ");
        reject(failure ?? new Error(`no acceptable ${typeUrl} within 30 s (last: ${seen}); pilot: ${pilotLog.slice(-3000)}`));
      }, 30_000);
      waiters.push({ typeUrl, accept, resolve: (r) => (clearTimeout(timer), resolve(r)) });
    });
  try {
    call.write({ node, type_url: LDS, resource_names: [] });
    listeners = await until(LDS, (ls) => ls.some((l) => l["name"] === GATEWAY_LISTENER));
    rdsNames = [...new Set(listeners.flatMap((l) => httpConnectionManagers(l).map((hcm) => hcm["rds"]?.["route_config_name"])).filter((n): n is string => n !== undefined))];
    call.write({ node, type_url: RDS, resource_names: rdsNames });
    routeConfigs = await until(RDS, (rcs) => rdsNames.every((n) => rcs.some((rc) => rc["name"] === n)));
  } finally {
    call.cancel();
    client.close();
  }
}

function filterChains(listener: Json): Json[] {
  return [...(listener["filter_chains"] ?? []), ...(listener["default_filter_chain"] === undefined ? [] : [listener["default_filter_chain"]])];
}
function httpConnectionManagers(listener: Json): Json[] {
  return filterChains(listener).flatMap((c) => (c["filters"] ?? []).filter((f: Json) => f["name"] === "envoy.filters.network.http_connection_manager").map((f: Json) => f["typed_config"]));
}

async function waitForPilot(httpPort: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (pilot?.exitCode !== null) throw new Error(`pilot-discovery exited: ${pilotLog.slice(-3000)}`);
    try {
      const res = await fetch(`http://127.0.0.1:${httpPort}/ready`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`pilot-discovery not ready in 60 s: ${pilotLog.slice(-3000)}`);
}

beforeAll(async () => {
  api = await startKubeApiserver();
  dir = makeTempDir("istio-pilot");
  const crdFiles = (name: "gatewayApiCrds" | "istioCrds") => {
    const base = resolveBinary(name);
    return readdirSync(base).filter((f) => f.endsWith(".yaml")).sort().map((f) => join(base, f));
  };
  await applyManifests(api, [...crdFiles("gatewayApiCrds"), ...crdFiles("istioCrds")]);
  // The NetworkPolicy is Kubernetes', not Istio's.
  const generated = gatewayManifests(config, OPTIONS).filter((o) => o["kind"] !== "NetworkPolicy");
  writeFileSync(join(dir, "world.yaml"), world().map((o) => stringify(o)).join("---\n"));
  writeFileSync(join(dir, "generated.yaml"), generated.map((o) => stringify(o)).join("---\n"));
  await applyManifests(api, [join(dir, "world.yaml"), join(dir, "generated.yaml")]);
  // The mesh config: gateway-config's extensionProviders, as istiod's Helm values carry them.
  writeFileSync(join(dir, "mesh.yaml"), stringify(istioMeshConfig(config, OPTIONS)["meshConfig"]));
  const [httpPort, grpcPort, monitoringPort, httpsPort, ctrlzPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  pilot = spawn(
    resolveBinary("istioPilot"),
    [
      "discovery",
      "--kubeconfig", api.kubeconfigPath,
      "--meshConfig", join(dir, "mesh.yaml"),
      "--networksConfig", join(dir, "none.yaml"),
      "--httpAddr", `127.0.0.1:${httpPort}`,
      "--grpcAddr", `127.0.0.1:${grpcPort}`,
      "--secureGRPCAddr", "",
      "--httpsAddr", `127.0.0.1:${httpsPort}`,
      "--monitoringAddr", `127.0.0.1:${monitoringPort}`,
      "--ctrlz_port", String(ctrlzPort),
      "--domain", "cluster.local",
    ],
    {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        PATH: process.env["PATH"],
        POD_NAMESPACE: "istio-system",
        POD_NAME: "istiod-0",
        PILOT_ENABLE_GATEWAY_API: "true",
        PILOT_ENABLE_GATEWAY_API_STATUS: "false",
        PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER: "false",
        PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER: "false",
        ENABLE_CA_SERVER: "false",
        VALIDATION_WEBHOOK_CONFIG_NAME: "",
        INJECTION_WEBHOOK_CONFIG_NAME: "",
        PILOT_DEBOUNCE_AFTER: "10ms",
      },
    },
  );
  pilot.stdout!.on("data", (d) => (pilotLog += d));
  pilot.stderr!.on("data", (d) => (pilotLog += d));
  await waitForPilot(httpPort);
  await fetchXds(`127.0.0.1:${grpcPort}`);
}, 240_000);

afterAll(async () => {
  pilot?.kill("SIGKILL");
  await api?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

const gatewayListener = (): Json => {
  const named = listeners.filter((l) => l["name"] === GATEWAY_LISTENER);
  expect(named, listeners.map((l) => l["name"]).join(", ")).toHaveLength(1);
  return named[0]!;
};

describe("Istio's pilot, as the gateway's proxy sees it over ADS", () => {
  it("decodes with the vendored Envoy protos, no field of a known type left out", () => {
    expect(listeners.length).toBeGreaterThan(0);
    expect(routeConfigs.length).toBeGreaterThan(0);
    expect([...lossy]).toEqual([]);
  });

  it("every HTTP filter chain of the gateway's listener runs portcullis's CUSTOM provider, fail closed, on portcullis's Service within the generated deadline", () => {
    const hcms = httpConnectionManagers(gatewayListener());
    expect(hcms.length).toBeGreaterThan(0);
    const grpcPort = Number(config.listen.grpc.slice(config.listen.grpc.lastIndexOf(":") + 1));
    for (const hcm of hcms) {
      const names: string[] = hcm["http_filters"].map((f: Json) => f["name"]);
      const authz = (hcm["http_filters"] as Json[]).filter((f) => f["typed_config"]?.["@type"] === "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
      expect(authz, names.join(", ")).toHaveLength(1);
      const f = authz[0]!;
      expect(f["disabled"] ?? false).toBe(false);
      expect(names.indexOf(f["name"])).toBeLessThan(names.indexOf("envoy.filters.http.router"));
      const c = f["typed_config"];
      expect(c["failure_mode_allow"] ?? false).toBe(false);
      expect(c["status_on_error"]).toEqual({ code: "ServiceUnavailable" });
      const timeout = c["grpc_service"]["timeout"];
      expect(Number(timeout["seconds"] ?? 0) * 1000 + (timeout["nanos"] ?? 0) / 1e6).toBe(extAuthzTimeoutMs(config));
      // Istio's cluster name for a Service port: outbound|port||host.
      expect(c["grpc_service"]["envoy_grpc"]["cluster_name"]).toBe(`outbound|${grpcPort}||portcullis-ext-authz.${OPTIONS.namespace}.svc.cluster.local`);
      // Istio's provider sends no context extensions: request mode (below) picks the policy.
      expect(c["grpc_service"]["initial_metadata"] ?? []).toEqual([]);
    }
  });

  it("applies the stream bounds portcullis sets (issue 54): no header mutation rules to refuse x-envoy-upstream-stream-duration-ms", () => {
    for (const hcm of httpConnectionManagers(gatewayListener())) {
      const authz = (hcm["http_filters"] as Json[]).filter((f) => f["typed_config"]?.["@type"] === "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
      expect(authz).toHaveLength(1);
      // With decoder_header_mutation_rules and no allow_envoy, Envoy would refuse x-envoy-* headers from the check.
      expect(authz[0]!["typed_config"]).not.toHaveProperty("decoder_header_mutation_rules");
    }
  });

  it("serves every route of every generated host with the route it came from; none turns ext_authz off; the route table picks each route's intended policy", () => {
    const placed = placeRules(gatewayRoutes(config).routes);
    const find = routeFinder(buildRouteTable({ envoy: config.envoy!, platform: config.platform }));
    const perRouteAuthz: string[] = [];
    const vhosts = new Map<string, Json>();
    for (const rc of routeConfigs) {
      for (const vh of rc["virtual_hosts"] ?? []) {
        for (const route of vh["routes"] ?? []) {
          for (const [name, value] of Object.entries((route["typed_per_filter_config"] ?? {}) as Json)) {
            if (/ext_authz/.test(name) || /ExtAuthz/.test(String(value["@type"]))) perRouteAuthz.push(`${vh["name"]} ${route["name"]}: ${JSON.stringify(value)}`);
          }
        }
        for (const domain of vh["domains"] as string[]) vhosts.set(domain, vh);
      }
    }
    // Istio's CUSTOM provider is one listener-wide filter: no route may switch it off (or configure it).
    expect(perRouteAuthz).toEqual([]);
    const wrong: string[] = [];
    let checked = 0;
    for (const { route: r, sectionName } of placed) {
      const vh = vhosts.get(r.host);
      expect(vh, `${r.host}: no virtual host`).toBeDefined();
      const path = samplePath(r);
      // Envoy's first match over the routes Istio generated for the host.
      const hit = (vh!["routes"] as Json[]).find((route) => envoyMatches(route["match"], path));
      const where = `${r.host}${path} (${r.envoyRoute})`;
      if (r.backend.kind === "not-found") {
        // Envoy Gateway's 404 filter (an ExtensionRef) means nothing to Istio: it leaves the rule out,
        // and the request finds no route (Envoy's 404, after the listener-wide check).
        if (hit !== undefined) wrong.push(`${where}: routed to ${hit["name"]}, expected no route`);
      } else if (hit?.["name"] !== sectionName || hit["route"] === undefined) {
        wrong.push(`${where}: reached ${hit?.["name"]}, expected ${sectionName}`);
      }
      // Istio's provider sends no context extensions: portcullis's route table decides the policy.
      const choice = find(r.host, path);
      if (choice.route?.policy !== r.policy || choice.route?.service !== r.service) wrong.push(`${where}: the route table picks ${choice.route?.name} (${choice.route?.policy})`);
      checked++;
    }
    expect(wrong).toEqual([]);
    expect(checked).toBe(placed.length);
    console.info(`istio-pilot-xds: ${checked} routes checked across ${new Set(placed.map((p) => p.route.host)).size} hosts`);
  });
});

describe("where Gateway API's prefix match is wider than plain Envoy's", () => {
  // Gateway API's PathPrefix `/plugins/` is Istio's path_separated_prefix `/plugins`: the bare
  // prefix reaches the rule too, where plain Envoy's prefix `/plugins/` (the route table's) does not.
  it("a request on a bare prefix gets the rule's policy from the route table, or none (portcullis's no-policy denial): never another policy", () => {
    const placed = placeRules(gatewayRoutes(config).routes);
    const find = routeFinder(buildRouteTable({ envoy: config.envoy!, platform: config.platform }));
    const vhosts = new Map<string, Json>(routeConfigs.flatMap((rc) => (rc["virtual_hosts"] ?? []).flatMap((vh: Json) => (vh["domains"] as string[]).map((d) => [d, vh] as const))));
    const other: string[] = [];
    let probed = 0;
    for (const { route: r } of placed) {
      if (r.path.type !== "PathPrefix" || !r.path.value.endsWith("/")) continue;
      const bare = r.path.value.slice(0, -1);
      const hit = (vhosts.get(r.host)!["routes"] as Json[]).find((route) => envoyMatches(route["match"], bare));
      if (hit === undefined) continue;
      const choice = find(r.host, bare);
      // The rule Istio reaches for the bare prefix; the table's policy for it must be that rule's, or none.
      const rule = placed.find((p) => p.route.host === r.host && p.sectionName === hit["name"])!;
      if (choice.route !== undefined && (choice.route.policy !== rule.route.policy || choice.route.service !== rule.route.service)) other.push(`${r.host}${bare}: ${choice.route.name} (${choice.route.policy}), Istio reaches ${hit["name"]} (${rule.route.policy})`);
      probed++;
    }
    expect(probed).toBeGreaterThan(0);
    expect(other).toEqual([]);
  });
});

/** Envoy's RouteMatch for the path matchers Istio generates (all case-sensitive here). */
function envoyMatches(match: Json, path: string): boolean {
  expect(match["case_sensitive"]?.value ?? true).toBe(true);
  expect(Object.keys(match).filter((k) => !["case_sensitive", "path", "prefix", "path_separated_prefix", "safe_regex"].includes(k))).toEqual([]);
  if (match["path"] !== undefined) return path === match["path"];
  if (match["prefix"] !== undefined) return path.startsWith(match["prefix"]);
  if (match["path_separated_prefix"] !== undefined) return path === match["path_separated_prefix"] || path.startsWith(`${match["path_separated_prefix"]}/`);
  if (match["safe_regex"] !== undefined) return new RegExp(`^(?:${match["safe_regex"].regex})$`).test(path);
  throw new Error(`unexpected route match ${JSON.stringify(match)}`);
}

/** A request path the route's match takes (beyond a prefix, into its subtree). */
function samplePath(r: GatewayRoute): string {
  switch (r.path.type) {
    case "Exact":
      return r.path.value;
    case "PathPrefix":
      return `${r.path.value.replace(/\/$/, "")}/x`;
    case "RegularExpression":
      // The generated expressions are a literal prefix (dots escaped) then `.*`.
      expect(r.path.value, r.envoyRoute).toMatch(/^[^*]*\.\*$/);
      return `${r.path.value.slice(0, -2).replaceAll("\\.", ".")}x`;
  }
}
