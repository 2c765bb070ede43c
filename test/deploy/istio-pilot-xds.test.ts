/**
 * portcullis installed beside Fundament under Istio, proved on Istio's own config generation
 * (pilot-discovery, istio.io/istio at the pseudo-version scripts/deps/install.sh pins, built from the
 * Go module proxy). pilot watches a real kube-apiserver with the Gateway API and Istio CRDs holding
 * Fundament's HTTPRoutes as its chart renders them (test/deploy/fixtures/fundament-httproutes.yaml),
 * the chart's AuthorizationPolicy for `gateway.mode: istio` (values alone), the Gateway and the
 * Services the routes name, with istiod's mesh configuration as shipped
 * (deploy/gateway/istiod-values.yaml). This test connects as the gateway's proxy over ADS
 * (plaintext), asks for its listeners and routes, decodes them with the vendored Envoy protos and
 * checks:
 *   - every HTTP filter chain of the gateway's listener runs portcullis's CUSTOM provider as an
 *     ext_authz filter before the router, fail closed, calling portcullis-ext-authz within the
 *     deadline, sending no context extensions (portcullis's route table chooses the policy);
 *   - Istio turns that filter on per request by the AuthorizationPolicy's rules (a shadow RBAC
 *     filter's metadata): read from pilot's own output, every request to every protected host is
 *     checked, on every route, and no route switches the check off; the kube-api-proxy and
 *     plugin-proxy hosts are not checked at the gateway and go to the data-plane Envoy;
 *   - with one host left out of the AuthorizationPolicy, the same reading names that host's routes.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import type protobuf from "protobufjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { extAuthzTimeoutMs } from "../../src/deploy/envoy-config.ts";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { applyManifests, freePort, rawRequest, resolveBinary, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { makeTempDir } from "../harness/binaries.ts";
import {
  backendServices,
  chartServices,
  dataPlaneHosts,
  dataPlaneServices,
  fundamentRoutes,
  GATEWAY,
  GATEWAY_PORT,
  gatewayConfig as config,
  gatewayObjects,
  istiodValues,
  type Json,
  modeValues,
  protectedHosts,
  RELEASE_NAMESPACE,
  serviceKey,
} from "../support/gateway.ts";
import { helmTemplate } from "../support/helm.ts";
import type { Manifest } from "../support/kustomize.ts";

/** Istio's name for the gateway's listener on that port. */
const GATEWAY_LISTENER = `0.0.0.0_${GATEWAY_PORT}`;
/** The labels of the gateway's pods (Istio's deployment controller sets them). */
const GATEWAY_LABELS = { "gateway.networking.k8s.io/gateway-name": GATEWAY.name, "gateway.networking.k8s.io/gateway-class-name": "istio" };
const PROTECTED = protectedHosts(config);
const DATA_PLANE = dataPlaneHosts(config);

/** portcullis's chart for gateway.mode istio with `values`: its Services and its AuthorizationPolicy. */
function chartObjects(values: Json): { services: Manifest[]; policies: Manifest[]; dataPlane: Set<string> } {
  const objects = helmTemplate(values);
  return {
    services: chartServices(objects),
    policies: objects.filter((o) => o["kind"] === "AuthorizationPolicy"),
    dataPlane: dataPlaneServices(objects),
  };
}

/** What pilot reads beside the chart's policy: Namespaces, the GatewayClass, the Gateway, Fundament's routes and the Services they and the provider name. */
function world(chart: ReturnType<typeof chartObjects>): Manifest[] {
  const routes = fundamentRoutes();
  const services: Manifest[] = [...chart.services, ...backendServices(routes, chart.services)];
  // The gateway's Service, as Istio's deployment controller would create it: pilot hands a Gateway's
  // servers to the proxies this Service selects (the proxy's labels, from its ADS metadata).
  services.push({
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: `${GATEWAY.name}-istio`, namespace: GATEWAY.namespace },
    spec: { selector: GATEWAY_LABELS, ports: [{ name: "http", port: GATEWAY_PORT, protocol: "TCP" }] },
  });
  return [...gatewayObjects({ name: "istio", controllerName: "istio.io/gateway-controller" }, ["istio-system"]), ...services, ...routes];
}

