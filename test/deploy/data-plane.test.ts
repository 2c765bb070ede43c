/**
 * The data-plane Envoy (issue 51) as the Helm chart renders it in each gateway mode and as the kit
 * (deploy/k8s) renders it: its init container, run with the rendered arguments on the rendered
 * ConfigMap (test/support/data-plane.ts), writes a bootstrap that decodes strictly into Envoy's
 * protos and is byte for byte `envoy-config`'s output for the file portcullis itself runs with;
 * every file it names is mounted in the Envoy container; the Envoy reaches portcullis's ext_authz and
 * CDS port through the chart's Service and NetworkPolicy; Fundament's own kube-api-proxy and
 * plugin-proxy HTTPRoutes, as Fundament's chart renders them at the pinned commit (the committed
 * fixtures of scripts/render-fundament-routes.sh), reach it unchanged.
 * Every dataPlane value renders, and the values that cannot work are refused. (The API server's
 * verdict on the rendered objects, and CDS over the wire: test/e2e/data-plane.test.ts.)
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { loadConfig } from "../../src/config/load.ts";
import { renderEnvoyYaml } from "../../src/deploy/envoy-config.ts";
import { decodeBootstrap } from "../../src/envoy/bootstrap.ts";
import { find, runInitContainer } from "../support/data-plane.ts";
import { fundamentProxyServices, fundamentRoutes } from "../support/gateway.ts";
import { CHART, helmTemplate, RELEASE_NAMESPACE } from "../support/helm.ts";
import { kustomize, type Manifest, ROOT } from "../support/kustomize.ts";

const scratch = mkdtempSync(join(tmpdir(), "portcullis-data-plane-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const shippedConfig = () => (parse(readFileSync(resolve(CHART, "values.yaml"), "utf8")) as Manifest)["config"];
const example = () => parse(readFileSync(resolve(ROOT, "deploy/examples/portcullis.yaml"), "utf8")) as Manifest;

/** The Gateway the chart's gateway modes name. */
const GATEWAY = { namespace: "fundament-gateway", name: "fundament" } as const;

/** The chart's values per gateway mode, with the shipped configuration (behind a gateway: the policy chosen from the request). */
function modeOf(mode: "envoy" | "istio" | "envoyGateway", extra: Manifest = {}): Manifest {
  if (mode === "envoy") return extra;
  const config = shippedConfig();
  return {
    config: { ...config, check: { ...config["check"], policyFrom: "request" } },
    gateway: { mode, name: GATEWAY.name, namespace: GATEWAY.namespace, ...(mode === "envoyGateway" ? { proxyNamespace: "envoy-gateway-system" } : {}) },
    ...extra,
  };
}

/** The example's TLS listener and second cluster's CA, mounted as dataPlane.volumes say. */
const exampleWithFiles: Manifest = {
  config: example(),
  dataPlane: {
    service: { type: "LoadBalancer" },
    volumes: [
      { name: "listener-tls", secret: { secretName: "fundament-envoy-tls" } },
      { name: "cluster-cas", configMap: { name: "fundament-envoy-cluster-cas", items: [{ key: "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c", path: "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c/ca.crt" }] } },
    ],
    volumeMounts: [
      { name: "listener-tls", mountPath: "/etc/envoy/tls", readOnly: true },
      { name: "cluster-cas", mountPath: "/etc/envoy/clusters", readOnly: true },
    ],
  },
};

const sources: Array<[string, () => Manifest[]]> = [
  ["the chart, gateway.mode envoy (shipped values)", () => helmTemplate({})],
  ["the chart, gateway.mode istio", () => helmTemplate(modeOf("istio"))],
  ["the chart, gateway.mode envoyGateway", () => helmTemplate(modeOf("envoyGateway"))],
  ["the chart, the example configuration (TLS listener, two static clusters)", () => helmTemplate(exampleWithFiles)],
  ["the kit (deploy/k8s)", () => kustomize("deploy/k8s")],
];

