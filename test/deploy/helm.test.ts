/**
 * The Helm chart (deploy/helm/portcullis): `helm lint --strict` passes, `helm template` renders each
 * gateway mode, what it shares with the kustomize kit (Deployment, Services, RBAC, PDB, HPA,
 * NetworkPolicy) is the kit's, object for object, the CRDs are the kit's files, unsafe values are
 * refused, and every value is documented in values.yaml and in docs/deployment.md. (The API server's
 * verdict on every rendered object: test/e2e/gateway-manifests.test.ts.)
 */
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { dataPlaneHosts, gatewayConfig, modeValues, protectedHosts } from "../support/gateway.ts";
import { CHART, helm, helmTemplate, KUBE_VERSION, RELEASE_NAMESPACE } from "../support/helm.ts";
import { kustomize, type Manifest, ROOT } from "../support/kustomize.ts";

const kit = kustomize("deploy/k8s");
const chart = helmTemplate({});
const key = (m: Manifest) => `${m["kind"]}/${m["metadata"].name}`;
const find = (objects: Manifest[], kind: string, name: string) => objects.find((m) => m["kind"] === kind && m["metadata"].name === name);

describe("helm", () => {
  it("lint --strict passes on the shipped values", () => {
    expect(helm(["lint", "--strict", CHART, "--kube-version", KUBE_VERSION, "--namespace", RELEASE_NAMESPACE])).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  it.each(["envoy", "istio", "envoyGateway"] as const)("template renders gateway.mode %s, every object named and in the release's namespace or cluster-scoped", (mode) => {
    const objects = helmTemplate(modeValues(mode));
    const kinds = new Set(objects.map((o) => o["kind"]));
    for (const k of ["Deployment", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ClusterRole"]) expect(kinds, mode).toContain(k);
    if (mode === "istio") expect(kinds).toContain("AuthorizationPolicy");
    if (mode === "envoyGateway") expect(kinds).toContain("SecurityPolicy");
    for (const o of objects) expect(o["metadata"]?.name, JSON.stringify(o).slice(0, 100)).toBeTruthy();
    // Values alone: nothing generated beforehand, and no route of its own beside the platform's.
    expect(kinds).not.toContain("HTTPRoute");
  });
});

/** What the two are held equal on: the objects' specs, rules and bindings (labels differ: Helm adds its own). */
function comparable(m: Manifest): unknown {
  const { kind } = m;
  if (kind === "Deployment") {
    const spec = structuredClone(m["spec"]);
    delete spec.template.metadata.annotations; // the chart's config checksum; the kit hashes the ConfigMap's name
    // Images are the kit's `images:` and the chart's image values; both name portcullis's and Envoy's.
    for (const container of [...spec.template.spec.containers, ...(spec.template.spec.initContainers ?? [])]) container.image = "<image>";
    spec.template.spec.volumes = spec.template.spec.volumes.map((v: Manifest) => (v["name"] === "config" ? { name: "config", configMap: { name: "<config>" } } : v));
    return spec;
  }
  if (kind === "ClusterRole") return m["rules"];
  if (kind === "ClusterRoleBinding") return { roleRef: m["roleRef"], subjects: m["subjects"] };
  // The cluster registry's Role lives in its own namespace (config.clusterRegistry.namespace), not the release's.
  if (kind === "Role") return { namespace: m["metadata"].namespace, rules: m["rules"] };
  if (kind === "RoleBinding") return { namespace: m["metadata"].namespace, roleRef: m["roleRef"], subjects: m["subjects"] };
  if (kind === "ConfigMap") return parse(m["data"]["config.yaml"]);
  return m["spec"];
}

describe("the chart and the kustomize kit (deploy/k8s) are one deployment", () => {
  const shared = kit.filter((m) => m["kind"] !== "ServiceAccount");

  it("the chart renders every object of the kit, and the kit every object of the chart's envoy mode (the CRDs aside)", () => {
    expect(chart.map(key).sort()).toEqual(kit.map((m) => (m["kind"] === "ConfigMap" ? "ConfigMap/portcullis-config" : key(m))).sort());
  });

  it.each(shared.map((m) => [key(m), m] as const))("%s: same spec, rules and bindings", (_, kitObject) => {
    const name = kitObject["kind"] === "ConfigMap" ? "portcullis-config" : kitObject["metadata"].name;
    const chartObject = find(chart, kitObject["kind"], name);
    expect(chartObject, name).toBeDefined();
    expect(comparable(chartObject!)).toEqual(comparable(kitObject));
  });

  it("the CRDs it installs (crds.install) are the kit's files", () => {
    const crds = helmTemplate({ crds: { install: true } }).filter((m) => m["kind"] === "CustomResourceDefinition");
    const files = readdirSync(resolve(ROOT, "deploy/k8s/crds")).filter((f) => f !== "kustomization.yaml");
    expect(crds.map((c) => c["metadata"].name).sort()).toEqual(files.map((f) => f.replace(/\.yaml$/, "")).sort());
    for (const f of files) expect(readFileSync(resolve(CHART, "files/crds", f), "utf8"), f).toBe(readFileSync(resolve(ROOT, "deploy/k8s/crds", f), "utf8"));
    expect(chart.filter((m) => m["kind"] === "CustomResourceDefinition")).toEqual([]);
  });
});

describe("gateway modes", () => {
  it.each([
    ["istio", { "gateway.networking.k8s.io/gateway-name": "fundament" }, "fundament-gateway"],
    ["envoyGateway", { "gateway.envoyproxy.io/owning-gateway-name": "fundament", "gateway.envoyproxy.io/owning-gateway-namespace": "fundament-gateway" }, "envoy-gateway-system"],
  ] as const)("%s: the NetworkPolicy admits the Gateway's proxy pods to the gRPC port, and no one else", (mode, labels, namespace) => {
    const policy = find(helmTemplate(modeValues(mode)), "NetworkPolicy", "portcullis")!;
    const grpc = policy["spec"].ingress.filter((r: Manifest) => r["ports"].some((p: Manifest) => p["port"] === "grpc"));
    expect(grpc).toHaveLength(1);
    expect(grpc[0].from).toEqual([{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } }, podSelector: { matchLabels: labels } }]);
  });

  // Not redundant with portcullis-from-data-plane: without the chart's data plane (dataPlane.enabled
  // false) the front proxy is an Envoy of one's own (deploy/examples/envoy.yaml), and this rule alone admits it.
  it.each([
    ["the chart's data plane", {}],
    ["an Envoy of one's own in gateway.namespace", { dataPlane: { enabled: false }, gateway: { namespace: "edge" } }],
  ] as const)("envoy, %s: the NetworkPolicy admits the pods labelled fundament-envoy to the gRPC port", (_, values) => {
    const objects = helmTemplate(values);
    const grpc = find(objects, "NetworkPolicy", "portcullis")!["spec"].ingress.filter((r: Manifest) => r["ports"].some((p: Manifest) => p["port"] === "grpc"));
    const namespace = (values as Manifest)["gateway"]?.namespace ?? RELEASE_NAMESPACE;
    expect(grpc).toEqual([expect.objectContaining({ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } }, podSelector: { matchLabels: { "app.kubernetes.io/name": "fundament-envoy" } } }] })]);
  });

  it.each([
    ["an unknown gateway.mode", { gateway: { mode: "nginx" } }, /gateway.mode must be one of/],
    ["istio without request mode", { gateway: { mode: "istio" } }, /config.check.policyFrom must be request/],
    ["envoyGateway without request mode", { gateway: { mode: "envoyGateway" } }, /config.check.policyFrom must be request/],
    ["envoyGateway covering no route", { ...modeValues("envoyGateway"), gateway: { mode: "envoyGateway", coveredRoutes: { names: [] } } }, /lists no HTTPRoute/],
    ["istio checking the kube-api-proxy host at the gateway", { ...modeValues("istio"), gateway: { mode: "istio", coveredHostnames: ["authn.fundament.io", "kube-api-proxy.fundament.io"] } }, /kube-api-proxy.fundament.io is served by the data-plane Envoy/],
    ["istio with no host to check", { gateway: { mode: "istio" }, config: { check: { policyFrom: "request" }, envoy: null }, dataPlane: { enabled: false } }, /no host to check/],
    ["one replica", { autoscaling: { minReplicas: 1 } }, /at least 2/],
    ["the last release's httproute values (upgrade)", { ...modeValues("envoyGateway"), httproute: { enabled: true, parentRefs: [{ name: "fundament", namespace: "fundament-gateway" }] } }, /httproute.\* and gateway.manifests are gone/],
    ["the last release's gateway.manifests (upgrade)", { ...modeValues("istio"), gateway: { mode: "istio", manifests: "kind: HTTPRoute" } }, /httproute.\* and gateway.manifests are gone/],
    ["istio with listen.tls", withTls("istio", {}), /Istio's envoyExtAuthzGrpc provider calls portcullis in plaintext/],
    ["envoyGateway with a required client certificate", withTls("envoyGateway", { requireClientCert: true, clientCaFile: "/tls/ca.crt" }), /requireClientCert: Envoy Gateway presents a client certificate only gateway-wide/],
  ])("refuses %s", (_, values, message) => {
    expect(() => helmTemplate(values)).toThrow(message);
  });
});

