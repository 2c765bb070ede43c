/**
 * The data-plane Envoy in the chart's shape, against a real kube-apiserver and a real OpenFGA: the
 * chart is rendered with its shipped values; its init container's arguments run the real CLI on
 * the rendered ConfigMap (test/support/data-plane.ts); portcullis runs as a real process with the
 * portcullis Deployment's `--config`, on that same file. Only what a cluster gives a pod is stood in
 * for: loopback listen addresses, the test API server's kubeconfig in place of the in-cluster
 * credentials, the test OpenFGA, the JWT secret's variable, and the cluster's DNS (the bootstrap's
 * portcullis address, the chart's portcullis-grpc Service, answered with 127.0.0.1); and the
 * deadlines are raised for a loaded two-core machine. No Envoy
 * binary exists here: Envoy's side is a gRPC client on the vendored protos that speaks to the
 * cluster and port the generated bootstrap names, as its `cds_config` says (State of the World or
 * Delta), with the bootstrap's node.
 *
 * A cluster registered by Secret reaches the Envoy over CDS (an envoy.config.cluster.v3.Cluster with
 * the API server's address and CA, no credential), and a
 * kube-api-proxy check for it is allowed naming that very Envoy cluster in the header the
 * bootstrap's `kube-api-registered` route takes its upstream from; re-pointed, the next allow names
 * a new Envoy cluster, which CDS then serves in place of the old one. The data plane's objects the
 * chart renders behind Istio and Envoy Gateway, and with every dataPlane value set, are accepted by
 * the API server (server-side dry run, strict; the shipped values' are, with the kit's, in
 * test/e2e/konfidence-and-manifests.test.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { CoreV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { KUBE_API_CLUSTER_HEADER } from "../../src/envoy/kube-api-upstream.ts";
import { decodeBootstrap, envoyRoot } from "../../src/envoy/bootstrap.ts";
import { CLUSTER_TYPE_URL } from "../../src/deploy/cluster-discovery.ts";
import { type AuthorizationClient, authorizationClient, LOAD_OPTIONS } from "../../src/envoy/protos.ts";
import { applyManifests, kubeConfig, type KubeApiserver, type OpenFGA, rawRequest, startKubeApiserver, startOpenFGA } from "../harness/index.ts";
import { find, runInitContainer, type DataPlaneRun } from "../support/data-plane.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { helmTemplate, RELEASE_NAMESPACE } from "../support/helm.ts";
import type { Manifest } from "../support/kustomize.ts";
import { freeAddresses, type PortcullisProcess, spawnPortcullisFile } from "../support/portcullis-process.ts";
import { pluginToken } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { MODEL_FILE, REVOCATION_CRD, seedKubernetes, seedOpenFga, users } from "./fundament-world.ts";

const REGISTERED = "a7a7a7a7-0000-4000-8000-0000000000a7";
const SERVED_WITHIN_MS = 20_000;

let api: KubeApiserver;
let fga: OpenFGA;
let dir: string;
let run: DataPlaneRun;
let bootstrap: Manifest;
let portcullis: PortcullisProcess;
let installationUid: string;
let envoyPort: number;
let client: AuthorizationClient;
const objects = helmTemplate({});

beforeAll(async () => {
  [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE })]);
  installationUid = (await seedKubernetes(api)).metadata!.uid!;
  await applyManifests(api, [REVOCATION_CRD]);
  const fgaClient = await seedOpenFga(fga);
  await fgaClient.write({ writes: [{ user: "organization:acme", relation: "owner", object: `cluster:${REGISTERED}` }] });
  const registry = (parse(find(objects, "ConfigMap", "portcullis-config")["data"]["config.yaml"]) as Manifest)["clusterRegistry"].namespace;
  await kubeConfig(api).makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: registry } } });

  dir = mkdtempSync(join(tmpdir(), "portcullis-data-plane-e2e-"));
  const addresses = await freeAddresses();
  run = await runInitContainer(objects, dir, (rendered) => standIn(rendered, addresses));
  expect(run.result).toMatchObject({ code: 0, stderr: "" });
  const decoded = decodeBootstrap(run.bootstrap);
  if (!decoded.ok) expect.fail(decoded.errors.join("\n"));
  bootstrap = parse(run.bootstrap) as Manifest;

  // portcullis as its Deployment runs it: the same ConfigMap key at the same path (runInitContainer checked).
  portcullis = spawnPortcullisFile(run.configFile, addresses);
  envoyPort = portcullisEndpoint().port;
  client = authorizationClient(`127.0.0.1:${envoyPort}`);
  await until(async () => (await readyz()) === 200, 60_000, "portcullis to be ready");
}, 240_000);

afterAll(async () => {
  client?.close();
  if (portcullis !== undefined) {
    portcullis.child.kill("SIGTERM");
    await Promise.race([portcullis.exited, new Promise((r) => setTimeout(r, 10_000))]);
    portcullis.kill();
  }
  await Promise.all([api?.stop(), fga?.stop()]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The rendered configuration with what the cluster would provide a pod put in by hand; the envoy section untouched. */
