/**
 * Envoy's Cluster Discovery Service for the registered clusters (kube/cluster-registry.ts):
 * one Envoy cluster `kube-api-<id>` per registered cluster, so kube-api-proxy's
 * `kube-api-registered` route (deploy/envoy-config.ts) has an upstream for it. State of the World,
 * transport v3, `envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters`.
 *
 * Served on the ext_authz port: the bootstrap points `cds_config` at the `portcullis` cluster, the
 * connection Envoy already has (HTTP/2, health-checked, TLS/mTLS when listen.tls is set), so CDS
 * needs no new route through the network and no new credential. The internal port is for the
 * plugin-controller, which Envoy does not reach.
 *
 * A resource holds the API server's address, its CA (the Secret's `ca.crt` inline, or the bundle
 * file Envoy's image ships) and the name its certificate must carry — never the Secret's
 * credential: Envoy forwards the ServiceAccount token portcullis put in Authorization.
 *
 * SotW: every response carries every registered cluster. A stream gets the current set on its
 * first request, then every new version (pushed to each open stream; changes within
 * PUSH_COALESCE_MS go out together, so the registry's first list of a thousand Secrets is one
 * response). A request answering the latest nonce is an ACK, or a NACK when it carries
 * error_detail: logged with Envoy's reason, and nothing is re-sent until the set changes (Envoy
 * keeps its last accepted version). A request with an older nonce is stale and ignored.
 */
import { createHash } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import type { ClusterCredentials } from "../kube/clusters.ts";
import { kubeApiCluster } from "../deploy/envoy-config.ts";
import { kubeApiEnvoyCluster } from "../authz/kube-api-upstream.ts";
import { decodeMessage, envoyRoot } from "./bootstrap.ts";
import { protobufService, protoRoot } from "./protos.ts";

export const CLUSTER_TYPE_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const CLUSTER_TYPE = "envoy.config.cluster.v3.Cluster";

/** Changes this close together go out as one version. */
export const PUSH_COALESCE_MS = 100;

/** What CDS serves of a registered cluster: its address and how it is verified, not its credential. */
export interface RegisteredUpstream {
  readonly id: string;
  readonly server: string;
  readonly caPem?: string | undefined;
  readonly tlsServerName?: string | undefined;
}

/** A cluster's resource, encoded once per change of it. */
interface Resource {
  readonly name: string;
  /** Hash of what it was built from: the version is made of these. */
  readonly digest: string;
  readonly value: Buffer;
}

export type UnservedUpstream = "server-path" | "not-a-cluster";

/**
 * The Envoy cluster of a registered cluster as CDS sends it, or why it cannot be served. Pure. A
 * server URL with a path (a proxy in front of the API server) is refused: the shared route
 * rewrites `/clusters/{id}/` to `/`, so that path would be lost.
 */
export function registeredClusterResource(upstream: RegisteredUpstream, envoyCaFile: string): { value: Buffer } | { unserved: UnservedUpstream; detail?: string } {
  const url = new URL(upstream.server);
  if (url.pathname !== "/" && url.pathname !== "") return { unserved: "server-path" };
  const cluster = kubeApiCluster(upstream.id, {
    server: url.origin,
    trustedCa: upstream.caPem === undefined ? { filename: envoyCaFile } : { inline_string: upstream.caPem },
    tlsServerName: upstream.tlsServerName,
  });
  // Strictly, as Envoy would read it: a mistake here is one cluster left out, never a stream Envoy rejects whole.
  const decoded = decodeMessage(CLUSTER_TYPE, cluster);
  if (!decoded.ok) return { unserved: "not-a-cluster", detail: decoded.errors.join("; ") };
  return { value: Buffer.from(envoyRoot().lookupType(CLUSTER_TYPE).encode(decoded.message).finish()) };
}

/** The version of a set of resources: changes exactly when a cluster comes, goes, or changes server, CA or name. */
export function versionOf(resources: Iterable<{ name: string; digest: string }>): string {
  const lines = [...resources].map((r) => `${r.name} ${r.digest}`).sort();
  return createHash("sha256").update(lines.join("\n")).digest("hex").slice(0, 16);
}

interface DiscoveryRequest {
  version_info?: string;
  type_url?: string;
  response_nonce?: string;
  error_detail?: { code?: number; message?: string } | null;
}

interface DiscoveryResponse {
  version_info: string;
  resources: Array<{ type_url: string; value: Buffer }>;
  type_url: string;
  nonce: string;
}

type Stream = grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

interface StreamState {
  readonly call: Stream;
  /** Set once Envoy's first request arrived: from then on it is sent every version. */
  started: boolean;
  sent: number;
  /** The nonce and version of the last response: only a request naming this nonce is an ACK or NACK. */
  lastNonce: string;
  lastVersion: string;
}

export interface ClusterDiscoveryOptions {
  /** Envoy's CA bundle file for registered clusters without `ca.crt` (clusterRegistry.envoyCaFile). */
  readonly envoyCaFile: string;
  readonly logger: Logger;
  readonly coalesceMs?: number;
}

/** The registered clusters' Envoy resources, and the CDS streams they are pushed to. */
export class ClusterDiscovery {
  readonly #resources = new Map<string, Resource>();
  readonly #streams = new Set<StreamState>();
  readonly #options: ClusterDiscoveryOptions;
  /** What the streams are sent: taken from #resources when a change is pushed, so a version always names the same resources. */
  #snapshot: { version: string; resources: Array<{ type_url: string; value: Buffer }> } = { version: versionOf([]), resources: [] };
  #push: NodeJS.Timeout | undefined;