describe("covering the platform's routes (envoyGateway)", () => {
  it("a SecurityPolicy on each of Fundament's platform HTTPRoutes, beside them, calling portcullis fail closed, naming no policy", () => {
    const policies = helmTemplate(modeValues("envoyGateway")).filter((o) => o["kind"] === "SecurityPolicy");
    expect(policies.map((p) => p["spec"].targetRefs)).toEqual(
      ["fundament-authn-api", "fundament-organization-api", "fundament-dcim-api"].map((name) => [{ group: "gateway.networking.k8s.io", kind: "HTTPRoute", name }]),
    );
    for (const p of policies) {
      expect(p["metadata"].namespace).toBe(RELEASE_NAMESPACE);
      expect(p["spec"].extAuth).toEqual({
        grpc: { backendRefs: [{ group: "", kind: "Service", name: "portcullis-ext-authz", namespace: RELEASE_NAMESPACE, port: 9001 }] },
        failOpen: false,
        statusOnError: 503,
        timeout: "1000ms",
      });
    }
  });

  it("Fundament in another namespace: the SecurityPolicies go there, and a ReferenceGrant here admits them to portcullis-ext-authz", () => {
    const values = modeValues("envoyGateway");
    values["gateway"].coveredRoutes = { namespace: "fundament", names: ["platform-authn-api"] };
    const objects = helmTemplate(values);
    expect(objects.filter((o) => o["kind"] === "SecurityPolicy").map((p) => `${p["metadata"].namespace}/${p["spec"].targetRefs[0].name}`)).toEqual(["fundament/platform-authn-api"]);
    const grant = objects.find((o) => o["kind"] === "ReferenceGrant")!;
    expect(grant["metadata"].namespace).toBeUndefined(); // the release's
    expect(grant["spec"]).toEqual({ from: [{ group: "gateway.envoyproxy.io", kind: "SecurityPolicy", namespace: "fundament" }], to: [{ group: "", kind: "Service", name: "portcullis-ext-authz" }] });
    expect(helmTemplate(modeValues("envoyGateway")).filter((o) => o["kind"] === "ReferenceGrant")).toEqual([]);
  });
});

