/**
 * What the gateway proofs share (test/deploy/envoy-gateway-xds.test.ts,
 * test/deploy/istio-pilot-xds.test.ts, test/e2e/gateway-manifests.test.ts): portcullis installed
 * beside Fundament. Fundament's own HTTPRoutes (and its proxies' Services) come from committed fixtures
 * rendered from its chart (test/deploy/fixtures/, scripts/render-fundament-routes.sh); portcullis's
 * objects from its chart, values alone (modeValues); around them the Namespaces, the GatewayClass,
 * the Gateway both attach to, and a Service for each backend the routes name.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parse, parseAllDocuments, stringify } from "yaml";
import { parseConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/schema.ts";
import { type Manifest, ROOT } from "./kustomize.ts";

export type Json = Record<string, any>;

/** Where both charts are installed (Fundament's release `fundament`, portcullis's `portcullis`). */
export const RELEASE_NAMESPACE = "fundament-system";
/** The Gateway both charts' objects attach to. */
export const GATEWAY = { namespace: "fundament-gateway", name: "fundament" } as const;
/** The Gateway's one listener: HTTP, open to routes from every namespace. */
export const GATEWAY_PORT = 8080;

const FIXTURE = resolve(ROOT, "test/deploy/fixtures/fundament-httproutes.yaml");

/** Fundament's HTTPRoutes as its chart renders them (no namespace: Helm leaves it to the install), placed in `namespace`. */
export function fundamentRoutes(namespace: string = RELEASE_NAMESPACE): Manifest[] {
  return parseAllDocuments(readFileSync(FIXTURE, "utf8"))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null)
    .map((m) => ({ ...m, metadata: { ...m["metadata"], namespace } }));
}

/**
 * The Services of Fundament's own kube-api-proxy and plugin-proxy templates, as its chart renders them
 * with both components enabled and with its defaults (test/deploy/fixtures/fundament-proxy-services.yaml,
 * scripts/render-fundament-routes.sh).
 */
export function fundamentProxyServices(): { enabled: Manifest[]; defaults: Manifest[] } {
  const fixture = parse(readFileSync(resolve(ROOT, "test/deploy/fixtures/fundament-proxy-services.yaml"), "utf8")) as { enabled: Manifest[]; defaults: Manifest[] };
  return { enabled: fixture.enabled, defaults: fixture.defaults };
}

/**
 * The configuration the proofs install: the example's, choosing the policy from the request (the
 * gateways name none per route), with dcim-api on a host of its own (Fundament's chart gives each
 * service its own HTTPRoute, a catch-all: two on one host would shadow each other), without
 * Konfidence, whose own chart (not Fundament's) routes its host, and without TLS on the data-plane
 * Envoy's listener (the gateway ends TLS; Fundament's routes send it plain HTTP).
 */
export const gatewayConfigValues: Json = (() => {
  const raw = parse(readFileSync(resolve(ROOT, "deploy/examples/portcullis.yaml"), "utf8")) as Json;
  const platform = (raw["envoy"].platform as Json[]).map((p) => (p["name"] === "dcim-api" ? { ...p, origin: "https://dcim.fundament.io" } : p));
  const { konfidence: _origin, ...origins } = raw["envoy"].origins as Json;
  const { konfidence: _upstream, ...upstreams } = raw["envoy"].upstreams as Json;
  const { tls: _tls, ...listener } = raw["envoy"].listener as Json;
  return { ...raw, check: { ...raw["check"], policyFrom: "request" }, envoy: { ...raw["envoy"], listener, origins, upstreams, platform } };
})();
export const gatewayConfig: Config = parseConfig(stringify(gatewayConfigValues));

const hostOf = (origin: string) => new URL(origin).hostname;

/** The hosts portcullis checks at the gateway: the platform services' and Konfidence's origins. */
export function protectedHosts(config: Config): string[] {
  const envoy = config.envoy!;
  const hosts = [...envoy.platform.map((p) => hostOf(p.origin)), ...(envoy.origins.konfidence === undefined ? [] : [hostOf(envoy.origins.konfidence)])];
  return [...new Set(hosts)].sort();
}