/** Every `filename` an Envoy bootstrap names. */
function namedFiles(bootstrap: unknown): string[] {
  const named: string[] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node !== null && typeof node === "object") {
      for (const [key, value] of Object.entries(node)) {
        if (key === "filename" && typeof value === "string") named.push(value);
        else walk(value);
      }
    }
  };
  walk(bootstrap);
  return [...new Set(named)];
}

/**
 * The files a container's mounts put there: a Secret's or ConfigMap's items, a projected volume's
 * sources' items; a Secret without items its kubernetes.io/tls keys (what `kubectl create secret tls` makes).
 */
function mountedFiles(pod: Manifest, container: Manifest): Set<string> {
  const files = new Set<string>();
  for (const mount of container["volumeMounts"] as Manifest[]) {
    const volume = (pod["volumes"] as Manifest[]).find((v) => v["name"] === mount["name"]);
    const sources: Manifest[] = volume?.["projected"]?.sources ?? [volume ?? {}];
    for (const source of sources) {
      const from = source["configMap"] ?? source["secret"];
      if (from === undefined) continue;
      const paths: string[] = from.items?.map((i: Manifest) => i["path"]) ?? (source["secret"] ? ["tls.crt", "tls.key"] : []);
      for (const path of paths) files.add(`${mount["mountPath"]}/${path}`);
    }
  }
  return files;
}

const podOf = (objects: Manifest[]) => find(objects, "Deployment", "fundament-envoy")["spec"].template;
const envoyContainer = (objects: Manifest[]) => (podOf(objects).spec.containers as Manifest[]).find((c) => c["name"] === "envoy")!;
const selects = (service: Manifest, labels: Record<string, string>) => Object.entries(service["spec"].selector as Record<string, string>).every(([k, v]) => labels[k] === v);

