/**
 * The Kubernetes manifests, read as data: least-privilege RBAC, a hardened Pod, probes and ports that
 * match the configuration portcullis runs with, and a CRD that accepts exactly the hashes portcullis
 * does. (The lead's end-to-end harness applies them to a real API server.)
 */
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { loadConfig } from "../../src/config/load.ts";
import { configSchema } from "../../src/config/schema.ts";
import { isDefinitionHash } from "../../src/tokens/claim-formats.ts";

const K8S = resolve(import.meta.dirname, "../../deploy/k8s");
type Json = Record<string, any>;

const docs = (file: string): Json[] => parseAllDocuments(readFileSync(resolve(K8S, file), "utf8")).map((d) => d.toJS() as Json);
const one = (file: string, kind: string): Json => docs(file).find((d) => d["kind"] === kind)!;
const kustomization = parse(readFileSync(resolve(K8S, "kustomization.yaml"), "utf8")) as Json;
const deployment = one("deployment.yaml", "Deployment");
const container = deployment["spec"].template.spec.containers[0];
const config = loadConfig(resolve(K8S, "portcullis.yaml"));
const portOf = (address: string) => Number(address.slice(address.lastIndexOf(":") + 1));

describe("kustomization", () => {
  it("lists every manifest in the directory; the shared Namespace and the CRDs are deploy/k8s/shared's (test/deploy/kit.test.ts)", () => {
    const manifests = readdirSync(K8S).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml" && f !== "portcullis.yaml");
    expect([...kustomization["resources"]].sort()).toEqual(manifests.sort());
  });

  it("mounts the configuration from a generated ConfigMap", () => {
    expect(kustomization["configMapGenerator"]).toEqual([{ name: "portcullis-config", files: ["config.yaml=portcullis.yaml"] }]);
    expect(container.args).toEqual(["--config", "/etc/portcullis/config.yaml"]);
    expect(deployment["spec"].template.spec.volumes).toContainEqual({ name: "config", configMap: { name: "portcullis-config" } });
  });
});

describe("RBAC: exactly the verbs portcullis needs", () => {
  it("ClusterRole", () => {
    expect(one("rbac.yaml", "ClusterRole")["rules"]).toEqual([
      { apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
      { apiGroups: [""], resources: ["serviceaccounts/token"], verbs: ["create"] },
      { apiGroups: ["rbac.authorization.k8s.io"], resources: ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], verbs: ["list", "watch"] },
      { apiGroups: [""], resources: ["serviceaccounts"], verbs: ["list", "watch"] },
      { apiGroups: ["plugins.fundament.io"], resources: ["plugininstallations"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["portcullis.fundament.io"], resources: ["revocations"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["konfidence.cloud"], resources: ["projects"], verbs: ["get", "list", "watch"] },
    ]);
  });

  it("Role: read the Secrets of the cluster registry's namespace, one of its own (not portcullis's)", () => {
    const role = one("rbac.yaml", "Role");
    expect(role["rules"]).toEqual([{ apiGroups: [""], resources: ["secrets"], verbs: ["get", "list", "watch"] }]);
    const binding = one("rbac.yaml", "RoleBinding");
    expect(binding["roleRef"]).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role["metadata"].name });
    expect(binding["subjects"]).toEqual([{ kind: "ServiceAccount", name: deployment["spec"].template.spec.serviceAccountName, namespace: kustomization["namespace"] }]);
    // The registry watches the namespace the Role is in (kit.test.ts: kustomize keeps it there), and that is not fundament-system.
    expect(role["metadata"].namespace).toBe(config.clusterRegistry?.namespace);
    expect(binding["metadata"].namespace).toBe(config.clusterRegistry?.namespace);
    expect(config.clusterRegistry?.namespace).not.toBe(kustomization["namespace"]);
  });

  it("bound to the Deployment's ServiceAccount", () => {
    const binding = one("rbac.yaml", "ClusterRoleBinding");
    expect(binding["roleRef"]).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "portcullis" });
    expect(binding["subjects"]).toEqual([{ kind: "ServiceAccount", name: deployment["spec"].template.spec.serviceAccountName, namespace: kustomization["namespace"] }]);
  });
});