/** The hosts the data-plane Envoy checks and routes itself: kube-api-proxy's and plugin-proxy's. */
export function dataPlaneHosts(config: Config): string[] {
  return [hostOf(config.envoy!.origins.kubeApiProxy), hostOf(config.envoy!.origins.pluginProxy)].sort();
}

/** portcullis's chart values for a gateway mode: the values a platform team writes, nothing generated. */
export function modeValues(mode: "envoy" | "istio" | "envoyGateway"): Json {
  if (mode === "envoy") return {};
  return {
    config: gatewayConfigValues,
    gateway: { mode, name: GATEWAY.name, namespace: GATEWAY.namespace, ...(mode === "envoyGateway" ? { proxyNamespace: "envoy-gateway-system" } : {}) },
  };
}

/** The Namespaces (`extraNamespaces` first), the GatewayClass and the Gateway in it. */
export function gatewayObjects(gatewayClass: { readonly name: string; readonly controllerName: string }, extraNamespaces: readonly string[] = []): Manifest[] {
  const namespaces = [...extraNamespaces, GATEWAY.namespace, RELEASE_NAMESPACE].map((name) => ({ apiVersion: "v1", kind: "Namespace", metadata: { name } }));
  const gatewayClassObject = { apiVersion: "gateway.networking.k8s.io/v1", kind: "GatewayClass", metadata: { name: gatewayClass.name }, spec: { controllerName: gatewayClass.controllerName } };
  const gateway = {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "Gateway",
    metadata: { name: GATEWAY.name, namespace: GATEWAY.namespace },
    spec: { gatewayClassName: gatewayClass.name, listeners: [{ name: "http", protocol: "HTTP", port: GATEWAY_PORT, allowedRoutes: { namespaces: { from: "All" } } }] },
  };
  return [...namespaces, gatewayClassObject, gateway];
}

/** `namespace/name` of a Service. */
export const serviceKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** The Services `objects` (portcullis's chart) renders, placed in the release's namespace when they name none. */
export function chartServices(objects: readonly Manifest[]): Manifest[] {
  return objects.filter((o) => o["kind"] === "Service").map((o) => ({ ...o, metadata: { ...o["metadata"], namespace: o["metadata"].namespace ?? RELEASE_NAMESPACE } }));
}

/**
 * A stand-in Service for each backend the HTTPRoutes name that `have` (the charts' own Services)
 * lacks: Fundament's services, which its chart (not rendered here) creates. `clusterIP(i)` for the
 * i-th, when given.
 */
export function backendServices(routes: readonly Manifest[], have: readonly Manifest[], clusterIP?: (index: number) => string): Manifest[] {
  const known = new Set(have.map((s) => serviceKey(s["metadata"].namespace, s["metadata"].name)));
  const services = new Map<string, Manifest>();
  for (const route of routes) {
    for (const rule of route["spec"].rules as Json[]) {
      for (const ref of (rule["backendRefs"] ?? []) as Json[]) {
        const namespace = ref["namespace"] ?? route["metadata"].namespace;
        const key = serviceKey(namespace, ref["name"]);
        if (known.has(key) || services.has(key)) continue;
        const ip = clusterIP === undefined ? {} : { clusterIP: clusterIP(services.size) };
        services.set(key, {
          apiVersion: "v1",
          kind: "Service",
          metadata: { name: ref["name"], namespace },
          spec: { ...ip, selector: { "app.kubernetes.io/name": ref["name"] }, ports: [{ name: "http", port: ref["port"], protocol: "TCP" }] },
        });
      }
    }
  }
  return [...services.values()];
}

/** The data-plane Envoy's Services in portcullis's render: where the kube-api-proxy and plugin-proxy routes must lead. */
export function dataPlaneServices(objects: readonly Manifest[]): Set<string> {
  return new Set(chartServices(objects).filter((s) => s["metadata"].labels?.["app.kubernetes.io/component"] === "data-plane").map((s) => serviceKey(s["metadata"].namespace, s["metadata"].name)));
}

/** istiod's Helm values as shipped (deploy/gateway/istiod-values.yaml): its meshConfig carries portcullis's extension provider. */
export function istiodValues(): Json {
  return parse(readFileSync(resolve(ROOT, "deploy/gateway/istiod-values.yaml"), "utf8")) as Json;
}