describe("portcullis with TLS (config.listen.tls) under envoyGateway", () => {
  it("a BackendTLSPolicy on portcullis-ext-authz checks its certificate for the name plain Envoy checks, against portcullis-grpc-ca", () => {
    const policy = helmTemplate(withTls("envoyGateway", {})).find((o) => o["kind"] === "BackendTLSPolicy")!;
    expect(policy["spec"]).toEqual({
      targetRefs: [{ group: "", kind: "Service", name: "portcullis-ext-authz" }],
      validation: { caCertificateRefs: [{ group: "", kind: "ConfigMap", name: "portcullis-grpc-ca" }], hostname: gatewayConfig.envoy!.portcullis.host },
    });
    expect(helmTemplate(modeValues("envoyGateway")).filter((o) => o["kind"] === "BackendTLSPolicy")).toEqual([]);
  });
});

describe("covering the platform's hosts (istio)", () => {
  it("one CUSTOM AuthorizationPolicy on the Gateway sends every request to the platform services' hosts, with or without a port, to portcullis; never the data plane's", () => {
    const [policy, ...more] = helmTemplate(modeValues("istio")).filter((o) => o["kind"] === "AuthorizationPolicy");
    expect(more).toEqual([]);
    expect(policy!["metadata"].namespace).toBe("fundament-gateway");
    expect(policy!["spec"]).toEqual({
      targetRefs: [{ group: "gateway.networking.k8s.io", kind: "Gateway", name: "fundament" }],
      action: "CUSTOM",
      provider: { name: "portcullis" },
      rules: [{ to: [{ operation: { hosts: protectedHosts(gatewayConfig).flatMap((h) => [h, `${h}:*`]) } }] }],
    });
    for (const h of dataPlaneHosts(gatewayConfig)) expect(JSON.stringify(policy)).not.toContain(h);
  });
});