describe("the Pod", () => {
  it("runs non-root, read-only, without capabilities", () => {
    expect(deployment["spec"].template.spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(container.resources.requests).toBeDefined();
    expect(container.resources.limits.memory).toBeDefined();
  });

  it("probes /healthz and /readyz on the admin port", () => {
    expect(container.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "admin" });
    expect(container.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "admin" });
  });

  it("exposes the ports the configuration listens on", () => {
    const ports = Object.fromEntries(container.ports.map((p: Json) => [p.name, p.containerPort]));
    expect(ports).toEqual({ grpc: portOf(config.listen.grpc), internal: portOf(config.listen.internal), admin: portOf(config.listen.admin) });
  });

  it("takes every secret the configuration names from a Secret", () => {
    const fromSecrets = new Set(container.env.filter((e: Json) => e.valueFrom?.secretKeyRef !== undefined).map((e: Json) => e.name));
    for (const s of config.tokens!.secrets!) expect(fromSecrets).toContain(s.env);
  });
});

describe("Services and NetworkPolicy", () => {
  const services = docs("services.yaml");
  it("a headless Service for Envoy's ext_authz cluster, at the name the Envoy generator defaults to", () => {
    const grpc = services.find((s) => s["metadata"].name === "portcullis-grpc")!;
    expect(grpc["spec"].clusterIP).toBe("None");
    expect(grpc["spec"].ports).toEqual([{ name: "grpc", port: 9001, targetPort: "grpc", protocol: "TCP", appProtocol: "kubernetes.io/h2c" }]);
    const envoyDefault = configSchema.parse({ tokens: { secrets: [{ env: "S" }] }, openfga: { apiUrl: "http://o", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" }, envoy: {
      origins: { console: "https://c", kubeApiProxy: "https://k", pluginProxy: "https://p" }, clusters: [], upstreams: { assets: { url: "http://a" } },
    } }).envoy!.portcullis.host;
    expect(envoyDefault).toBe(`portcullis-grpc.${kustomization["namespace"]}.svc.cluster.local`);
  });

  it("lets only Envoy reach the gRPC port and only authn-api the internal port", () => {
    const ingress = one("networkpolicy.yaml", "NetworkPolicy")["spec"].ingress as Json[];
    const who = (port: string) => ingress.filter((r) => r["ports"].some((p: Json) => p.port === port)).flatMap((r) => r["from"]);
    const inFundamentSystem = { matchLabels: { "kubernetes.io/metadata.name": "fundament-system" } };
    expect(who("grpc")).toEqual([{ namespaceSelector: inFundamentSystem, podSelector: { matchLabels: { "app.kubernetes.io/name": "fundament-envoy" } } }]);
    expect(who("internal")).toEqual([{ namespaceSelector: inFundamentSystem, podSelector: { matchLabels: { "app.kubernetes.io/name": "authn-api" } } }]);
  });

  it("a PodDisruptionBudget and an autoscaler that keep at least one replica", () => {
    expect(one("poddisruptionbudget.yaml", "PodDisruptionBudget")["spec"].minAvailable).toBe(1);
    const hpa = one("horizontalpodautoscaler.yaml", "HorizontalPodAutoscaler");
    expect(hpa["apiVersion"]).toBe("autoscaling/v2");
    expect(hpa["spec"].minReplicas).toBeGreaterThanOrEqual(2);
  });
});

describe("the PluginInstallation CRD", () => {
  const crd = docs("crds/plugininstallations.plugins.fundament.io.yaml")[0]!;
  const version = crd["spec"].versions[0];
  const schema = version.schema.openAPIV3Schema;

  it("is plugins.fundament.io/v1, cluster-scoped, with the status subresource", () => {
    expect(crd["spec"]).toMatchObject({ group: "plugins.fundament.io", scope: "Cluster", names: { plural: "plugininstallations", kind: "PluginInstallation" } });
    expect(version).toMatchObject({ name: "v1", served: true, storage: true, subresources: { status: {} } });
    expect(schema.properties.status.properties.phase.enum).toEqual(["Pending", "Deploying", "Running", "Degraded", "Failed", "Terminating"]);
  });

  it.each(["", "sha256:unknown", `sha256:${"ab".repeat(32)}`, "sha256:", `sha256:${"AB".repeat(32)}`, `sha256:${"ab".repeat(31)}`, "md5:abc", " sha256:unknown"])(
    "accepts the definitionHash %j exactly when portcullis does",
    (hash) => {
      const pattern = new RegExp(schema.properties.spec.properties.definitionRef.properties.definitionHash.pattern);
      expect(pattern.test(hash)).toBe(isDefinitionHash(hash));
    },
  );
});
