/**
 * portcullis's CDS, as Envoy speaks it: a real gRPC client (grpc-js + proto-loader over the vendored
 * protos) opens StreamClusters on the ext_authz port of a portcullis whose cluster registry watches
 * Secrets on a real kube-apiserver (the management cluster, and the registered clusters' API server
 * too). Each resource is decoded strictly into Envoy's Cluster proto; registering, changing and
 * removing Secrets pushes new versions; ACKs, stale nonces and NACKs are answered as SotW requires.
 */
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { CLUSTER_TYPE_URL, registeredClusterResource } from "../../src/deploy/cluster-discovery.ts";
import { LOAD_OPTIONS } from "../../src/envoy/protos.ts";
import { registeredEnvoyCluster } from "../../src/envoy/kube-api-upstream.ts";
import type { Clusters } from "../../src/kube-fleet/clusters.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import pino from "pino";
import { rawRequest, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { until } from "../support/wire-fakes/wired.ts";

const NAMESPACE = "portcullis";
const ENVOY_CA_FILE = "/etc/envoy/system-ca.crt";
const A = randomUUID();
const B = randomUUID();
const C = randomUUID();

type Json = Record<string, any>;
interface Any {
  type_url: string;
  value: Buffer;
}
interface Response {
  version_info: string;
  resources: Any[];
  type_url: string;
  nonce: string;
}

let api: KubeApiserver;
let ports: ConnectedPorts;
let portcullis: TestServer;
let client: grpc.Client;
/** The lines portcullis's ports (the registry, CDS) log. */
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  api = await startKubeApiserver();
  expect((await rawRequest(api, "POST", "/api/v1/namespaces", { metadata: { name: NAMESPACE } })).status).toBe(201);
  const config = testConfig({ clusters: [], clusterRegistry: { namespace: NAMESPACE, kubeconfig: api.kubeconfigPath, envoyCaFile: ENVOY_CA_FILE } });
  const logger = pino({ level: "info" }, new Writable({ write: (chunk, _enc, cb) => (logLines.push(JSON.parse(String(chunk))), cb()) }));
  ports = await connectPorts(config, logger);
  portcullis = await startTestServer(ports, config);
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as any;
  client = new loaded.envoy.service.cluster.v3.ClusterDiscoveryService(`127.0.0.1:${portcullis.server.grpcPort}`, grpc.credentials.createInsecure());
}, 180_000);

/** The last test stops portcullis itself. */
let stopped = false;

afterAll(async () => {
  client?.close();
  if (!stopped) await portcullis?.stop();
  await ports?.stop();
  await api?.stop();
});

/** A cluster Secret registering the kube-apiserver under `clusterId`. */
function clusterSecret(name: string, clusterId: string, fields: Record<string, string | undefined> = {}) {
  const data = Object.entries({ clusterId, server: api.url, "ca.crt": api.caPem, token: api.adminToken, ...fields }).filter((e): e is [string, string] => e[1] !== undefined);
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: NAMESPACE, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
    data: Object.fromEntries(data.map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  };
}

async function apply(secret: ReturnType<typeof clusterSecret>): Promise<void> {
  const path = `/api/v1/namespaces/${NAMESPACE}/secrets`;
  const replaced = await rawRequest(api, "PUT", `${path}/${secret.metadata.name}`, secret);
  if (replaced.status === 404) expect((await rawRequest(api, "POST", path, secret)).status).toBe(201);
  else expect(replaced.status).toBe(200);
}

async function remove(name: string): Promise<void> {
  expect((await rawRequest(api, "DELETE", `/api/v1/namespaces/${NAMESPACE}/secrets/${name}`, undefined)).status).toBe(200);
}

/** Envoy's side of one StreamClusters stream: what it sent and received. */
class EnvoyStream {
  readonly call: grpc.ClientDuplexStream<object, Response>;
  readonly #received: Response[] = [];
  #waiting: (() => void) | undefined;
  error: grpc.ServiceError | undefined;

