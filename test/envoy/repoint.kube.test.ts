/**
 * Issue 46 §3: a registered cluster re-pointed to another API server while kube-api-proxy checks
 * are in flight. portcullis mints from the new server at once, Envoy applies the new CDS version
 * some time later; no allow may ever send a token to a server it was not minted by.
 *
 * Two real kube-apiservers, `first` (also the management cluster holding the Secret) and `second`;
 * each signs its ServiceAccount tokens with its own key and names itself as their issuer, so a
 * token's `iss` says which server minted it. A real gRPC client plays Envoy's CDS side (SotW,
 * ACKing every response at once, each resource decoded strictly with the vendored protos) and keeps
 * the Envoy clusters it has applied. Eight loops of UserToken checks run through portcullis's gRPC
 * port while the Secret's server moves first → second → first → second. For every allow, at the
 * moment it is answered: the Envoy cluster it names is one this Envoy has not applied yet (it would
 * answer 503: nowhere is not a wrong place) or one whose endpoint and CA are those of the server
 * that minted the token — and every name it ever names is advertised by CDS with exactly that server.
 * (OpenFGA's can_view is not what this is about: it is answered yes here.)
 */
import { Writable } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { KUBE_API_CLUSTER_HEADER } from "../../src/envoy/kube-api-upstream.ts";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { CLUSTER_TYPE_URL } from "../../src/deploy/cluster-discovery.ts";
import { LOAD_OPTIONS } from "../../src/envoy/protos.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { rawRequest, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids, userToken } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";

const NAMESPACE = "portcullis-clusters";
const CLUSTER = "7e7e7e7e-0000-4000-8000-00000000007e";
const USER_SA = { namespace: "fundament-system", name: `fundament-${ids.user}` };

type Json = Record<string, any>;
interface Any {
  type_url: string;
  value: Buffer;
}
interface Response {
  version_info: string;
  resources?: Any[];
  nonce: string;
}
/** Where an Envoy cluster goes: the endpoint's port (every server is on 127.0.0.1) and the CA it trusts. */
interface Endpoint {
  readonly port: number;
  readonly caPem: string;
}

let first: KubeApiserver;
let second: KubeApiserver;
let ports: ConnectedPorts;
let portcullis: TestServer;
let cdsClient: grpc.Client;

beforeAll(async () => {
  [first, second] = await Promise.all([startKubeApiserver(), startKubeApiserver()]);
  expect((await rawRequest(first, "POST", "/api/v1/namespaces", { metadata: { name: NAMESPACE } })).status).toBe(201);
  for (const api of [first, second]) {
    expect((await rawRequest(api, "POST", "/api/v1/namespaces", { metadata: { name: USER_SA.namespace } })).status).toBe(201);
    expect((await rawRequest(api, "POST", `/api/v1/namespaces/${USER_SA.namespace}/serviceaccounts`, { metadata: { name: USER_SA.name } })).status).toBe(201);
  }
  const config = testConfig({ clusters: [], clusterRegistry: { namespace: NAMESPACE, kubeconfig: first.kubeconfigPath } });
  ports = await connectPorts(config, pino({ level: "warn" }, new Writable({ write: (_c, _e, cb) => cb() })));
  portcullis = await startTestServer({ ...ports, canView: { canView: async () => true } }, config);
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as any;
  cdsClient = new loaded.envoy.service.cluster.v3.ClusterDiscoveryService(`127.0.0.1:${portcullis.server.grpcPort}`, grpc.credentials.createInsecure());
}, 180_000);

afterAll(async () => {
  cdsClient?.close();
  await portcullis?.stop();
  await ports?.stop();
  await Promise.all([first?.stop(), second?.stop()]);
});

async function pointAt(api: KubeApiserver): Promise<void> {
  const data = { clusterId: CLUSTER, server: api.url, "ca.crt": api.caPem, token: api.adminToken };
  const secret = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "repointed", namespace: NAMESPACE, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  };
  const path = `/api/v1/namespaces/${NAMESPACE}/secrets`;
  const replaced = await rawRequest(first, "PUT", `${path}/repointed`, secret);
  if (replaced.status === 404) expect((await rawRequest(first, "POST", path, secret)).status).toBe(201);
  else expect(replaced.status).toBe(200);
}