let api: KubeApiserver;
let pilot: ChildProcess | undefined;
let pilotLog = "";
let dir: string;
let grpcAddress: string;
let chart: ReturnType<typeof chartObjects>;
/** What pilot served the gateway's proxy: its listeners and route configurations. */
interface Xds {
  readonly listeners: Json[];
  readonly routeConfigs: Json[];
}
let served: Xds;

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

/**
 * ADS as the gateway's proxy: its listeners once `accept` takes them (pilot may push before it has
 * converted the Gateway, or before it has seen a change), then their route configurations; decoded.
 */
async function fetchXds(address: string, accept: (listeners: Json[]) => boolean): Promise<Xds> {
  const Request = root().lookupType("envoy.service.discovery.v3.DiscoveryRequest");
  const Response = root().lookupType("envoy.service.discovery.v3.DiscoveryResponse");
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest<Json, protobuf.Message>(
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    (req) => Buffer.from(Request.encode(Request.fromObject(req)).finish()),
    (buf) => Response.decode(buf),
  );
  const str = (s: string) => ({ stringValue: s });
  const pod = `${GATEWAY.name}-istio-0`;
  const node = {
    id: `router~10.244.0.5~${pod}.${GATEWAY.namespace}~${GATEWAY.namespace}.svc.cluster.local`,
    cluster: `${GATEWAY.name}-istio.${GATEWAY.namespace}`,
    metadata: {
      fields: {
        ISTIO_VERSION: str("1.29.0"),
        CLUSTER_ID: str("Kubernetes"),
        NAMESPACE: str(GATEWAY.namespace),
        SERVICE_ACCOUNT: str(`${GATEWAY.name}-istio`),
        NAME: str(pod),
        INSTANCE_IPS: str("10.244.0.5"),
        WORKLOAD_NAME: str(`${GATEWAY.name}-istio`),
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
    const listeners = await until(LDS, (ls) => ls.some((l) => l["name"] === GATEWAY_LISTENER) && accept(ls));
    rdsNames = [...new Set(listeners.flatMap((l) => httpConnectionManagers(l).map((hcm) => hcm["rds"]?.["route_config_name"])).filter((n): n is string => n !== undefined))];
    call.write({ node, type_url: RDS, resource_names: rdsNames });
    const routeConfigs = await until(RDS, (rcs) => rdsNames.every((n) => rcs.some((rc) => rc["name"] === n)));
    return { listeners, routeConfigs };
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
  chart = chartObjects(modeValues("istio"));
  writeFileSync(join(dir, "world.yaml"), world(chart).map((o) => stringify(o)).join("---\n"));
  writeFileSync(join(dir, "policy.yaml"), chart.policies.map((o) => stringify(o)).join("---\n"));
  await applyManifests(api, [join(dir, "world.yaml"), join(dir, "policy.yaml")]);
  // The mesh config as istiod's Helm values carry it.
  writeFileSync(join(dir, "mesh.yaml"), stringify(istiodValues()["meshConfig"]));
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
  grpcAddress = `127.0.0.1:${grpcPort}`;
  served = await fetchXds(grpcAddress, () => true);
}, 240_000);

afterAll(async () => {
  pilot?.kill("SIGKILL");
  await api?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

const gatewayListener = (xds: Xds): Json => {
  const named = xds.listeners.filter((l) => l["name"] === GATEWAY_LISTENER);
  expect(named, xds.listeners.map((l) => l["name"]).join(", ")).toHaveLength(1);
  return named[0]!;
};
const isExtAuthz = (f: Json) => f["typed_config"]?.["@type"] === "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz";

/**
 * Whether the gateway's proxy calls portcullis for a request to `authority`: Istio runs its CUSTOM
 * provider's ext_authz only where the filter's filter_enabled_metadata matches, which a shadow RBAC
 * filter before it sets when one of its shadow policies (the AuthorizationPolicy's rules) matches
 * the request. Read from pilot's output: the RBAC filter, its shadow policies, the metadata key.
 */
function checkedAt(hcm: Json, authority: string, path: string): boolean {
  const filters = hcm["http_filters"] as Json[];
  const authz = filters.find(isExtAuthz)!;
  const enabled = authz["typed_config"]["filter_enabled_metadata"] as Json | undefined;
  // No filter_enabled_metadata: every request is checked.
  if (enabled === undefined) return true;
  expect(enabled["filter"]).toBe("envoy.filters.http.rbac");
  const key = (enabled["path"] as Json[]).map((p) => p["key"]).join(".");
  const rbac = filters.slice(0, filters.indexOf(authz)).filter((f) => f["typed_config"]?.["@type"] === "envoy.extensions.filters.http.rbac.v3.RBAC" && f["typed_config"]["shadow_rules_stat_prefix"] !== undefined);
  expect(rbac.length, "the shadow RBAC filter before ext_authz").toBe(1);
  const shadow = rbac[0]!["typed_config"]["shadow_rules"] as Json;
  const prefix = rbac[0]!["typed_config"]["shadow_rules_stat_prefix"] as string;
  // The RBAC filter records the name of the shadow policy that matched under `{stat prefix}shadow_effective_policy_id`;
  // ext_authz runs when that name matches its filter_enabled_metadata (Istio: the provider's policies).
  expect(key).toBe(`${prefix}shadow_effective_policy_id`);
  // Shadow rules only record which policy matched (Istio makes them DENY); they never answer the request.
  expect(["ALLOW", "DENY"]).toContain(shadow["action"] ?? "ALLOW");
  return Object.entries(shadow["policies"] ?? {}).some(
    ([name, policy]) => stringMatches(enabled["value"]["string_match"], name) && (policy as Json)["permissions"].some((p: Json) => permits(p, authority, path)) && (policy as Json)["principals"].some(anyone),
  );
}

/** An RBAC Principal that every caller matches (the AuthorizationPolicy's rules name no `from`). */
function anyone(p: Json): boolean {
  if (p["any"] === true) return true;
  if (p["and_ids"] !== undefined) return p["and_ids"]["ids"].every(anyone);
  if (p["or_ids"] !== undefined) return p["or_ids"]["ids"].some(anyone);
  throw new Error(`an RBAC principal this reading does not know: ${JSON.stringify(p)}`);
}

/** Envoy's RBAC Permission for the matchers Istio generates from an operation's hosts and paths. */
function permits(p: Json, authority: string, path: string): boolean {
  if (p["any"] === true) return true;
  if (p["and_rules"] !== undefined) return p["and_rules"]["rules"].every((r: Json) => permits(r, authority, path));
  if (p["or_rules"] !== undefined) return p["or_rules"]["rules"].some((r: Json) => permits(r, authority, path));
  if (p["not_rule"] !== undefined) return !permits(p["not_rule"], authority, path);
  if (p["header"] !== undefined) {
    const h = p["header"];
    const value = h["name"] === ":authority" ? authority : h["name"] === ":path" ? path : undefined;
    expect(value, `header ${h["name"]}`).toBeDefined();
    return stringMatches(h["string_match"], value!);
  }
  if (p["url_path"] !== undefined) return stringMatches(p["url_path"]["path"], path.split("?")[0]!);
  throw new Error(`an RBAC permission this reading does not know: ${JSON.stringify(p)}`);
}
function stringMatches(m: Json, value: string): boolean {
  const v = m["ignore_case"] === true ? value.toLowerCase() : value;
  const lower = (x: string) => (m["ignore_case"] === true ? x.toLowerCase() : x);
  if (m["exact"] !== undefined) return v === lower(m["exact"]);
  if (m["prefix"] !== undefined) return v.startsWith(lower(m["prefix"]));
  if (m["suffix"] !== undefined) return v.endsWith(lower(m["suffix"]));
  if (m["contains"] !== undefined) return v.includes(lower(m["contains"]));
  if (m["safe_regex"] !== undefined) return new RegExp(`^(?:${m["safe_regex"]["regex"]})$`).test(value);
  throw new Error(`a string matcher this reading does not know: ${JSON.stringify(m)}`);
}

/** Istio's cluster name for a Service port, `outbound|port||name.namespace.svc.cluster.local`, as a Service key. */
function serviceOfCluster(cluster: string): string | undefined {
  const m = /^outbound\|\d+\|\|([^.]+)\.([^.]+)\.svc\.cluster\.local$/.exec(cluster);
  return m === null ? undefined : serviceKey(m[2]!, m[1]!);
}

/**
 * What is wrong with what pilot served: each route of a protected host a request reaches unchecked
 * (the check not enabled for its host, with or without a port, or switched off on the route); each
 * route of a data-plane host checked at the gateway or not leading to the data-plane Envoy.
 */
function uncovered(xds: Xds, dataPlane: Set<string>): string[] {
  const problems: string[] = [];
  const hcms = httpConnectionManagers(gatewayListener(xds));
  expect(hcms.length).toBeGreaterThan(0);
  const seen = new Set<string>();
  for (const rc of xds.routeConfigs) {
    for (const vh of rc["virtual_hosts"] ?? []) {
      const host = (vh["domains"] as string[]).find((d) => [...PROTECTED, ...DATA_PLANE].includes(d));
      if (host === undefined) continue;
      seen.add(host);
      for (const route of vh["routes"] ?? []) {
        const where = `${host} ${route["name"]}`;
        const off = Object.entries((route["typed_per_filter_config"] ?? {}) as Json).filter(([name, value]) => /ext_authz|rbac/.test(name) || /ExtAuthz|RBAC/.test(String(value["@type"])));
        if (off.length > 0) problems.push(`${where}: the route configures the check itself: ${JSON.stringify(off)}`);
        // A request this route takes: its prefix or exact path, a step into it.
        const path = `${route["match"]["path"] ?? route["match"]["prefix"] ?? route["match"]["path_separated_prefix"] ?? "/"}`.replace(/\/?$/, "/x");
        for (const hcm of hcms) {
          for (const authority of [host, `${host}:${GATEWAY_PORT}`, `${host}:443`]) {
            const checked = checkedAt(hcm, authority, path);
            if (PROTECTED.includes(host) && !checked) problems.push(`${where}: ${authority}${path} reaches ${route["route"]?.["cluster"]} without the check`);
            if (DATA_PLANE.includes(host) && checked) problems.push(`${where}: ${authority}${path} checked at the gateway, and again by the data-plane Envoy`);
          }
        }
        if (DATA_PLANE.includes(host)) {
          const service = serviceOfCluster(route["route"]?.["cluster"] ?? "");
          if (service === undefined || !dataPlane.has(service)) problems.push(`${where}: goes to ${route["route"]?.["cluster"]}, not the data-plane Envoy`);
        }
      }
    }
  }
  for (const host of [...PROTECTED, ...DATA_PLANE]) if (!seen.has(host)) problems.push(`${host} has no route at the Gateway`);
  return problems;
}

describe("Istio's pilot, Fundament's routes and portcullis's chart together, as the gateway's proxy sees them over ADS", () => {
  it("decodes with the vendored Envoy protos, no field of a known type left out", () => {
    expect(served.listeners.length).toBeGreaterThan(0);
    expect(served.routeConfigs.length).toBeGreaterThan(0);
    expect([...lossy]).toEqual([]);
  });

  it("every HTTP filter chain of the gateway's listener runs portcullis's CUSTOM provider before the router, fail closed, on portcullis-ext-authz within Envoy's deadline, with no context extensions", () => {
    const hcms = httpConnectionManagers(gatewayListener(served));
    expect(hcms.length).toBeGreaterThan(0);
    const grpcPort = Number(config.listen.grpc.slice(config.listen.grpc.lastIndexOf(":") + 1));
    for (const hcm of hcms) {
      const names: string[] = hcm["http_filters"].map((f: Json) => f["name"]);
      const authz = (hcm["http_filters"] as Json[]).filter(isExtAuthz);
      expect(authz, names.join(", ")).toHaveLength(1);
      const f = authz[0]!;
      expect(f["disabled"] ?? false).toBe(false);
      expect(names.indexOf(f["name"])).toBeLessThan(names.indexOf("envoy.filters.http.router"));
      const c = f["typed_config"];
      expect(c["failure_mode_allow"] ?? false).toBe(false);
      expect(c["status_on_error"]).toEqual({ code: "ServiceUnavailable" });
      const timeout = c["grpc_service"]["timeout"];
      expect(Number(timeout["seconds"] ?? 0) * 1000 + (timeout["nanos"] ?? 0) / 1e6).toBe(extAuthzTimeoutMs(config));
      expect(c["grpc_service"]["envoy_grpc"]["cluster_name"]).toBe(`outbound|${grpcPort}||portcullis-ext-authz.${RELEASE_NAMESPACE}.svc.cluster.local`);
      // Istio's provider sends no context extensions: portcullis's route table picks the policy.
      expect(c["grpc_service"]["initial_metadata"] ?? []).toEqual([]);
    }
  });

  it("applies the stream bounds portcullis sets (issue 54): no header mutation rules to refuse x-envoy-upstream-stream-duration-ms", () => {
    for (const hcm of httpConnectionManagers(gatewayListener(served))) {
      const authz = (hcm["http_filters"] as Json[]).filter((f) => f["typed_config"]?.["@type"] === "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
      expect(authz).toHaveLength(1);
      // With decoder_header_mutation_rules and no allow_envoy, Envoy would refuse x-envoy-* headers from the check.
      expect(authz[0]!["typed_config"]).not.toHaveProperty("decoder_header_mutation_rules");
    }
  });

  it("every route of every protected host passes ext_authz, with or without a port in Host", () => {
    expect(uncovered(served, chart.dataPlane).filter((p) => PROTECTED.includes(p.split(" ")[0]!))).toEqual([]);
  });

  it("every route of the kube-api-proxy and plugin-proxy hosts goes to the data-plane Envoy's Service, unchecked at the gateway (that Envoy checks it)", () => {
    expect(uncovered(served, chart.dataPlane).filter((p) => DATA_PLANE.includes(p.split(" ")[0]!))).toEqual([]);
  });

  it("a request to a host the AuthorizationPolicy does not list is not checked (the reading is not a rubber stamp)", () => {
    const hcm = httpConnectionManagers(gatewayListener(served))[0]!;
    expect(checkedAt(hcm, "console.fundament.io", "/")).toBe(false);
    expect(checkedAt(hcm, "authn.fundament.io", "/")).toBe(true);
  });
});

describe("a protected host left out of the AuthorizationPolicy", () => {
  it("is named, route by route, once pilot serves the narrower policy", async () => {
    const narrower = modeValues("istio");
    narrower["gateway"].coveredHostnames = PROTECTED.filter((h) => h !== "dcim.fundament.io");
    const policies = chartObjects(narrower).policies;
    writeFileSync(join(dir, "narrower.yaml"), policies.map((o) => stringify(o)).join("---\n"));
    const name = policies[0]!["metadata"].name as string;
    const deleted = await rawRequest(api, "DELETE", `/apis/security.istio.io/v1/namespaces/${GATEWAY.namespace}/authorizationpolicies/${name}`, undefined);
    expect(deleted.status).toBe(200);
    await applyManifests(api, [join(dir, "narrower.yaml")]);
    // Pilot may push the state between the delete and the create (no policy, no ext_authz): wait for the narrower one.
    const narrowerServed = (ls: Json[]) => {
      const hcm = httpConnectionManagers(ls.find((l) => l["name"] === GATEWAY_LISTENER)!)[0];
      return hcm !== undefined && (hcm["http_filters"] as Json[]).some(isExtAuthz) && checkedAt(hcm, "authn.fundament.io", "/x") && !checkedAt(hcm, "dcim.fundament.io", "/x");
    };
    const xds = await fetchXds(grpcAddress, narrowerServed);
    const problems = uncovered(xds, chart.dataPlane).filter((p) => PROTECTED.includes(p.split(" ")[0]!));
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.every((p) => p.startsWith("dcim.fundament.io ") && p.includes("without the check"))).toBe(true);
  }, 60_000);
});