describe("Istio ambient", () => {
  it("under istio every rule of the NetworkPolicy admits HBONE (TCP 15008) from the same peers, and only them; no other mode opens it", () => {
    const istio = find(helmTemplate(modeValues("istio")), "NetworkPolicy", "portcullis")!;
    // A NetworkPolicy rule admits its `from` peers to its ports: HBONE rides in each peer's own rule.
    expect(istio["spec"].ingress.map((r: Manifest) => r["ports"])).toEqual(
      ["grpc", "internal", "admin"].map((port) => [{ port, protocol: "TCP" }, { port: 15008, protocol: "TCP" }]),
    );
    for (const mode of ["envoy", "envoyGateway"] as const) {
      const plain = find(helmTemplate(modeValues(mode)), "NetworkPolicy", "portcullis")!;
      expect(plain["spec"].ingress.map((r: Manifest) => r["ports"]), mode).toEqual(["grpc", "internal", "admin"].map((port) => [{ port, protocol: "TCP" }]));
    }
  });
});

/** A gateway mode's values with portcullis serving TLS (`extra`: more of listen.tls). */
function withTls(mode: "istio" | "envoyGateway", extra: Record<string, unknown>): Record<string, any> {
  const values = modeValues(mode);
  values["config"] = { ...values["config"], listen: { ...values["config"].listen, tls: { certFile: "/tls/tls.crt", keyFile: "/tls/tls.key", ...extra } } };
  return values;
}

describe("every value is documented", () => {
  const text = readFileSync(resolve(CHART, "values.yaml"), "utf8");
  /** Dotted paths of the values documented with `# --` in values.yaml (config's own keys are docs/configuration.md's). */
  const documented: string[] = [];
  const stack: { indent: number; key: string }[] = [];
  let pendingDoc = false;
  for (const line of text.split("\n")) {
    if (/^\s*# --/.test(line)) pendingDoc = true;
    const m = /^(\s*)([A-Za-z][\w.-]*):/.exec(line);
    if (m === null) continue;
    const indent = m[1]!.length;
    while (stack.length > 0 && stack.at(-1)!.indent >= indent) stack.pop();
    const path = [...stack.map((s) => s.key), m[2]!].join(".");
    if (!path.startsWith("config.") && pendingDoc) documented.push(path);
    stack.push({ indent, key: m[2]! });
    pendingDoc = false;
  }

  it("each key of values.yaml (below config) is documented, or is a map or list whose parent is", () => {
    const values = parse(text) as Record<string, unknown>;
    const undocumented: string[] = [];
    const walk = (value: unknown, path: string, parentDocumented: boolean) => {
      const isDocumented = documented.includes(path);
      const isLeafish = value === null || typeof value !== "object" || Array.isArray(value);
      if (isLeafish && !isDocumented && !parentDocumented) undocumented.push(path);
      if (!isLeafish && path !== "config") for (const [k, v] of Object.entries(value as object)) walk(v, path === "" ? k : `${path}.${k}`, isDocumented || parentDocumented);
    };
    walk(values, "", false);
    expect(undocumented).toEqual([]);
  });

  it("docs/deployment.md's values table lists exactly the documented values", () => {
    const docs = readFileSync(resolve(ROOT, "docs/deployment.md"), "utf8");
    const section = docs.slice(docs.indexOf("### Helm values"));
    const rows = [...section.matchAll(/^\| `([\w.]+)` \|/gm)].map((r) => r[1]);
    expect(rows.sort()).toEqual([...documented].sort());
  });
});