function standIn(rendered: string, addresses: { grpc: string; admin: string; internal: string }): string {
  const config = parse(rendered) as Manifest;
  config["listen"] = { grpc: addresses.grpc, admin: addresses.admin, internal: addresses.internal };
  config["tokens"].secrets = [{ env: "PORTCULLIS_SECRET" }];
  config["openfga"] = { ...config["openfga"], apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.modelId };
  delete config["openfga"].storeName;
  config["clusters"] = config["clusters"].map((c: Manifest) => ({ ...c, kubeconfig: api.kubeconfigPath }));
  config["clusterRegistry"] = { ...config["clusterRegistry"], kubeconfig: api.kubeconfigPath };
  config["revocations"] = { kubeconfig: api.kubeconfigPath };
  config["shutdown"] = { drainMs: 0 };
  // Deadlines for two cores shared with other suites (as test/e2e/cluster-registry.test.ts): a 503 here would mean the load, not a dependency.
  config["check"] = { ...config["check"], timeoutMs: 8_000 };
  config["openfga"].timeoutMs = 4_000;
  config["kube"] = { sar: { timeoutMs: 4_000 }, tokenRequest: { timeoutMs: 4_000 } };
  return stringify(config);
}

/** Where the bootstrap's CDS (and ext_authz) cluster points: the chart's Service name, and the port. */
function portcullisEndpoint(): { host: string; port: number } {
  const name = bootstrap["dynamic_resources"].cds_config.api_config_source.grpc_services[0].envoy_grpc.cluster_name;
  const cluster = bootstrap["static_resources"].clusters.find((c: Manifest) => c["name"] === name);
  const address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
  return { host: address.address, port: address.port_value };
}

async function readyz(): Promise<number> {
  try {
    return (await fetch(`http://${portcullis.addresses.admin}/readyz`)).status;
  } catch {
    return 0;
  }
}

/**
 * Envoy's CDS subscription as the bootstrap configures it: the node it names, State of the World
 * (StreamClusters) or Delta (DeltaClusters) as `api_type` says; every response kept, each ACKed.
 */
function subscribe(): { clusters(): Map<string, Manifest>; close(): void } {
  const source = bootstrap["dynamic_resources"].cds_config.api_config_source;
  expect(source.transport_api_version).toBe("V3");
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as any;
  const cds = new loaded.envoy.service.cluster.v3.ClusterDiscoveryService(`127.0.0.1:${envoyPort}`, grpc.credentials.createInsecure());
  const delta = source.api_type === "DELTA_GRPC";
  const call = delta ? cds.DeltaClusters() : cds.StreamClusters();
  const type = envoyRoot().lookupType("envoy.config.cluster.v3.Cluster");
  const current = new Map<string, Manifest>();
  call.on("data", (response: Manifest) => {
    if (!delta) current.clear();
    for (const removed of response["removed_resources"] ?? []) current.delete(removed);
    for (const resource of (response["resources"] ?? []) as Manifest[]) {
      const any = delta ? resource["resource"] : resource;
      if (any["type_url"] !== CLUSTER_TYPE_URL) throw new Error(`CDS sent a ${any["type_url"]}`);
      const cluster = type.toObject(type.decode(any["value"]), { longs: String, enums: String, bytes: String }) as Manifest;
      current.set(cluster["name"], cluster);
    }
    call.write(delta ? { type_url: CLUSTER_TYPE_URL, response_nonce: response["nonce"] } : { type_url: CLUSTER_TYPE_URL, version_info: response["version_info"], response_nonce: response["nonce"] });
  });
  call.on("error", () => {});
  call.write({ type_url: CLUSTER_TYPE_URL, node: bootstrap["node"] });
  return {
    clusters: () => current,
    close() {
      call.cancel();
      cds.close();
    },
  };
}

