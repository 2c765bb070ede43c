/**
 * The server's CDS service (cluster-discovery.ts clusterDiscoveryService) reads and writes its
 * messages with protobufjs, without @grpc/proto-loader's conversion to plain objects. Envoy reads the
 * wire, so each direction is held to proto-loader's reading of the same vendored cds.proto: a
 * DiscoveryRequest reads the same in every field the stream handler looks at, and a
 * DiscoveryResponse is the same bytes. The handler's behaviour on a real stream is
 * cluster-discovery.kube.test.ts's.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { describe, expect, it } from "vitest";
import { CLUSTER_TYPE_URL, clusterDiscoveryService } from "../../src/deploy/cluster-discovery.ts";
import { LOAD_OPTIONS } from "../../src/envoy/protos.ts";

const server = clusterDiscoveryService();
const reference = (
  grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as unknown as {
    envoy: { service: { cluster: { v3: { ClusterDiscoveryService: grpc.ServiceClientConstructor } } } };
  }
).envoy.service.cluster.v3.ClusterDiscoveryService.service;

interface Request {
  version_info?: string;
  type_url?: string;
  response_nonce?: string;
  error_detail?: { code?: number; message?: string } | null;
}

/** The fields ClusterDiscovery reads, as it reads them (absent: "" and null). */
function handlerView(request: Request) {
  return {
    version_info: request.version_info ?? "",
    type_url: request.type_url ?? "",
    response_nonce: request.response_nonce ?? "",
    error_detail: request.error_detail ? { code: request.error_detail.code ?? 0, message: request.error_detail.message ?? "" } : null,
  };
}

describe("the CDS service definition", () => {
  it("has every method of the proto, at proto-loader's paths and stream kinds", () => {
    const shape = (definition: grpc.ServiceDefinition) =>
      Object.fromEntries(Object.entries(definition).map(([name, m]) => [name, { path: m.path, requestStream: m.requestStream, responseStream: m.responseStream }]));
    expect(shape(server)).toEqual(shape(reference));
    expect(Object.keys(server).sort()).toEqual(["DeltaClusters", "FetchClusters", "StreamClusters"]);
  });

  it.each<{ name: string; message: Request }>([
    { name: "Envoy's first request", message: { type_url: CLUSTER_TYPE_URL } },
    { name: "an ACK", message: { version_info: "abc", response_nonce: "3", type_url: CLUSTER_TYPE_URL } },
    { name: "a NACK", message: { version_info: "abc", response_nonce: "4", type_url: CLUSTER_TYPE_URL, error_detail: { code: 3, message: "rejected" } } },
    { name: "a NACK with an empty status", message: { response_nonce: "4", error_detail: {} } },
    { name: "another type", message: { type_url: "type.googleapis.com/envoy.config.listener.v3.Listener" } },
    { name: "empty", message: {} },
  ])("a DiscoveryRequest reads the same as through proto-loader: $name", ({ message }) => {
    const bytes = reference["StreamClusters"]!.requestSerialize(message);
    const ours = handlerView(server["StreamClusters"]!.requestDeserialize(bytes) as Request);
    expect(ours).toEqual(handlerView(reference["StreamClusters"]!.requestDeserialize(bytes) as Request));
    expect(ours.error_detail === null).toBe(message.error_detail === undefined);
  });

  it.each([
    { name: "no clusters", message: { version_info: "e3b0c44298fc1c14", resources: [], type_url: CLUSTER_TYPE_URL, nonce: "1" } },
    {
      name: "two clusters",
      message: {
        version_info: "0123456789abcdef",
        resources: [
          { type_url: CLUSTER_TYPE_URL, value: Buffer.from([0x0a, 0x03, 0x61, 0x62, 0x63]) },
          { type_url: CLUSTER_TYPE_URL, value: Buffer.from("\x0a\x0ekube-api-other", "latin1") },
        ],
        type_url: CLUSTER_TYPE_URL,
        nonce: "12",
      },
    },
  ])("a DiscoveryResponse is proto-loader's bytes: $name", ({ message }) => {
    const ours = server["StreamClusters"]!.responseSerialize(message);
    expect(ours.length).toBeGreaterThan(0);
    expect(ours.equals(reference["StreamClusters"]!.responseSerialize(message))).toBe(true);
    const back = reference["StreamClusters"]!.responseDeserialize(ours) as { resources?: Array<{ value: Buffer }>; nonce: string };
    expect(back.nonce).toBe(message.nonce);
    expect((back.resources ?? []).map((r) => r.value.toString("hex"))).toEqual(message.resources.map((r) => r.value.toString("hex")));
  });
});