describe.each(sources)("%s", (name, render) => {
  const objects = render();
  // The init container runs once per rendering; each case reads what it wrote.
  let ran: ReturnType<typeof runInitContainer> | undefined;
  const initContainer = () => (ran ??= runInitContainer(objects, join(scratch, name.replace(/\W+/g, "-"))));

  it("the init container writes, where Envoy reads it, exactly `envoy-config`'s output for the file portcullis runs with, and it decodes strictly", async () => {
    const run = await initContainer();
    expect(run.result).toMatchObject({ code: 0, stdout: "", stderr: "" });
    // One file: portcullis's container reads the same key of the same ConfigMap at the same path.
    expect(run.envoyConfigMap).toEqual(run.portcullisConfig);
    expect(run.bootstrap).toBe(renderEnvoyYaml(loadConfig(run.configFile)));
    const decoded = decodeBootstrap(run.bootstrap);
    if (!decoded.ok) expect.fail(decoded.errors.join("\n"));
  });

  it("mounts every file the bootstrap names in the Envoy container (Envoy does not start without one)", async () => {
    const run = await initContainer();
    const named = namedFiles(parse(run.bootstrap));
    expect(named).toContain("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
    const mounted = mountedFiles(podOf(objects).spec, envoyContainer(objects));
    expect(named.filter((file) => !mounted.has(file))).toEqual([]);
  });

  it("exposes the listener the bootstrap binds, to its own Service and to the two Fundament routes to (kube-api-proxy:8081, plugin-proxy:8080)", async () => {
    const bootstrap = parse((await initContainer()).bootstrap) as Manifest;
    const listenerPort = bootstrap["static_resources"].listeners[0].address.socket_address.port_value;
    const pod = podOf(objects);
    expect(pod.metadata.labels).toMatchObject({ "app.kubernetes.io/name": "fundament-envoy", "app.kubernetes.io/component": "data-plane" });
    expect(envoyContainer(objects)["ports"]).toEqual([{ name: "public", containerPort: listenerPort, protocol: "TCP" }]);
    for (const [service, port] of [["fundament-envoy", undefined], ["kube-api-proxy", 8081], ["plugin-proxy", 8080]] as const) {
      const s = find(objects, "Service", service);
      expect(selects(s, pod.metadata.labels), service).toBe(true);
      expect(s["metadata"].labels).toMatchObject({ "app.kubernetes.io/component": "data-plane" });
      expect(s["spec"].ports).toHaveLength(1);
      expect(s["spec"].ports[0]).toMatchObject({ targetPort: "public", protocol: "TCP", appProtocol: "http", ...(port === undefined ? {} : { port }) });
    }
  });

  it("reaches portcullis's ext_authz and CDS port: the headless portcullis-grpc Service of its namespace, admitted by a NetworkPolicy", async () => {
    const bootstrap = parse((await initContainer()).bootstrap) as Manifest;
    const cdsCluster = bootstrap["dynamic_resources"].cds_config.api_config_source.grpc_services[0].envoy_grpc.cluster_name;
    const authzCluster = bootstrap["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config.http_filters.find(
      (f: Manifest) => f["name"] === "envoy.filters.http.ext_authz",
    ).typed_config.grpc_service.envoy_grpc.cluster_name;
    expect(cdsCluster).toBe(authzCluster);
    const cluster = bootstrap["static_resources"].clusters.find((c: Manifest) => c["name"] === cdsCluster);
    const address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;

    const service = find(objects, "Service", "portcullis-grpc");
    const namespace = service["metadata"].namespace ?? RELEASE_NAMESPACE;
    expect(address.address).toBe(`portcullis-grpc.${namespace}.svc.cluster.local`);
    expect(service["spec"].clusterIP).toBe("None");
    const portcullisPod = find(objects, "Deployment", "portcullis")["spec"].template;
    expect(selects(service, portcullisPod.metadata.labels)).toBe(true);
    const servicePort = (service["spec"].ports as Manifest[]).find((p) => p["port"] === address.port_value);
    expect(servicePort, `portcullis-grpc has no port ${address.port_value}`).toBeDefined();
    // Headless: Envoy connects to the pod's port itself, so the container listens on the very port.
    const containerPort = (portcullisPod.spec.containers[0].ports as Manifest[]).find((p) => p["name"] === servicePort!["targetPort"]);
    expect(containerPort?.["containerPort"]).toBe(address.port_value);

    const policy = find(objects, "NetworkPolicy", "portcullis-from-data-plane");
    expect(selects({ spec: { selector: policy["spec"].podSelector.matchLabels } }, portcullisPod.metadata.labels)).toBe(true);
    const rule = policy["spec"].ingress[0];
    expect(rule.ports[0]).toEqual({ port: servicePort!["targetPort"], protocol: "TCP" });
    expect(rule.from).toEqual([
      { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } }, podSelector: { matchLabels: { "app.kubernetes.io/name": "fundament-envoy", "app.kubernetes.io/component": "data-plane" } } },
    ]);
    expect(podOf(objects).metadata.labels).toMatchObject(rule.from[0].podSelector.matchLabels);
  });

  it("runs non-root, read-only, without capabilities or a ServiceAccount token", () => {
    const pod = podOf(objects).spec;
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    for (const c of [...pod.containers, ...pod.initContainers] as Manifest[]) {
      expect(c["securityContext"], c["name"]).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsNonRoot: true, capabilities: { drop: ["ALL"] } });
    }
  });

  it("rolls with the configuration: the pods of both Deployments carry the ConfigMap's checksum or name", () => {
    const envoyPod = podOf(objects);
    const portcullisPod = find(objects, "Deployment", "portcullis")["spec"].template;
    const configVolume = (pod: Manifest) => (pod.spec.volumes as Manifest[]).find((v) => v["name"] === "config")!["configMap"].name;
    expect(configVolume(envoyPod)).toBe(configVolume(portcullisPod));
    expect(envoyPod.metadata.annotations?.["checksum/config"]).toBe(portcullisPod.metadata.annotations?.["checksum/config"]);
  });
});

