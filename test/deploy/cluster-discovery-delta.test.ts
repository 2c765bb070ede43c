/**
 * portcullis's CDS as Envoy speaks it incrementally (DeltaClusters) and in State of the World
 * (StreamClusters), on a real gRPC server with real gRPC clients (grpc-js + proto-loader over the
 * vendored protos). The registered clusters are put and removed by hand (the registry's side is
 * test/deploy/cluster-discovery.kube.test.ts). Every resource received is decoded strictly into
 * Envoy's Cluster. Delta: the first response holds everything (or what the client lacks of the
 * versions it says it holds), each later one only what changed — added or changed resources, and
 * removed names — per stream, with nonces; ACK, NACK and explicit subscriptions. A re-pointed
 * cluster's old Envoy cluster is withdrawn once every stream ACKed its successor, or at the bound
 * when one stays silent.
 */
import { Writable } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { registeredEnvoyCluster } from "../../src/envoy/kube-api-upstream.ts";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { CLUSTER_TYPE_URL, ClusterDiscovery, clusterDiscoveryService } from "../../src/deploy/cluster-discovery.ts";
import { LOAD_OPTIONS } from "../../src/envoy/protos.ts";
import type { ClusterCredentials } from "../../src/kube-fleet/clusters.ts";

const ENVOY_CA_FILE = "/etc/envoy/system-ca.crt";
const RETIRE_AFTER_MS = 1_500;
const A = "aaaaaaaa-0000-4000-8000-00000000000a";
const B = "bbbbbbbb-0000-4000-8000-00000000000b";
const C = "cccccccc-0000-4000-8000-00000000000c";

type Json = Record<string, any>;
interface Any {
  type_url: string;
  value: Buffer;
}
interface DeltaResponse {
  system_version_info: string;
  resources?: Array<{ name: string; version: string; resource: Any }>;
  removed_resources?: string[];
  type_url: string;
  nonce: string;
}
interface SotwResponse {
  version_info: string;
  resources?: Any[];
  nonce: string;
}

const logLines: Array<Record<string, unknown>> = [];
let server: grpc.Server;
let cds: ClusterDiscovery;
let client: any;

const credentials = (id: string, server: string, extra: Partial<ClusterCredentials> = {}): ClusterCredentials => ({ id, server, credential: { token: "never-sent" }, ...extra });
const nameOf = (id: string, server: string, extra: { caPem?: string; tlsServerName?: string } = {}) => registeredEnvoyCluster({ id, server, ...extra });

beforeAll(async () => {
  const logger = pino({ level: "debug" }, new Writable({ write: (chunk, _enc, cb) => (logLines.push(JSON.parse(String(chunk))), cb()) }));
  cds = new ClusterDiscovery({ envoyCaFile: ENVOY_CA_FILE, logger, coalesceMs: 20, retireAfterMs: RETIRE_AFTER_MS });
  server = new grpc.Server();
  server.addService(clusterDiscoveryService(), cds.handlers());
  const port = await new Promise<number>((resolvePort, reject) => server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolvePort(p))));
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as any;
  client = new loaded.envoy.service.cluster.v3.ClusterDiscoveryService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
});

afterAll(async () => {
  client?.close();
  cds?.close();
  await new Promise<void>((done) => server.tryShutdown(() => done()));
});

/** A Cluster decoded strictly: its type, and bytes that encode back to themselves (no unknown or malformed field). */
function decodeCluster(resource: Any): Json {
  if (resource.type_url !== CLUSTER_TYPE_URL) throw new Error(`not a Cluster: ${resource.type_url}`);
  const type = envoyRoot().lookupType("envoy.config.cluster.v3.Cluster");
  const message = type.decode(resource.value);
  if (!Buffer.from(type.encode(message).finish()).equals(Buffer.from(resource.value))) throw new Error("unknown or malformed fields in the Cluster");
  return type.toObject(message, { enums: String, longs: String, defaults: false }) as Json;
}

/** One stream, as Envoy's side of it. */
class Stream<R> {
  readonly call: grpc.ClientDuplexStream<object, R>;
  readonly #received: R[] = [];
  #waiting: (() => void) | undefined;
  error: grpc.ServiceError | undefined;

