/**
 * Against a real kube-apiserver with the real CRDs of Gateway API (v1.6.1, standard channel), Envoy
 * Gateway (v1.9.1) and Istio (istio.io/api v1.32.0), each copied from its Go module by
 * scripts/deps/install.sh: every object the Helm chart renders, in each gateway mode, beside
 * Fundament's own HTTPRoutes as its chart renders them (test/deploy/fixtures/fundament-httproutes.yaml),
 * is accepted by a server-side dry run with strict field validation: the CRDs' OpenAPI schemas and CEL rules, and Kubernetes' own
 * validation of the core objects. An object the API server would refuse, or a field it does not
 * know, fails here.
 */
import { readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { applyManifests, rawRequest, resolveBinary, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { fundamentRoutes, GATEWAY, modeValues } from "../support/gateway.ts";
import { helmTemplate, RELEASE_NAMESPACE } from "../support/helm.ts";
import { kustomizeYaml, type Manifest } from "../support/kustomize.ts";
import { makeTempDir } from "../harness/binaries.ts";

let api: KubeApiserver;
let dir: string;

const crdFiles = (name: "gatewayApiCrds" | "envoyGatewayCrds" | "istioCrds") => {
  const base = resolveBinary(name);
  return readdirSync(base).filter((f) => f.endsWith(".yaml")).sort().map((f) => join(base, f));
};

beforeAll(async () => {
  api = await startKubeApiserver();
  dir = makeTempDir("gateway-manifests");
  // The Namespaces the objects go to, and the kit's shared Namespace and CRDs.
  const namespaces = [GATEWAY.namespace, "envoy-gateway-system", "konfidence-system", "fundament"].map((name) => stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name } })).join("---\n");
  const writeTo = (file: string, text: string) => {
    writeFileSync(join(dir, file), text);
    return join(dir, file);
  };
  await applyManifests(api, [
    writeTo("shared.yaml", kustomizeYaml("deploy/k8s/shared")),
    writeTo("namespaces.yaml", namespaces),
    ...crdFiles("gatewayApiCrds"),
    ...crdFiles("envoyGatewayCrds"),
    ...crdFiles("istioCrds"),
  ]);
}, 240_000);

afterAll(async () => {
  await api?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** kind → (resource, namespaced), from the API server's discovery, per group/version. */
const discovery = new Map<string, Map<string, { name: string; namespaced: boolean }>>();
async function resourceOf(apiVersion: string, kind: string): Promise<{ name: string; namespaced: boolean }> {
  if (!discovery.has(apiVersion)) {
    const path = apiVersion.includes("/") ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
    const res = await rawRequest(api, "GET", path, undefined);
    if (res.status !== 200) throw new Error(`discovery ${path}: ${res.status}`);
    const list = (res.json as { resources: { name: string; kind: string; namespaced: boolean }[] }).resources;
    discovery.set(apiVersion, new Map(list.filter((r) => !r.name.includes("/")).map((r) => [r.kind, { name: r.name, namespaced: r.namespaced }])));
  }
  const found = discovery.get(apiVersion)!.get(kind);
  if (found === undefined) throw new Error(`the API server serves no ${kind} in ${apiVersion}`);
  return found;
}

/** Server-side dry run of each object (create, strict field validation); the refusals, if any. */
async function dryRun(objects: Manifest[]): Promise<string[]> {
  const refused: string[] = [];
  for (const obj of objects) {
    const { name, namespaced } = await resourceOf(obj["apiVersion"], obj["kind"]);
    const namespace = obj["metadata"].namespace ?? RELEASE_NAMESPACE;
    const prefix = obj["apiVersion"].includes("/") ? `/apis/${obj["apiVersion"]}` : `/api/${obj["apiVersion"]}`;
    const path = namespaced ? `${prefix}/namespaces/${namespace}/${name}` : `${prefix}/${name}`;
    const res = await rawRequest(api, "POST", `${path}?dryRun=All&fieldValidation=Strict`, obj);
    if (res.status !== 201) refused.push(`${obj["kind"]}/${obj["metadata"].name}: ${res.status} ${(res.json as { message?: string })?.message}`);
  }
  return refused;
}

describe("the API server accepts", () => {
  it.each(["envoy", "istio", "envoyGateway"] as const)("every object the Helm chart renders for gateway.mode %s (CRDs installed by the chart too), beside Fundament's HTTPRoutes", async (mode) => {
    const objects = helmTemplate({ ...modeValues(mode), crds: { install: true } });
    // The chart's CRDs are the kit's, already applied: a create of them would be a conflict, not a refusal.
    const rendered = objects.filter((o) => o["kind"] !== "CustomResourceDefinition");
    expect(rendered.length).toBeGreaterThan(10);
    if (mode === "envoyGateway") expect(rendered.filter((o) => o["kind"] === "SecurityPolicy")).toHaveLength(3);
    if (mode === "istio") expect(rendered.filter((o) => o["kind"] === "AuthorizationPolicy")).toHaveLength(1);
    const routes = fundamentRoutes();
    expect(routes.length).toBe(12);
    expect(await dryRun([...rendered, ...routes])).toEqual([]);
  });

  it("the SecurityPolicies and their ReferenceGrant when Fundament's routes live in another namespace (gateway.coveredRoutes.namespace)", async () => {
    const values = modeValues("envoyGateway");
    values["gateway"].coveredRoutes = { namespace: "fundament", names: ["fundament-authn-api", "fundament-organization-api", "fundament-dcim-api"] };
    const objects = helmTemplate(values).filter((o) => o["kind"] === "SecurityPolicy" || o["kind"] === "ReferenceGrant");
    expect(objects.map((o) => `${o["kind"]}/${o["metadata"].namespace ?? RELEASE_NAMESPACE}`).sort()).toEqual(["ReferenceGrant/fundament-system", "SecurityPolicy/fundament", "SecurityPolicy/fundament", "SecurityPolicy/fundament"]);
    expect(await dryRun([...objects, ...fundamentRoutes("fundament")])).toEqual([]);
  });

  it("and refuses what the CRDs' schemas refuse (the dry run is not a rubber stamp)", async () => {
    const policy = helmTemplate(modeValues("envoyGateway")).find((o) => o["kind"] === "SecurityPolicy")!;
    const bad = structuredClone(policy);
    bad["spec"].extAuth.failClosed = true; // no such field
    const worse = structuredClone(policy);
    worse["spec"].extAuth.grpc.backendRefs = []; // "backendRef or backendRefs needs to be set"
    const refused = await dryRun([bad, worse]);
    expect(refused).toHaveLength(2);
    expect(refused[0]).toMatch(/unknown field "spec.extAuth.failClosed"/);
    expect(refused[1]).toMatch(/backendRef or backendRefs needs to be set/);
  });
});