describe("who may reach the data-plane Envoy's listener", () => {
  const policyOf = (objects: Manifest[]) => find(objects, "NetworkPolicy", "fundament-envoy")["spec"];

  const hbone = { port: 15008, protocol: "TCP" };
  it.each([
    ["istio", { "gateway.networking.k8s.io/gateway-name": "fundament" }, GATEWAY.namespace, [hbone]],
    ["envoyGateway", { "gateway.envoyproxy.io/owning-gateway-name": "fundament", "gateway.envoyproxy.io/owning-gateway-namespace": GATEWAY.namespace }, "envoy-gateway-system", []],
  ] as const)("%s: the Gateway's proxy pods only, on the listener only (Istio: and HBONE, for an ambient mesh)", (mode, labels, namespace, tunnel) => {
    const objects = helmTemplate(modeOf(mode));
    const spec = policyOf(objects);
    expect(spec.podSelector.matchLabels).toEqual({ "app.kubernetes.io/name": "fundament-envoy" });
    expect(spec.ingress).toEqual([
      { from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } }, podSelector: { matchLabels: labels } }], ports: [{ port: "public", protocol: "TCP" }, ...tunnel] },
    ]);
    // The data plane's own calls to portcullis arrive the same way.
    expect(find(objects, "NetworkPolicy", "portcullis-from-data-plane")["spec"].ingress[0].ports).toEqual([{ port: "grpc", protocol: "TCP" }, ...tunnel]);
  });

  it("envoy (the front proxy): anyone, on the listener only", () => {
    expect(policyOf(helmTemplate({})).ingress).toEqual([{ ports: [{ port: "public", protocol: "TCP" }] }]);
  });
});

describe("Fundament's own routes reach it unchanged (charts/fundament at the pinned commit)", () => {
  const routes = fundamentRoutes(RELEASE_NAMESPACE).filter((o) => ["fundament-kube-api-proxy", "fundament-plugin-proxy"].includes(o["metadata"].name));
  const proxyServices = fundamentProxyServices();

  it.each(["envoy", "istio", "envoyGateway"] as const)("gateway.mode %s: each backendRef of fundament-kube-api-proxy and fundament-plugin-proxy is a port of a Service selecting the data-plane pods", (mode) => {
    const portcullis = helmTemplate(modeOf(mode));
    const pod = podOf(portcullis);
    expect(routes.map((r) => r["metadata"].name).sort()).toEqual(["fundament-kube-api-proxy", "fundament-plugin-proxy"]);
    for (const route of routes) {
      for (const ref of route["spec"].rules.flatMap((r: Manifest) => r["backendRefs"]) as Manifest[]) {
        // No namespace: the route's, which is the release's (both charts in Fundament's namespace).
        expect(ref["namespace"] ?? route["metadata"].namespace).toBe(RELEASE_NAMESPACE);
        const service = find(portcullis, "Service", ref["name"]);
        expect(selects(service, pod.metadata.labels), ref["name"]).toBe(true);
        expect((service["spec"].ports as Manifest[]).map((p) => p["port"])).toContain(ref["port"]);
      }
    }
  });

  it("Fundament's own kube-api-proxy and plugin-proxy are off by default: no second owner of those Services", () => {
    expect(proxyServices.defaults).toEqual([]);
  });

  it("and Fundament's own proxies switched on would own the same two Services: the two charts then refuse to share them", () => {
    const names = proxyServices.enabled.map((o) => `${o["kind"]}/${o["metadata"].name}`);
    expect(names.sort()).toEqual(["Service/kube-api-proxy", "Service/plugin-proxy"]);
    for (const name of ["kube-api-proxy", "plugin-proxy"]) expect(find(helmTemplate({}), "Service", name)).toBeDefined();
  });
});