  constructor(options: ClusterDiscoveryOptions) {
    this.#options = options;
  }


  /** A cluster registered or changed (cluster-fleet.ts). Its credential is not read. */
  put(cluster: ClusterCredentials): void {
    const upstream: RegisteredUpstream = { id: cluster.id, server: cluster.server, caPem: cluster.caPem, tlsServerName: cluster.tlsServerName };
    const name = kubeApiEnvoyCluster(cluster.id);
    const digest = createHash("sha256").update(JSON.stringify([upstream.server, upstream.caPem ?? null, upstream.tlsServerName ?? null, this.#options.envoyCaFile])).digest("hex");
    if (this.#resources.get(name)?.digest === digest) return;
    const built = registeredClusterResource(upstream, this.#options.envoyCaFile);
    if ("unserved" in built) {
      this.#resources.delete(name);
      this.#options.logger.error(
        { cluster_id: cluster.id, problem: built.unserved, ...(built.detail === undefined ? {} : { detail: built.detail }) },
        "registered cluster has no Envoy upstream: kube-api-proxy cannot reach it (CDS leaves it out)",
      );
    } else {
      this.#resources.set(name, { name, digest, value: built.value });
    }
    this.#changed();
  }

  /** A cluster unregistered. */
  remove(clusterId: string): void {
    if (this.#resources.delete(kubeApiEnvoyCluster(clusterId))) this.#changed();
  }

  /** The StreamClusters handler (DeltaClusters and FetchClusters are not served: UNIMPLEMENTED). */
  handlers(): grpc.UntypedServiceImplementation {
    return { StreamClusters: (call: Stream) => this.#open(call) };
  }

  /** Ends every stream (shutdown: they would otherwise hold the gRPC server's graceful stop). */
  close(): void {
    clearTimeout(this.#push);
    for (const stream of this.#streams) stream.call.end();
    this.#streams.clear();
  }

  #changed(): void {
    this.#push ??= setTimeout(() => {
      this.#push = undefined;
      const version = versionOf(this.#resources.values());
      if (version === this.#snapshot.version) return;
      const resources = [...this.#resources.values()].sort((a, b) => (a.name < b.name ? -1 : 1)).map((r) => ({ type_url: CLUSTER_TYPE_URL, value: r.value }));
      this.#snapshot = { version, resources };
      this.#options.logger.info({ version, clusters: this.#resources.size, streams: this.#streams.size }, "CDS: new version of the registered clusters");
      for (const stream of this.#streams) if (stream.started) this.#send(stream);
    }, this.#options.coalesceMs ?? PUSH_COALESCE_MS).unref();
  }

  #open(call: Stream): void {
    const stream: StreamState = { call, started: false, sent: 0, lastNonce: "", lastVersion: "" };
    this.#streams.add(stream);
    const forget = () => this.#streams.delete(stream);
    call.on("data", (request: DiscoveryRequest) => this.#received(stream, request));
    call.on("end", () => {
      forget();
      call.end();
    });
    call.on("cancelled", forget);
    call.on("error", forget);
  }

  #received(stream: StreamState, request: DiscoveryRequest): void {
    const logger = this.#options.logger;
    const typeUrl = request.type_url ?? "";
    if (typeUrl !== "" && typeUrl !== CLUSTER_TYPE_URL) {
      this.#streams.delete(stream);
      stream.call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: `this stream serves ${CLUSTER_TYPE_URL} only` });
      return;
    }
    if (!stream.started) {
      stream.started = true;
      this.#send(stream);
      return;
    }
    // Answers an older response: a newer one is on its way to Envoy, whose answer counts.
    if (request.response_nonce !== stream.lastNonce) return;
    if (request.error_detail) {
      // Not re-sent: the same resources would be refused again. Envoy keeps the version it last accepted.
      logger.error(
        { rejected_version: stream.lastVersion, accepted_version: request.version_info ?? "", code: request.error_detail.code ?? 0, error: request.error_detail.message ?? "" },
        "CDS: Envoy rejected the registered clusters (NACK)",
      );
      return;
    }
    logger.debug({ version: request.version_info ?? "" }, "CDS: Envoy accepted the registered clusters (ACK)");
  }

  #send(stream: StreamState): void {
    stream.sent += 1;
    stream.lastNonce = String(stream.sent);
    const { version, resources } = this.#snapshot;
    stream.lastVersion = version;
    stream.call.write({ version_info: version, resources, type_url: CLUSTER_TYPE_URL, nonce: stream.lastNonce });
  }
}

let service: grpc.ServiceDefinition | undefined;

/**
 * `envoy.service.cluster.v3.ClusterDiscoveryService`, for `server.addService`: requests as
 * protobufjs decodes them (an absent error_detail reads null, an absent string ""), responses
 * encoded as #send builds them (protos.ts protobufService).
 */
export function clusterDiscoveryService(): grpc.ServiceDefinition {
  service ??= protobufService(protoRoot("envoy/service/cluster/v3/cds.proto"), "envoy.service.cluster.v3.ClusterDiscoveryService");
  return service;
}