async function check(cluster: string) {
  const token = await pluginToken({ sub: users.alice, cluster_id: cluster, installation_id: installationUid });
  const path = `/clusters/${cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`;
  return summarize((await client.check(envoyCheckRequest({ path, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" }), { deadline: Date.now() + 20_000 })) as CheckResponse);
}

describe("the data-plane Envoy in the chart's shape", () => {
  it("asks the chart's portcullis-grpc Service, on the port portcullis listens on, for CDS and ext_authz", () => {
    expect(portcullisEndpoint().host).toBe(`portcullis-grpc.${RELEASE_NAMESPACE}.svc.cluster.local`);
    expect(`127.0.0.1:${portcullisEndpoint().port}`).toBe(portcullis.addresses.grpc);
  });

  it("a cluster registered by Secret reaches it over CDS, and its allowed requests name that Envoy cluster for the registered route; so does a re-point", async () => {
    const subscription = subscribe();
    try {
      expect(await check(REGISTERED)).toMatchObject({ allowed: false, http: 404, reason: "unknown-cluster" });
      const registry = (parse(run.configText) as Manifest)["clusterRegistry"].namespace;
      const secret = {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "registered-a7", namespace: registry, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
        stringData: { clusterId: REGISTERED, server: api.url, "ca.crt": api.caPem, token: api.adminToken },
      };
      expect((await rawRequest(api, "POST", `/api/v1/namespaces/${registry}/secrets`, secret)).status).toBe(201);

      let allowed: Awaited<ReturnType<typeof check>> | undefined;
      await until(
        async () => {
          const answer = await check(REGISTERED);
          if (answer.allowed) allowed = answer;
          return answer.allowed;
        },
        SERVED_WITHIN_MS,
        "the registered cluster to be served",
      );
      const envoyCluster = allowed!.allowed ? allowed!.set[KUBE_API_CLUSTER_HEADER] : undefined;
      expect(envoyCluster).toMatch(/^kube-api-/);
      // CDS may come a push after the first allowed check.
      await until(() => subscription.clusters().has(envoyCluster!), SERVED_WITHIN_MS, "CDS to serve the registered cluster");
      const served = subscription.clusters().get(envoyCluster!)!;
      const url = new URL(api.url);
      expect(served["load_assignment"].endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toMatchObject({ address: url.hostname, port_value: Number(url.port) });
      // TLS to the API server checked against the Secret's CA; no credential (Envoy forwards the token portcullis put in Authorization).
      const tlsType = envoyRoot().lookupType("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext");
      expect(served["transport_socket"].typed_config.type_url).toBe(`type.googleapis.com/${tlsType.fullName.slice(1)}`);
      const tls = tlsType.toObject(tlsType.decode(Buffer.from(served["transport_socket"].typed_config.value, "base64")), { enums: String }) as Manifest;
      expect(tls["common_tls_context"].validation_context.trusted_ca).toEqual({ inline_string: api.caPem });
      expect(JSON.stringify(served) + JSON.stringify(tls)).not.toContain(api.adminToken);

      // The bootstrap's route for registered clusters takes its upstream from that header, for this path.
      const routes = bootstrap["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts.flatMap((v: Manifest) => v["routes"]);
      const registered = routes.find((r: Manifest) => r["name"] === "kube-api-registered");
      expect(registered.route.cluster_header).toBe(KUBE_API_CLUSTER_HEADER);
      expect(new RegExp(registered.match.safe_regex.regex).test(`/clusters/${REGISTERED}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`)).toBe(true);

      // Re-pointed (the name its certificate is checked for; kube-apiserver's self-signed one carries "kubernetes"):
      // a new Envoy cluster, named by the next allow, served by CDS; the old one retires once this Envoy has acknowledged it.
      const repointed = { ...secret, stringData: { ...secret.stringData, "tls-server-name": "kubernetes" } };
      expect((await rawRequest(api, "PUT", `/api/v1/namespaces/${registry}/secrets/registered-a7`, repointed)).status).toBe(200);
      let next: string | undefined;
      await until(
        async () => {
          const answer = await check(REGISTERED);
          next = answer.allowed ? answer.set[KUBE_API_CLUSTER_HEADER] : undefined;
          return next !== undefined && next !== envoyCluster;
        },
        SERVED_WITHIN_MS,
        "the re-pointed cluster to be named",
      );
      await until(() => subscription.clusters().has(next!) && !subscription.clusters().has(envoyCluster!), SERVED_WITHIN_MS, "CDS to serve the re-pointed cluster alone");
    } finally {
      subscription.close();
    }
  }, 90_000);
});

/** Server-side dry run (create, strict field validation) of the data plane's objects in `objects`; the refusals. */
async function dryRun(objects: Manifest[]): Promise<string[]> {
  const refused: string[] = [];
  for (const obj of objects.filter((o) => o["metadata"].labels?.["app.kubernetes.io/component"] === "data-plane")) {
    const plural = { Deployment: "apps/v1/deployments", Service: "v1/services", PodDisruptionBudget: "policy/v1/poddisruptionbudgets", NetworkPolicy: "networking.k8s.io/v1/networkpolicies" }[obj["kind"] as string]!;
    const [group, version, resource] = plural.split("/").length === 3 ? plural.split("/") : ["", ...plural.split("/")];
    const path = `${group === "" ? "/api" : `/apis/${group}`}/${version}/namespaces/${RELEASE_NAMESPACE}/${resource}`;
    const res = await rawRequest(api, "POST", `${path}?dryRun=All&fieldValidation=Strict`, obj);
    if (res.status !== 201) refused.push(`${obj["kind"]}/${obj["metadata"].name}: ${res.status} ${(res.json as { message?: string })?.message}`);
  }
  return refused;
}

describe("the API server accepts the data plane", () => {
  it.each(["istio", "envoyGateway"] as const)("behind %s (server-side dry run, strict field validation)", async (mode) => {
    const config = parse(find(objects, "ConfigMap", "portcullis-config")["data"]["config.yaml"]) as Manifest;
    const rendered = helmTemplate({
      config: { check: { ...config["check"], policyFrom: "request" } },
      gateway: { mode, name: "fundament", namespace: "fundament-gateway", ...(mode === "envoyGateway" ? { proxyNamespace: "envoy-gateway-system" } : {}) },
    });
    expect(rendered.filter((o) => o["metadata"].labels?.["app.kubernetes.io/component"] === "data-plane")).toHaveLength(7);
    expect(await dryRun(rendered)).toEqual([]);
  });

  it("with every dataPlane value set (server-side dry run, strict field validation)", async () => {
    const variant = helmTemplate({
      dataPlane: {
        image: { repository: "registry.example/envoy", tag: "v1.37.0", pullPolicy: "Always" },
        replicaCount: 3,
        service: { type: "LoadBalancer" },
        fundamentServices: true,
        resources: { requests: { cpu: "1", memory: "1Gi" }, limits: { memory: "2Gi" } },
        volumes: [{ name: "listener-tls", secret: { secretName: "fundament-envoy-tls" } }],
        volumeMounts: [{ name: "listener-tls", mountPath: "/etc/envoy/tls", readOnly: true }],
      },
    });
    const dataPlane = variant.filter((o) => o["metadata"].labels?.["app.kubernetes.io/component"] === "data-plane");
    expect(dataPlane.map((o) => o["kind"]).sort()).toEqual(["Deployment", "NetworkPolicy", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service", "Service"]);
    expect(await dryRun(variant)).toEqual([]);
  });

  it("and refuses what it refuses (the dry run is not a rubber stamp)", async () => {
    const bad = structuredClone(objects.filter((o) => o["kind"] === "Service" && o["metadata"].name === "kube-api-proxy"));
    bad[0]!["spec"].ports[0].targetPot = "public";
    expect(await dryRun(bad)).toEqual([expect.stringMatching(/unknown field "spec.ports\[0\].targetPot"/)]);
  });
});