describe("dataPlane values", () => {
  const dataPlane = (objects: Manifest[]) => objects.filter((o) => o["metadata"].labels?.["app.kubernetes.io/component"] === "data-plane").map((o) => `${o["kind"]}/${o["metadata"].name}`);

  it("enabled: false renders none of it", () => {
    expect(dataPlane(helmTemplate({}))).toEqual(
      expect.arrayContaining(["Deployment/fundament-envoy", "Service/fundament-envoy", "Service/kube-api-proxy", "Service/plugin-proxy", "PodDisruptionBudget/fundament-envoy", "NetworkPolicy/fundament-envoy", "NetworkPolicy/portcullis-from-data-plane"]),
    );
    expect(dataPlane(helmTemplate({ dataPlane: { enabled: false } }))).toEqual([]);
  });

  it("fundamentServices: false leaves out kube-api-proxy and plugin-proxy", () => {
    const names = dataPlane(helmTemplate({ dataPlane: { fundamentServices: false } }));
    expect(names).toContain("Service/fundament-envoy");
    expect(names).not.toContain("Service/kube-api-proxy");
    expect(names).not.toContain("Service/plugin-proxy");
  });

  it("image, replicaCount, service.type, resources, volumes and volumeMounts go where they say", () => {
    const resources = { requests: { cpu: "1", memory: "1Gi" }, limits: { memory: "2Gi" } };
    const objects = helmTemplate({
      dataPlane: {
        image: { repository: "registry.example/envoy", tag: "v1.37.0", pullPolicy: "Always" },
        replicaCount: 3,
        service: { type: "LoadBalancer" },
        resources,
        volumes: [{ name: "extra", secret: { secretName: "extra" } }],
        volumeMounts: [{ name: "extra", mountPath: "/etc/extra", readOnly: true }],
      },
    });
    const deployment = find(objects, "Deployment", "fundament-envoy");
    const envoy = envoyContainer(objects);
    expect(deployment["spec"].replicas).toBe(3);
    expect(envoy).toMatchObject({ image: "registry.example/envoy:v1.37.0", imagePullPolicy: "Always", resources });
    expect(envoy["volumeMounts"]).toContainEqual({ name: "extra", mountPath: "/etc/extra", readOnly: true });
    expect(deployment["spec"].template.spec.volumes).toContainEqual({ name: "extra", secret: { secretName: "extra" } });
    expect(find(objects, "Service", "fundament-envoy")["spec"].type).toBe("LoadBalancer");
    // The init container runs portcullis's own image, the one the release installs.
    expect(deployment["spec"].template.spec.initContainers[0].image).toBe(find(objects, "Deployment", "portcullis")["spec"].template.spec.containers[0].image);
  });

  it.each([
    // null: Helm's way to drop a key of the shipped values.
    ["no envoy section", { config: { envoy: null } }, /dataPlane.enabled: the data-plane Envoy is generated from config.envoy/],
    ["a TLS listener behind Envoy Gateway", modeOf("envoyGateway", { config: { ...shippedConfig(), envoy: example()["envoy"] } }), /gateway.mode envoyGateway: the gateway ends TLS/],
    ["an ext_authz host other than this release's portcullis-grpc", { config: { envoy: { portcullis: { host: "portcullis-grpc.elsewhere.svc.cluster.local" } } } }, /config.envoy.portcullis.host is portcullis-grpc.elsewhere/],
    ["a TLS listener behind Istio", modeOf("istio", { config: { ...example(), check: { policyFrom: "request" } } }), /gateway.mode istio: the gateway ends TLS/],
  ])("refuses %s", (_, values, message) => {
    expect(() => helmTemplate(values)).toThrow(message);
  });

  it("without an envoy section, with the data plane off, renders", () => {
    const objects = helmTemplate({ config: { envoy: null }, dataPlane: { enabled: false } });
    expect(parse(find(objects, "ConfigMap", "portcullis-config")["data"]["config.yaml"])).not.toHaveProperty("envoy");
    expect(dataPlane(objects)).toEqual([]);
  });
});
