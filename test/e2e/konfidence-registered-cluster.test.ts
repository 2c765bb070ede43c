/**
 * Issue 46 item 2: Konfidence's cluster (`konfidence.cluster.clusterId`) registered by the cluster
 * registry, not in clusters[], against two real kube-apiservers. The first is the management cluster
 * (holding the registry's Secret) and the Konfidence cluster the Secret first names, with Project
 * `alpha`; the second has only Project `beta`. Registered by Secret, `alpha` is served;
 * the Secret re-pointed to the second server, `alpha` is project-not-found (listed again from the new
 * server, never served from the old one's); the Secret deleted, konfidence-api answers 503 while the
 * process stays ready.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { applyManifests, rawRequest, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { kustomizeYaml } from "../support/kustomize.ts";
import { startLocalProvider, type LocalProvider, type SigningKey } from "../konfidence/oidc-provider.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids } from "../support/tokens.ts";
import { waitFor } from "./fundament-world.ts";

const AUD = "https://konfidence.example/api";
const PROJECTS = "/apis/konfidence.cloud/v1alpha1/projects";
/** Konfidence's cluster: in no clusters[], registered by Secret only. */
const KONFIDENCE_CLUSTER = "a1a1a1a1-0000-4000-8000-00000000000a";
const REGISTRY_NAMESPACE = "portcullis-clusters";
const SECRETS = `/api/v1/namespaces/${REGISTRY_NAMESPACE}/secrets`;

let first: KubeApiserver;
let second: KubeApiserver;
let ci: LocalProvider;
let ciKey: SigningKey;
let ports: ConnectedPorts;
let server: TestServer;
let dir: string;

const registration = (api: KubeApiserver) => ({
  metadata: { name: "konfidence", namespace: REGISTRY_NAMESPACE, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
  stringData: { clusterId: KONFIDENCE_CLUSTER, server: api.url, "ca.crt": api.caPem, token: api.adminToken },
});

async function expectStatus(res: Promise<{ status: number; json: unknown }>, status: number): Promise<void> {
  const { status: got, json } = await res;
  expect(got, JSON.stringify(json)).toBe(status);
}

beforeAll(async () => {
  [first, second, ci] = await Promise.all([startKubeApiserver(), startKubeApiserver(), startLocalProvider()]);
  ciKey = ci.addKey();
  dir = mkdtempSync(join(tmpdir(), "portcullis-e2e-konfidence-registered-"));
  // The shared kustomization on both clusters: the CRDs (Projects, PluginInstallations) and the Namespaces, the registry's among them.
  writeFileSync(join(dir, "shared.yaml"), kustomizeYaml("deploy/k8s/shared"));
  await Promise.all([applyManifests(first, [join(dir, "shared.yaml")]), applyManifests(second, [join(dir, "shared.yaml")])]);
  writeFileSync(join(dir, "ca.pem"), ci.ca);
  await expectStatus(rawRequest(first, "POST", PROJECTS, project("alpha", { dev: [ciSubject("repo:acme/app:*")] })), 201);
  // `beta` names the provider too: without it the second server's index would refuse the token (401) before any Project lookup.
  await expectStatus(rawRequest(second, "POST", PROJECTS, project("beta", { dev: [ciSubject("repo:acme/other:*")] })), 201);
  await expectStatus(rawRequest(first, "POST", SECRETS, registration(first)), 201);
  const config = testConfig({
    clusters: [{ id: ids.cluster, kubeconfig: first.kubeconfigPath }],
    clusterRegistry: { namespace: REGISTRY_NAMESPACE, kubeconfig: first.kubeconfigPath },
    konfidence: { cluster: { clusterId: KONFIDENCE_CLUSTER }, providers: { allowList: [ci.endpoint], caFile: join(dir, "ca.pem") } },
  });
  ports = await connectPorts(config, createLogging("warn").logger);
  // Registered with the registry's first list: readiness waits for its Projects.
  await waitFor(async () => ports.ready(), 60_000);
  server = await startTestServer(ports, config);
}, 240_000);

afterAll(async () => {
  await server?.stop();
  await Promise.all([first?.stop(), second?.stop(), ci?.stop()]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

function project(name: string, roleBindings: unknown) {
  return { apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: { name }, spec: { roleBindings } };
}
function ciSubject(sub: string) {
  return { jwks: { endpoint: ci.endpoint, audience: AUD, claims: { sub } } };
}

describe("a Konfidence cluster registered by Secret", () => {
  const stages = "/api/v1/projects/alpha/stages";
  const check = async () =>
    server.check({ method: "GET", path: stages, headers: { authorization: `Bearer ${await ci.sign(ciKey, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD })}` }, policy: "konfidence-api" });

  it("serves its Projects; re-pointed, lists them from the new server; removed, answers 503 and keeps the process ready", async () => {
    expect(await check()).toMatchObject({ allowed: true, set: { "x-konfidence-roles": "dev" } });
    expect(ports.indexSizes()).toContainEqual(expect.objectContaining({ index: "projects", clusterId: KONFIDENCE_CLUSTER, size: 1, synced: true }));

    // The same cluster id, another API server: the first server's `alpha` must not be served from memory.
    const current = (await rawRequest(first, "GET", `${SECRETS}/konfidence`, undefined)).json as { metadata: { resourceVersion: string } };
    const repointed = registration(second);
    await expectStatus(rawRequest(first, "PUT", `${SECRETS}/konfidence`, { ...repointed, metadata: { ...repointed.metadata, resourceVersion: current.metadata.resourceVersion } }), 200);
    await waitFor(async () => (await check()).reason === "project-not-found", 30_000);
    expect(await check()).toMatchObject({ allowed: false, http: 404, reason: "project-not-found" });

    await expectStatus(rawRequest(first, "DELETE", `${SECRETS}/konfidence`, undefined), 200);
    await waitFor(async () => (await check()).http === 503, 30_000);
    expect(await check()).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
    expect(ports.ready()).toBe(true);
  }, 120_000);
});
