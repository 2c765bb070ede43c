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
import { CHART, helm, helmTemplate, KUBE_VERSION, modeValues, RELEASE_NAMESPACE } from "../support/helm.ts";
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
    const { values, files } = modeValues(mode);
    const objects = helmTemplate(values, files);
    const kinds = new Set(objects.map((o) => o["kind"]));
    for (const k of ["Deployment", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ClusterRole"]) expect(kinds, mode).toContain(k);
    if (mode === "istio") expect(kinds).toContain("AuthorizationPolicy");
    if (mode === "envoyGateway") expect(kinds).toContain("SecurityPolicy");
    for (const o of objects) expect(o["metadata"]?.name, JSON.stringify(o).slice(0, 100)).toBeTruthy();
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
    const { values, files } = modeValues(mode);
    const policy = find(helmTemplate(values, files), "NetworkPolicy", "portcullis")!;
    const grpc = policy["spec"].ingress.filter((r: Manifest) => r["ports"].some((p: Manifest) => p["port"] === "grpc"));
    expect(grpc).toEqual([{ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } }, podSelector: { matchLabels: labels } }], ports: [{ port: "grpc", protocol: "TCP" }] }]);
  });

  it.each([
    [{ gateway: { mode: "nginx" } }, /gateway.mode must be one of/],
    [{ gateway: { mode: "istio" } }, /config.check.policyFrom must be request/],
    [{ autoscaling: { minReplicas: 1 } }, /at least 2/],
    [{ httproute: { enabled: true } }, /for gateway.mode istio or envoyGateway/],
    [{ gateway: { mode: "envoyGateway" }, httproute: { enabled: true } }, /--set-file gateway.manifests/],
  ])("refuses %j", (values, message) => {
    expect(() => helmTemplate(values)).toThrow(message);
  });
});

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