/** A Cluster resource decoded strictly: its type, and bytes that encode back to themselves (no unknown or malformed field). */
function decodeCluster(resource: Any): { name: string; endpoint: Endpoint } {
  if (resource.type_url !== CLUSTER_TYPE_URL) throw new Error(`not a Cluster: ${resource.type_url}`);
  const type = envoyRoot().lookupType("envoy.config.cluster.v3.Cluster");
  const message = type.decode(resource.value);
  if (!Buffer.from(type.encode(message).finish()).equals(Buffer.from(resource.value))) throw new Error("unknown or malformed fields in the Cluster");
  const cluster = type.toObject(message, { enums: String, longs: String, defaults: false }) as Json;
  const socket = cluster["transport_socket"].typed_config;
  const tlsType = envoyRoot().lookupType(socket.type_url.replace("type.googleapis.com/", ""));
  const tls = tlsType.toObject(tlsType.decode(socket.value), { enums: String, defaults: false }) as Json;
  const address = cluster["load_assignment"].endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
  expect(address.address).toBe("127.0.0.1");
  return { name: cluster["name"], endpoint: { port: address.port_value, caPem: tls["common_tls_context"].validation_context.trusted_ca.inline_string } };
}

const endpointOf = (api: KubeApiserver): Endpoint => ({ port: Number(new URL(api.url).port), caPem: api.caPem });
const issuerOf = (token: string) => (JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8")) as { iss: string }).iss;

it("every allow across three re-points names an Envoy cluster that goes to the server its token was minted by, or one Envoy does not have yet", async () => {
  // Envoy's side of CDS: what it has applied now, and every name ever advertised with its endpoint.
  let applied = new Map<string, Endpoint>();
  const advertised = new Map<string, Endpoint>();
  const cds = (cdsClient as any).StreamClusters() as grpc.ClientDuplexStream<object, Response>;
  cds.on("data", (response: Response) => {
    const next = new Map<string, Endpoint>();
    for (const resource of response.resources ?? []) {
      const { name, endpoint } = decodeCluster(resource);
      // A name is a digest of where it goes: it never goes anywhere else.
      expect(advertised.get(name) ?? endpoint).toEqual(endpoint);
      advertised.set(name, endpoint);
      next.set(name, endpoint);
    }
    applied = next;
    cds.write({ type_url: CLUSTER_TYPE_URL, version_info: response.version_info, response_nonce: response.nonce });
  });
  cds.on("error", () => {});
  cds.write({ type_url: CLUSTER_TYPE_URL, node: { id: "repoint-test", cluster: "test" } });

  await pointAt(first);
  await until(() => [...applied.values()].some((e) => e.port === endpointOf(first).port), 20_000, "Envoy to have the cluster on the first server");

  const bearer = `Bearer ${await userToken()}`;
  const allows: Array<{ iss: string; name: string; routedTo: Endpoint | undefined }> = [];
  const denials: string[] = [];
  let running = true;
  const loop = async () => {
    while (running) {
      const answer = await portcullis.check({ path: `/clusters/${CLUSTER}/api/v1/namespaces/default/configmaps`, headers: { authorization: bearer }, policy: "kube-api-proxy" });
      if (!answer.allowed) {
        denials.push(String(answer.reason));
        continue;
      }
      const token = answer.set["authorization"]!.replace(/^Bearer /, "");
      const name = answer.set[KUBE_API_CLUSTER_HEADER]!;
      // Read when the allow arrives, as Envoy routes it then.
      allows.push({ iss: issuerOf(token), name, routedTo: applied.get(name) });
    }
  };
  const loops = Array.from({ length: 8 }, loop);
  const servers = new Map([first, second].map((api) => [api.url, endpointOf(api)]));
  try {
    for (const api of [second, first, second]) {
      const before = allows.length;
      await pointAt(api);
      await until(() => allows.slice(before).some((a) => a.iss === api.url && a.routedTo !== undefined), 20_000, `allows routed to ${api.url}`);
      const settled = allows.length;
      await until(() => allows.length > settled + 50, 20_000, "more allows after the re-point");
    }
  } finally {
    running = false;
    await Promise.all(loops);
    cds.end();
  }

  const misrouted = allows.filter((a) => a.routedTo !== undefined && (a.routedTo.port !== servers.get(a.iss)?.port || a.routedTo.caPem !== (a.iss === first.url ? first.caPem : second.caPem)));
  expect(misrouted).toEqual([]);
  for (const a of allows) expect(advertised.get(a.name)).toEqual(servers.get(a.iss));
  const routed = allows.filter((a) => a.routedTo !== undefined);
  console.log(
    `${allows.length} allows (${routed.length} to a cluster Envoy had, ${allows.length - routed.length} to one it had not yet: 503), ${denials.length} denials (${[...new Set(denials)].join(", ")}), ${advertised.size} Envoy clusters advertised`,
  );
  expect(routed.some((a) => a.iss === first.url)).toBe(true);
  expect(routed.some((a) => a.iss === second.url)).toBe(true);
  // Only transient refusals while the pool is swapped: the gateway never answered with another cluster's token.
  expect(denials.every((reason) => reason === "dependency-unavailable")).toBe(true);
}, 120_000);