  constructor() {
    this.call = (client as any).StreamClusters();
    this.call.on("data", (r: Response) => {
      this.#received.push(r);
      this.#waiting?.();
    });
    this.call.on("error", (err: grpc.ServiceError) => {
      this.error = err;
      this.#waiting?.();
    });
  }

  send(request: Json): void {
    this.call.write({ type_url: CLUSTER_TYPE_URL, node: { id: "test-envoy", cluster: "test" }, ...request });
  }

  /** The next response, or undefined if none comes within `ms`. */
  async next(ms = 10_000): Promise<Response | undefined> {
    if (this.#received.length === 0) {
      await new Promise<void>((resolveWait) => {
        const timer = setTimeout(resolveWait, ms);
        this.#waiting = () => (clearTimeout(timer), resolveWait());
      });
      this.#waiting = undefined;
    }
    return this.#received.shift();
  }

  /** Reads (and ACKs) responses until one satisfies `wanted`. */
  async until(wanted: (names: string[]) => boolean, what: string): Promise<Response> {
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const response = await this.next(deadline - Date.now());
      if (response === undefined) break;
      this.send({ version_info: response.version_info, response_nonce: response.nonce });
      if (wanted(names(response))) return response;
    }
    throw new Error(`no response with ${what}`);
  }

  close(): void {
    this.call.end();
  }
}

const CLUSTER = () => envoyRoot().lookupType("envoy.config.cluster.v3.Cluster");

/**
 * A resource decoded strictly: the Cluster type, wire types that parse, and bytes that encode back
 * to themselves (protobufjs skips unknown fields silently; they would not survive the round trip).
 */
function decodeCluster(resource: Any): Json {
  if (resource.type_url !== CLUSTER_TYPE_URL) throw new Error(`not a Cluster: ${resource.type_url}`);
  const type = CLUSTER();
  const message = type.decode(resource.value);
  if (!Buffer.from(type.encode(message).finish()).equals(Buffer.from(resource.value))) throw new Error("unknown or malformed fields in the Cluster");
  const cluster = type.toObject(message, { enums: String, longs: String, defaults: false }) as Json;
  const socket = cluster["transport_socket"].typed_config;
  const tlsType = envoyRoot().lookupType(socket.type_url.replace("type.googleapis.com/", ""));
  cluster["transport_socket"].typed_config = tlsType.toObject(tlsType.decode(socket.value), { enums: String, defaults: false });
  return cluster;
}

// With proto-loader's `defaults: false`, an empty repeated field is absent.
const names = (response: Response) => (response.resources ?? []).map((r) => decodeCluster(r)["name"] as string).sort();
/** The registered clusters a response serves: each Envoy cluster name is `kube-api-{id}-{digest}`. */
const ids = (response: Response) => names(response).map(clusterIdOf).sort();
const clusterIdOf = (name: string) => /^kube-api-([0-9a-f-]{36})-[0-9a-f]{32}$/.exec(name)?.[1] ?? `not a registered cluster: ${name}`;
const byName = (response: Response, id: string) => decodeCluster(response.resources.find((r) => clusterIdOf(decodeCluster(r)["name"]) === id)!);

describe("the strict resource decoder", () => {
  const good = (): Any => {
    const built = registeredClusterResource({ id: A, server: "https://10.0.0.1:6443", caPem: "PEM" }, ENVOY_CA_FILE);
    if (!("value" in built)) throw new Error("not built");
    return { type_url: CLUSTER_TYPE_URL, value: built.value };
  };
  it.each([
    { name: "a Cluster portcullis built", resource: good, ok: true },
    { name: "another type", resource: () => ({ ...good(), type_url: "type.googleapis.com/envoy.config.listener.v3.Listener" }), ok: false },
    // Field 9999, varint: unknown to Cluster.
    { name: "an unknown field", resource: () => ({ ...good(), value: Buffer.concat([good().value, Buffer.from([0xf8, 0xe1, 0x04, 0x01])]) }), ok: false },
    // Field 1 (name, a string) as a varint.
    { name: "a wrong wire type", resource: () => ({ ...good(), value: Buffer.concat([good().value, Buffer.from([0x08, 0x01])]) }), ok: false },
    { name: "truncated bytes", resource: () => ({ ...good(), value: good().value.subarray(0, good().value.length - 3) }), ok: false },
  ])("$name", ({ resource, ok }) => {
    if (ok) expect(clusterIdOf(decodeCluster(resource())["name"])).toBe(A);
    else expect(() => decodeCluster(resource())).toThrow();
  });
});

