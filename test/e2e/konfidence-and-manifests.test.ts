/**
 * Against a real kube-apiserver: the shipped manifests (every kustomization under deploy/ as
 * kustomize renders it, CRDs with their CEL rules) are accepted, and Konfidence Projects created, changed and deleted in the API server are
 * followed by the konfidence-api policy, with workload tokens from a local OIDC provider.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { applyManifests, rawRequest, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { KUSTOMIZATIONS, kustomize, kustomizeYaml } from "../support/kustomize.ts";
import { startLocalProvider, type LocalProvider, type SigningKey } from "../konfidence/oidc-provider.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids } from "../support/tokens.ts";
import { waitFor } from "./fundament-world.ts";

const AUD = "https://konfidence.example/api";
const PROJECTS = "/apis/konfidence.cloud/v1alpha1/projects";

let api: KubeApiserver;
let ci: LocalProvider;
let ciKey: SigningKey;
let ports: ConnectedPorts;
let server: TestServer;
let dir: string;

beforeAll(async () => {
  [api, ci] = await Promise.all([startKubeApiserver(), startLocalProvider()]);
  ciKey = ci.addKey();
  dir = mkdtempSync(join(tmpdir(), "portcullis-e2e-konfidence-"));
  // What the platform's owner applies first, for real: the fundament-system Namespace and the CRDs.
  writeFileSync(join(dir, "shared.yaml"), kustomizeYaml("deploy/k8s/shared"));
  await applyManifests(api, [join(dir, "shared.yaml"), resolve(import.meta.dirname, "fixtures/monitoring-crds.yaml")]);
  writeFileSync(join(dir, "ca.pem"), ci.ca);
  const config = testConfig({
    clusters: [{ id: ids.cluster, kubeconfig: api.kubeconfigPath }],
    konfidence: { cluster: { clusterId: ids.cluster }, providers: { allowList: [ci.endpoint], caFile: join(dir, "ca.pem") } },
  });
  ports = await connectPorts(config, createLogging("warn").logger);
  await waitFor(async () => ports.ready());
  server = await startTestServer(ports, config);
}, 180_000);

afterAll(async () => {
  await server?.stop();
  await Promise.all([api?.stop(), ci?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const project = (name: string, roleBindings: unknown) => ({ apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: { name }, spec: { roleBindings } });
const ciSubject = (sub: string) => ({ jwks: { endpoint: ci.endpoint, audience: AUD, claims: { sub } } });

describe("shipped manifests on a real API server", () => {
  // deploy/k8s/shared and deploy/k8s/crds were applied for real in beforeAll (the Namespace and the
  // CRDs); ServiceMonitor and PrometheusRule are checked against minimal copies of the Prometheus
  // Operator's CRDs (fixtures/monitoring-crds.yaml), which keep any field: the operator's own schema
  // is not reproduced, only that they are objects of those kinds the API server accepts.
  it.each(KUSTOMIZATIONS.filter((dir) => dir !== "deploy/k8s/shared" && dir !== "deploy/k8s/crds"))(
    "accepts every object `kubectl kustomize %s` renders (server-side dry run, strict field validation)",
    async (dir) => {
      const rejected: string[] = [];
      for (const obj of kustomize(dir)) {
        const res = await rawRequest(api, "POST", `${collectionPath(obj["apiVersion"], obj["kind"], obj["metadata"].namespace)}?dryRun=All&fieldValidation=Strict`, obj);
        if (res.status !== 201) rejected.push(`${obj["kind"]}/${obj["metadata"].name}: ${res.status} ${JSON.stringify((res.json as { message?: string })?.message)}`);
      }
      expect(rejected).toEqual([]);
    },
  );

  it("the shared kustomization's Namespace and CRDs are established", async () => {
    for (const obj of kustomize("deploy/k8s/shared")) {
      const path = obj["kind"] === "Namespace" ? `/api/v1/namespaces/${obj["metadata"].name}` : `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${obj["metadata"].name}`;
      expect((await rawRequest(api, "GET", path, undefined)).status, path).toBe(200);
    }
  });

  it.each([
    { name: "a subject with both session and jwks", spec: { roleBindings: { dev: [{ session: { memberOf: ["a"] }, jwks: { endpoint: "https://x/.well-known/openid-configuration", audience: "a", claims: { sub: "x" } } }] } } },
    { name: "a subject with neither", spec: { roleBindings: { dev: [{}] } } },
    { name: "an upper-case role name", spec: { roleBindings: { Admin: [{ session: { memberOf: ["a"] } }] } } },
  ])("the Project CRD rejects $name", async ({ spec }) => {
    const res = await rawRequest(api, "POST", `${PROJECTS}?dryRun=All`, { apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: { name: "bad" }, spec });
    expect(res.status).toBe(422);
  });

  it.each([
    { name: "an unpinned-looking hash", hash: "md5:abc" },
    { name: "a short sha256", hash: "sha256:abcd" },
  ])("the PluginInstallation CRD rejects $name", async ({ hash }) => {
    const res = await rawRequest(api, "POST", "/apis/plugins.fundament.io/v1/plugininstallations?dryRun=All", {
      apiVersion: "plugins.fundament.io/v1",
      kind: "PluginInstallation",
      metadata: { name: "x" },
      spec: { definitionRef: { pluginName: "x", pluginVersion: "1.0.0", definitionHash: hash } },
    });
    expect(res.status).toBe(422);
  });
});

describe("konfidence-api follows Projects in the real API server", () => {
  const stages = "/api/v1/projects/alpha/stages";
  const approve = "/api/v1/projects/alpha/vectorPromotions/p-1/approve";
  const check = async (path: string, method = "GET") =>
    server.check({ method, path, headers: { authorization: `Bearer ${await ci.sign(ciKey, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD })}` }, policy: "konfidence-api" });

  it("create → dev may read, may not approve; change to pm → may approve; delete → 404", async () => {
    // Until some Project names the provider, its tokens are not even verified (an `iss` cannot make portcullis fetch).
    expect(await check(stages)).toMatchObject({ allowed: false, http: 401, reason: "invalid-token" });
    expect((await rawRequest(api, "POST", PROJECTS, project("beta", { dev: [ciSubject("repo:acme/other:*")] }))).status).toBe(201);
    await waitFor(async () => (await check(stages)).reason === "project-not-found");
    expect(await check(stages)).toMatchObject({ allowed: false, http: 404 });

    const created = await rawRequest(api, "POST", PROJECTS, project("alpha", { dev: [ciSubject("repo:acme/app:*")] }));
    expect(created.status).toBe(201);
    await waitFor(async () => (await check(stages)).allowed);
    expect(await check(stages)).toMatchObject({ set: { "x-konfidence-roles": "dev", "x-konfidence-subject": "repo:acme/app:ref:refs/heads/main" } });
    expect(await check(approve, "POST")).toMatchObject({ allowed: false, http: 403, reason: "role-denied" });

    const current = (await rawRequest(api, "GET", `${PROJECTS}/alpha`, undefined)).json as { metadata: { resourceVersion: string } };
    const changed = await rawRequest(api, "PUT", `${PROJECTS}/alpha`, {
      ...project("alpha", { pm: [ciSubject("repo:acme/app:ref:refs/heads/*")] }),
      metadata: { name: "alpha", resourceVersion: current.metadata.resourceVersion },
    });
    expect(changed.status).toBe(200);
    await waitFor(async () => (await check(approve, "POST")).allowed);
    expect(await check(approve, "POST")).toMatchObject({ set: { "x-konfidence-roles": "pm" } });

    const otherRepo = await check(stages);
    expect(otherRepo.allowed).toBe(true);
    const deleted = await rawRequest(api, "DELETE", `${PROJECTS}/alpha`, undefined);
    expect(deleted.status).toBe(200);
    await waitFor(async () => (await check(stages)).allowed === false);
    expect(await check(stages)).toMatchObject({ http: 404, reason: "project-not-found" });
  });
});

/** The collection path of a built-in kind used by the manifests. */
function collectionPath(apiVersion: string, kind: string, namespace: string): string {
  const plural: Record<string, string> = {
    ServiceAccount: "serviceaccounts",
    Service: "services",
    ConfigMap: "configmaps",
    Deployment: "deployments",
    ClusterRole: "clusterroles",
    ClusterRoleBinding: "clusterrolebindings",
    Role: "roles",
    RoleBinding: "rolebindings",
    NetworkPolicy: "networkpolicies",
    PodDisruptionBudget: "poddisruptionbudgets",
    HorizontalPodAutoscaler: "horizontalpodautoscalers",
    ServiceMonitor: "servicemonitors",
    PrometheusRule: "prometheusrules",
  };
  const resource = plural[kind];
  if (resource === undefined) throw new Error(`no collection path known for ${kind}`);
  const prefix = apiVersion.includes("/") ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  const clusterScoped = kind === "ClusterRole" || kind === "ClusterRoleBinding";
  return clusterScoped ? `${prefix}/${resource}` : `${prefix}/namespaces/${namespace}/${resource}`;
}