  constructor(method: "DeltaClusters" | "StreamClusters") {
    this.call = client[method]();
    this.call.on("data", (r: R) => (this.#received.push(r), this.#waiting?.()));
    this.call.on("error", (err: grpc.ServiceError) => ((this.error = err), this.#waiting?.()));
  }

  send(request: Json): void {
    this.call.write({ type_url: CLUSTER_TYPE_URL, ...request });
  }

  /** The next response, or undefined if none comes within `ms`. */
  async next(ms = 5_000): Promise<R | undefined> {
    if (this.#received.length === 0) {
      await new Promise<void>((resolveWait) => {
        const timer = setTimeout(resolveWait, ms);
        this.#waiting = () => (clearTimeout(timer), resolveWait());
      });
      this.#waiting = undefined;
    }
    return this.#received.shift();
  }

  async expectNext(ms = 5_000): Promise<R> {
    const response = await this.next(ms);
    if (response === undefined) throw new Error(`no response within ${ms} ms${this.error ? `: ${this.error.message}` : ""}`);
    return response;
  }

  close(): void {
    this.call.end();
  }
}

const delta = () => new Stream<DeltaResponse>("DeltaClusters");
const sotw = () => new Stream<SotwResponse>("StreamClusters");

/** A Delta response as names: each resource's name checked against the Cluster it carries, and its version. */
function read(response: DeltaResponse): { added: Record<string, Json>; versions: Record<string, string>; removed: string[] } {
  expect(response.type_url).toBe(CLUSTER_TYPE_URL);
  const added: Record<string, Json> = {};
  const versions: Record<string, string> = {};
  for (const r of response.resources ?? []) {
    const cluster = decodeCluster(r.resource);
    expect(cluster["name"]).toBe(r.name);
    expect(r.version).toMatch(/^[0-9a-f]{64}$/);
    added[r.name] = cluster;
    versions[r.name] = r.version;
  }
  return { added, versions, removed: [...(response.removed_resources ?? [])].sort() };
}

const sotwNames = (response: SotwResponse) => (response.resources ?? []).map((r) => decodeCluster(r)["name"] as string).sort();
const endpointOf = (cluster: Json) => cluster["load_assignment"].endpoints[0].lb_endpoints[0].endpoint.address.socket_address;

/** Lets the coalesced push go out. */
const settle = () => new Promise((r) => setTimeout(r, 150));

let open: Array<Stream<unknown>> = [];
const track = <S extends Stream<any>>(s: S): S => (open.push(s), s);
afterEach(async () => {
  for (const s of open) s.close();
  open = [];
  for (const id of [A, B, C]) cds.remove(id);
  await settle();
});

describe("DeltaClusters", () => {
  it("first response: every cluster (wildcard); then only what changed — one added, one removed — with a new nonce each; SotW gets the same set whole", async () => {
    cds.put(credentials(A, "https://10.0.0.1:6443", { caPem: "PEM-A" }));
    cds.put(credentials(B, "https://api.b.example"));
    await settle();
    const envoy = track(delta());
    const whole = track(sotw());
    envoy.send({ node: { id: "delta-envoy", cluster: "test" } });
    whole.send({ node: { id: "sotw-envoy", cluster: "test" } });
    const first = await envoy.expectNext();
    const seen = read(first);
    expect(Object.keys(seen.added).sort()).toEqual([nameOf(A, "https://10.0.0.1:6443", { caPem: "PEM-A" }), nameOf(B, "https://api.b.example")].sort());
    expect(seen.removed).toEqual([]);
    expect(endpointOf(seen.added[nameOf(B, "https://api.b.example")]!)).toEqual({ address: "api.b.example", port_value: 443 });
    const firstWhole = await whole.expectNext();
    expect(sotwNames(firstWhole)).toEqual(Object.keys(seen.added).sort());
    expect(first.system_version_info).toBe(firstWhole.version_info);
    envoy.send({ response_nonce: first.nonce });
    whole.send({ version_info: firstWhole.version_info, response_nonce: firstWhole.nonce });

    cds.put(credentials(C, "https://10.0.0.3:6443"));
    const added = await envoy.expectNext();
    expect(added.nonce).not.toBe(first.nonce);
    expect(Object.keys(read(added).added)).toEqual([nameOf(C, "https://10.0.0.3:6443")]);
    expect(read(added).removed).toEqual([]);
    expect(sotwNames(await whole.expectNext())).toHaveLength(3);
    envoy.send({ response_nonce: added.nonce });

    cds.remove(B);
    const removed = await envoy.expectNext();
    expect(read(removed)).toEqual({ added: {}, versions: {}, removed: [nameOf(B, "https://api.b.example")] });
    envoy.send({ response_nonce: removed.nonce });
    // A credential rotated alone changes nothing Envoy holds: nothing is sent.
    cds.put(credentials(A, "https://10.0.0.1:6443", { caPem: "PEM-A", credential: { token: "rotated" } }));
    expect(await envoy.next(500)).toBeUndefined();
  });

  it("a reconnecting Envoy names the versions it holds: it is sent only what differs, and told what is gone", async () => {
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    cds.put(credentials(B, "https://10.0.0.2:6443"));
    await settle();
    const before = track(delta());
    before.send({});
    const { versions } = read(await before.expectNext());
    before.close();
    const envoy = track(delta());
    const gone = nameOf(C, "https://10.9.9.9:6443");
    envoy.send({ initial_resource_versions: { [nameOf(A, "https://10.0.0.1:6443")]: versions[nameOf(A, "https://10.0.0.1:6443")]!, [nameOf(B, "https://10.0.0.2:6443")]: "stale", [gone]: "whatever" } });
    const first = read(await envoy.expectNext());
    expect(Object.keys(first.added)).toEqual([nameOf(B, "https://10.0.0.2:6443")]);
    expect(first.removed).toEqual([gone]);
  });

  it("a reconnecting Envoy that holds everything still gets a (empty) first response, which it ACKs", async () => {
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    await settle();
    const before = track(delta());
    before.send({});
    const { versions } = read(await before.expectNext());
    const envoy = track(delta());
    envoy.send({ initial_resource_versions: versions });
    const first = await envoy.expectNext();
    expect(read(first)).toEqual({ added: {}, versions: {}, removed: [] });
    envoy.send({ response_nonce: first.nonce });
    expect(await envoy.next(300)).toBeUndefined();
  });

  it("explicit subscriptions: only the names asked for, more when asked, none after unsubscribing", async () => {
    const a = nameOf(A, "https://10.0.0.1:6443");
    const b = nameOf(B, "https://10.0.0.2:6443");
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    cds.put(credentials(B, "https://10.0.0.2:6443"));
    await settle();
    const envoy = track(delta());
    envoy.send({ resource_names_subscribe: [a] });
    const first = await envoy.expectNext();
    expect(Object.keys(read(first).added)).toEqual([a]);
    envoy.send({ response_nonce: first.nonce, resource_names_subscribe: [b] });
    const more = await envoy.expectNext();
    expect(Object.keys(read(more).added)).toEqual([b]);
    envoy.send({ response_nonce: more.nonce, resource_names_unsubscribe: [a] });
    expect(await envoy.next(300)).toBeUndefined();
    // A changed cluster no longer subscribed to is not sent.
    cds.put(credentials(C, "https://10.0.0.3:6443"));
    expect(await envoy.next(500)).toBeUndefined();
  });

  it("a NACK is logged with Envoy's reason and the rejected resources are not sent again; the next change is", async () => {
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    await settle();
    const envoy = track(delta());
    envoy.send({});
    const first = await envoy.expectNext();
    envoy.send({ response_nonce: first.nonce, error_detail: { code: 3, message: "delta-test: rejected" } });
    await settle();
    expect(logLines.find((l) => l["error"] === "delta-test: rejected")).toMatchObject({ msg: "CDS: Envoy rejected the registered clusters (NACK)", delta: true, code: 3 });
    expect(await envoy.next(300)).toBeUndefined();
    // A nonce never sent is neither an ACK nor a NACK.
    envoy.send({ response_nonce: "999", error_detail: { code: 3, message: "delta-test: unknown nonce" } });
    await settle();
    expect(logLines.some((l) => l["error"] === "delta-test: unknown nonce")).toBe(false);
    cds.put(credentials(B, "https://10.0.0.2:6443"));
    expect(Object.keys(read(await envoy.expectNext()).added)).toEqual([nameOf(B, "https://10.0.0.2:6443")]);
  });

  it("refuses a stream asking for another resource type", async () => {
    const envoy = track(delta());
    envoy.send({ type_url: "type.googleapis.com/envoy.config.listener.v3.Listener" });
    expect(await envoy.next(2_000)).toBeUndefined();
    expect(envoy.error?.code).toBe(grpc.status.INVALID_ARGUMENT);
  });
});

describe("a re-pointed cluster's old Envoy cluster", () => {
  it("is sent beside the new one, and withdrawn once every stream (Delta and SotW) ACKed the version carrying the new one", async () => {
    const before = nameOf(A, "https://10.0.0.1:6443");
    const after = nameOf(A, "https://10.0.0.9:6443");
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    await settle();
    const envoy = track(delta());
    const whole = track(sotw());
    envoy.send({});
    whole.send({});
    envoy.send({ response_nonce: (await envoy.expectNext()).nonce });
    const w0 = await whole.expectNext();
    whole.send({ version_info: w0.version_info, response_nonce: w0.nonce });

    cds.put(credentials(A, "https://10.0.0.9:6443"));
    const repointed = await envoy.expectNext();
    expect(Object.keys(read(repointed).added)).toEqual([after]);
    expect(read(repointed).removed).toEqual([]);
    expect(endpointOf(read(repointed).added[after]!)).toEqual({ address: "10.0.0.9", port_value: 6443 });
    const w1 = await whole.expectNext();
    expect(sotwNames(w1)).toEqual([before, after].sort());
    expect(cds.served()).toEqual([before, after].sort());
    // Delta ACKs; the SotW Envoy has not yet: the old name stays.
    envoy.send({ response_nonce: repointed.nonce });
    expect(await envoy.next(400)).toBeUndefined();
    whole.send({ version_info: w1.version_info, response_nonce: w1.nonce });
    expect(read(await envoy.expectNext()).removed).toEqual([before]);
    expect(sotwNames(await whole.expectNext())).toEqual([after]);
  });

  it("is withdrawn at the bound when a stream never answers (a NACK counts as no answer), with a warning", async () => {
    const before = nameOf(A, "https://10.0.0.1:6443");
    const after = nameOf(A, "https://10.0.0.9:6443");
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    await settle();
    const silent = track(delta());
    const rejecting = track(sotw());
    silent.send({});
    rejecting.send({});
    await silent.expectNext();
    const r0 = await rejecting.expectNext();
    rejecting.send({ version_info: r0.version_info, response_nonce: r0.nonce });
    cds.put(credentials(A, "https://10.0.0.9:6443"));
    const started = Date.now();
    await silent.expectNext();
    const r1 = await rejecting.expectNext();
    rejecting.send({ version_info: r0.version_info, response_nonce: r1.nonce, error_detail: { code: 13, message: "no" } });
    const withdrawn = read(await silent.expectNext(RETIRE_AFTER_MS + 2_000));
    expect(Date.now() - started).toBeGreaterThanOrEqual(RETIRE_AFTER_MS - 50);
    expect(withdrawn.removed).toEqual([before]);
    expect(sotwNames(await rejecting.expectNext())).toEqual([after]);
    expect(logLines.some((l) => l["envoy_cluster"] === before && String(l["msg"]).includes("deadline"))).toBe(true);
  });

  it("with no Envoy on the replica, goes with the next version; an unregistered cluster goes at once with every name it had", async () => {
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    await settle();
    cds.put(credentials(A, "https://10.0.0.9:6443"));
    await settle();
    await settle();
    expect(cds.served()).toEqual([nameOf(A, "https://10.0.0.9:6443")]);

    const envoy = track(delta());
    envoy.send({});
    envoy.send({ response_nonce: (await envoy.expectNext()).nonce });
    cds.put(credentials(A, "https://10.0.0.1:6443"));
    expect(Object.keys(read(await envoy.expectNext()).added)).toEqual([nameOf(A, "https://10.0.0.1:6443")]);
    cds.remove(A);
    expect(cds.served()).toEqual([]);
    expect(read(await envoy.expectNext()).removed).toEqual([nameOf(A, "https://10.0.0.1:6443"), nameOf(A, "https://10.0.0.9:6443")].sort());
  });
});