describe("registeredClusterResource", () => {
  it.each([
    { name: "a path after the server", server: "https://10.0.0.1:6443/k8s/clusters/x", unserved: "server-path" },
    { name: "a bare host", server: "https://api.example", unserved: undefined },
    { name: "a trailing slash", server: "https://api.example:6443/", unserved: undefined },
  ])("$name", ({ server, unserved }) => {
    const built = registeredClusterResource({ id: A, server }, ENVOY_CA_FILE);
    if (unserved === undefined) expect(built).toHaveProperty("value");
    else expect(built).toEqual({ unserved });
  });
});

describe("CDS on the ext_authz port, fed by the cluster registry", () => {
  it("sends the registered clusters on the first request: the API server, its CA inline, its name checked; never the credential", async () => {
    await apply(clusterSecret("cluster-a", A));
    const envoy = new EnvoyStream();
    envoy.send({});
    const first = await envoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a");
    expect(first.type_url).toBe(CLUSTER_TYPE_URL);
    expect(first.version_info).toMatch(/^[0-9a-f]{16}$/);
    const a = byName(first, A);
    const port = Number(new URL(api.url).port);
    expect(a["load_assignment"].endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({ address: "127.0.0.1", port_value: port });
    const tls = a["transport_socket"].typed_config;
    expect(tls.sni).toBeUndefined();
    expect(tls.common_tls_context.validation_context.trusted_ca).toEqual({ inline_string: api.caPem });
    expect(tls.common_tls_context.validation_context.match_typed_subject_alt_names).toEqual([{ san_type: "IP_ADDRESS", matcher: { exact: "127.0.0.1" } }]);
    for (const r of first.resources ?? []) expect(Buffer.from(r.value).includes(api.adminToken)).toBe(false);
    envoy.close();
  });

  it("pushes a new version to every open stream when a Secret registers a cluster, and another when it is removed", async () => {
    const envoy = new EnvoyStream();
    const otherEnvoy = new EnvoyStream();
    envoy.send({});
    otherEnvoy.send({});
    const before = await envoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a");
    await otherEnvoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a, on the other stream");
    await apply(clusterSecret("cluster-b", B, { "ca.crt": undefined, "tls-server-name": "kubernetes.default" }));
    const added = await envoy.until((n) => n.map(clusterIdOf).includes(B), "cluster b");
    expect((await otherEnvoy.until((n) => n.map(clusterIdOf).includes(B), "cluster b, on the other stream")).version_info).toBe(added.version_info);
    otherEnvoy.close();
    expect(ids(added)).toEqual([A, B].sort());
    expect(added.version_info).not.toBe(before.version_info);
    expect(added.nonce).not.toBe(before.nonce);
    // No ca.crt: the CA bundle Envoy's image has (clusterRegistry.envoyCaFile); tls-server-name is the SNI and the name checked.
    const tls = byName(added, B)["transport_socket"].typed_config;
    expect(tls.sni).toBe("kubernetes.default");
    expect(tls.common_tls_context.validation_context).toEqual({
      trusted_ca: { filename: ENVOY_CA_FILE },
      match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: "kubernetes.default" } }],
    });
    await remove("cluster-b");
    const removed = await envoy.until((n) => !n.map(clusterIdOf).includes(B), "cluster b gone");
    expect(ids(removed)).toEqual([A]);
    expect(removed.version_info).toBe(before.version_info);
    envoy.close();
  });

  it("a rotated credential alone is no new version (Envoy holds no credential); a new CA is a new Envoy cluster, the old one withdrawn once Envoy acknowledged it", async () => {
    const envoy = new EnvoyStream();
    envoy.send({});
    const current = await envoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a");
    await apply(clusterSecret("cluster-a", A, { token: `${api.adminToken}-rotated` }));
    await until(() => ports.clusters.has(A), 5_000, "cluster a");
    expect(await envoy.next(1_500)).toBeUndefined();
    await apply(clusterSecret("cluster-a", A, { "ca.crt": undefined }));
    // Another CA is another Envoy cluster, beside the old one until this Envoy acknowledges it.
    const changed = (await envoy.next())!;
    expect(changed.version_info).not.toBe(current.version_info);
    expect(ids(changed)).toEqual([A, A]);
    const trustedCa = (name: string) => decodeCluster(changed.resources.find((r) => decodeCluster(r)["name"] === name)!)["transport_socket"].typed_config.common_tls_context.validation_context.trusted_ca;
    const [oldName] = names(current).filter((n) => clusterIdOf(n) === A);
    const newName = names(changed).find((n) => n !== oldName)!;
    expect(trustedCa(oldName!)).toEqual({ inline_string: api.caPem });
    expect(trustedCa(newName)).toEqual({ filename: ENVOY_CA_FILE });
    expect(newName).toBe(registeredEnvoyCluster({ id: A, server: api.url }));
    expect((ports.clusters as Clusters).get(A)?.envoyCluster).toBe(newName);
    expect(await envoy.next(1_000)).toBeUndefined();
    envoy.send({ version_info: changed.version_info, response_nonce: changed.nonce });
    const retired = (await envoy.next())!;
    expect(names(retired)).toEqual([newName]);
    await apply(clusterSecret("cluster-a", A));
    await envoy.until((n) => n.length === 1 && n[0] === oldName, "cluster a back, alone");
    envoy.close();
  });

  it("logs a NACK with Envoy's reason and does not send the rejected version again; the next change is sent", async () => {
    const envoy = new EnvoyStream();
    envoy.send({});
    const rejected = await envoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a");
    // until() ACKed it; Envoy rejecting it instead (the same nonce, error_detail, the version it keeps):
    envoy.send({ version_info: "", response_nonce: rejected.nonce, error_detail: { code: 3, message: "cds-test: cluster kube-api-x rejected" } });
    await until(() => logLines.some((l) => l["error"] === "cds-test: cluster kube-api-x rejected"), 5_000, "the NACK logged");
    const line = logLines.find((l) => l["error"] === "cds-test: cluster kube-api-x rejected");
    expect(line).toMatchObject({ msg: "CDS: Envoy rejected the registered clusters (NACK)", rejected_version: rejected.version_info, code: 3 });
    expect(await envoy.next(1_500)).toBeUndefined();
    // A stale nonce (an older response's) is neither an ACK nor a NACK: nothing is sent.
    envoy.send({ version_info: "", response_nonce: "0" });
    expect(await envoy.next(1_000)).toBeUndefined();
    await apply(clusterSecret("cluster-c", C));
    const next = await envoy.until((n) => n.map(clusterIdOf).includes(C), "cluster c");
    expect(next.version_info).not.toBe(rejected.version_info);
    await remove("cluster-c");
    await envoy.until((n) => !n.map(clusterIdOf).includes(C), "cluster c gone");
    envoy.close();
  });

  it("refuses a stream asking for another resource type", async () => {
    const envoy = new EnvoyStream();
    envoy.send({ type_url: "type.googleapis.com/envoy.config.listener.v3.Listener" });
    expect(await envoy.next(5_000)).toBeUndefined();
    expect(envoy.error?.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("ends open streams at shutdown with OK (Envoy reconnects to another replica), never holding the server until the forced stop", async () => {
    const envoy = new EnvoyStream();
    envoy.send({});
    await envoy.until((n) => n.map(clusterIdOf).includes(A), "cluster a");
    const status = new Promise<number>((resolveStatus) => envoy.call.on("status", (s: grpc.StatusObject) => resolveStatus(s.code)));
    await portcullis.stop();
    stopped = true;
    expect(await status).toBe(grpc.status.OK);
  });
});
