/**
 * The fixture the gateway translators' proofs share (test/deploy/envoy-gateway-xds.test.ts,
 * test/deploy/istio-pilot-xds.test.ts): the example configuration, where its Gateway and portcullis
 * are placed, and the cluster objects a translator reads beside the generated ones — the
 * Namespaces, the GatewayClass, the Gateway, portcullis's Service as the kit ships it and the
 * Services the routes name.
 */
import { resolve } from "node:path";
import { loadConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/schema.ts";
import { gatewayRoutes, type GatewayOptions } from "../../src/deploy/gateway-config.ts";
import { kustomize, type Manifest, ROOT } from "./kustomize.ts";

export type Json = Record<string, any>;

export const exampleConfig = loadConfig(resolve(ROOT, "deploy/examples/portcullis.yaml"));

/** Where both proofs place portcullis and the Gateway; each adds its target and its proxy's namespace. */
export const PLACEMENT = { namespace: "fundament-system", gateway: { namespace: "fundament-gateway", name: "fundament" } } as const;

/** The Gateway's one listener: HTTP, open to routes from every namespace. */
export const GATEWAY_PORT = 8080;

/**
 * The Namespaces (`extraNamespaces` first), the GatewayClass `gatewayClass` names and the Gateway of
 * `options` in that class.
 */
export function gatewayObjects(options: GatewayOptions, gatewayClass: { readonly name: string; readonly controllerName: string }, extraNamespaces: readonly string[] = []): Manifest[] {
  const namespaces = [...extraNamespaces, options.gateway.namespace, options.namespace, "default", "konfidence-system"].map((name) => ({ apiVersion: "v1", kind: "Namespace", metadata: { name } }));
  const gatewayClassObject = { apiVersion: "gateway.networking.k8s.io/v1", kind: "GatewayClass", metadata: { name: gatewayClass.name }, spec: { controllerName: gatewayClass.controllerName } };
  const gateway = {
    apiVersion: "gateway.networking.k8s.io/v1",
    kind: "Gateway",
    metadata: { name: options.gateway.name, namespace: options.gateway.namespace },
    spec: { gatewayClassName: gatewayClass.name, listeners: [{ name: "http", protocol: "HTTP", port: GATEWAY_PORT, allowedRoutes: { namespaces: { from: "All" } } }] },
  };
  return [...namespaces, gatewayClassObject, gateway];
}

/** portcullis's own ext_authz Service, as the kit (deploy/k8s) ships it. */
export function extAuthzService(): Manifest {
  return kustomize("deploy/k8s").find((m) => m["kind"] === "Service" && m["metadata"].name === "portcullis-ext-authz")!;
}

/** A Service for each backend `config`'s routes name, once each, in route order; `clusterIP(i)` for the i-th, when given. */
export function backendServices(config: Config, clusterIP?: (index: number) => string): Manifest[] {
  const services = new Map<string, Manifest>();
  for (const r of gatewayRoutes(config).routes) {
    if (r.backend.kind !== "service" || services.has(`${r.backend.namespace}/${r.backend.name}`)) continue;
    const ip = clusterIP === undefined ? {} : { clusterIP: clusterIP(services.size) };
    services.set(`${r.backend.namespace}/${r.backend.name}`, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: r.backend.name, namespace: r.backend.namespace },
      spec: { ...ip, ports: [{ name: "http", port: r.backend.port, protocol: "TCP" }] },
    });
  }
  return [...services.values()];
}
