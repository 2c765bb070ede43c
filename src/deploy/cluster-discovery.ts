/**
 * Envoy's Cluster Discovery Service for the registered clusters (kube-watch/cluster-registry.ts): one
 * Envoy cluster per registered cluster, named by its id and a digest of what it connects to
 * (kube-api-upstream.ts registeredEnvoyCluster), so kube-api-proxy's `kube-api-registered` route
 * (deploy/envoy-config.ts) has an upstream for it. Transport v3,
 * `envoy.service.cluster.v3.ClusterDiscoveryService`: State of the World (StreamClusters) and
 * incremental (DeltaClusters), whichever the Envoy asks for.
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
 * A re-pointed cluster (another server, CA or server name) is a new Envoy cluster beside the old
 * one: an allow names the Envoy cluster of the API server its token was minted from, so while
 * Envoy has not applied the new version the old name still routes the old tokens to the old
 * server, and the new name routes nowhere (Envoy answers 503) rather than to the wrong server. The
 * old name retires once every Envoy on this replica's streams has acknowledged a version carrying
 * the new one, or after `retireAfterMs` whatever they said (a silent or rejecting Envoy cannot keep
 * it forever). A cluster unregistered goes at once, with every name it had.
 *
 * Versions: changes within PUSH_COALESCE_MS go out together (the registry's first list of a
 * thousand Secrets is one version). SotW: every response carries every resource; a stream gets the
 * current set on its first request, then every new version. A request answering the latest nonce
 * is an ACK, or a NACK when it carries error_detail: logged with Envoy's reason, and nothing is
 * re-sent until the set changes (Envoy keeps its last accepted version); an older nonce is stale
 * and ignored. Delta: a stream is sent what it lacks — the resources added or changed since what
 * it was last sent (or, on its first request, since the versions it says it holds), and the names
 * removed — and nothing when that is empty; each response's nonce, ACKed or NACKed, is answered
 * likewise (a NACK is logged and not re-sent).
 */
import { createHash } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import type { ClusterCredentials } from "../kube-fleet/clusters.ts";
import { kubeApiCluster } from "./envoy-config.ts";
import { type RegisteredEndpoint, registeredEnvoyCluster } from "../envoy/kube-api-upstream.ts";
import { decodeMessage, envoyRoot } from "../envoy/bootstrap.ts";
import { protobufService, protoRoot } from "../envoy/protos.ts";

export const CLUSTER_TYPE_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const CLUSTER_TYPE = "envoy.config.cluster.v3.Cluster";

/** Changes this close together go out as one version. */
export const PUSH_COALESCE_MS = 100;
/** A replaced Envoy cluster is withdrawn after this long even if some Envoy never acknowledged its successor. */
export const RETIRE_AFTER_MS = 30_000;

/** What CDS serves of a registered cluster: its address and how it is verified, not its credential. */
export type RegisteredUpstream = RegisteredEndpoint;

export type UnservedUpstream = "server-path" | "not-a-cluster";

/**
 * The Envoy cluster of a registered cluster as CDS sends it, or why it cannot be served. Pure. A
 * server URL with a path (a proxy in front of the API server) is refused: the shared route
 * rewrites `/clusters/{id}/` to `/`, so that path would be lost.
 */
export function registeredClusterResource(upstream: RegisteredUpstream, envoyCaFile: string): { name: string; value: Buffer } | { unserved: UnservedUpstream; detail?: string } {
  const url = new URL(upstream.server);
  if (url.pathname !== "/" && url.pathname !== "") return { unserved: "server-path" };
  const name = registeredEnvoyCluster(upstream);
  const cluster = kubeApiCluster(name, {
    server: url.origin,
    trustedCa: upstream.caPem === undefined ? { filename: envoyCaFile } : { inline_string: upstream.caPem },
    tlsServerName: upstream.tlsServerName,
  });
  // Strictly, as Envoy would read it: a mistake here is one cluster left out, never a stream Envoy rejects whole.
  const decoded = decodeMessage(CLUSTER_TYPE, cluster);
  if (!decoded.ok) return { unserved: "not-a-cluster", detail: decoded.errors.join("; ") };
  return { name, value: Buffer.from(envoyRoot().lookupType(CLUSTER_TYPE).encode(decoded.message).finish()) };
}

/** The version of a set of resources: changes exactly when a cluster comes, goes, or changes server, CA or name. */
export function versionOf(resources: Iterable<{ name: string; digest: string }>): string {
  const lines = [...resources].map((r) => `${r.name} ${r.digest}`).sort();
  return createHash("sha256").update(lines.join("\n")).digest("hex").slice(0, 16);
}
/** One Envoy cluster, encoded once. */
interface Resource {
  readonly name: string;
  readonly clusterId: string;
  /** Hash of what it was built from: the versions are made of these. */
  readonly digest: string;
  readonly value: Buffer;
}

/** An Envoy cluster replaced by another of its cluster's: served until `afterSeq` is acknowledged everywhere, or `deadline`. */
interface Retiring {
  readonly resource: Resource;
  /** The first version carrying its successor. */
  readonly afterSeq: number;
  readonly deadline: number;
}

/** What a version holds: sent whole to SotW streams, as a difference to Delta streams. */
interface Snapshot {
  /** Increases with every version pushed. */
  readonly seq: number;
  readonly version: string;
  readonly resources: ReadonlyMap<string, Resource>;
  /** SotW's list, built once per version. */
  readonly anys: ReadonlyArray<{ type_url: string; value: Buffer }>;
}

interface Status {
  code?: number;
  message?: string;
}

interface DiscoveryRequest {
  version_info?: string;
  type_url?: string;
  response_nonce?: string;
  error_detail?: Status | null;
}

interface DiscoveryResponse {
  version_info: string;
  resources: ReadonlyArray<{ type_url: string; value: Buffer }>;
  type_url: string;
  nonce: string;
}

interface DeltaDiscoveryRequest {
  type_url?: string;
  resource_names_subscribe?: string[];
  resource_names_unsubscribe?: string[];
  initial_resource_versions?: Record<string, string>;
  response_nonce?: string;
  error_detail?: Status | null;
}

interface DeltaDiscoveryResponse {
  system_version_info: string;
  resources: Array<{ name: string; version: string; resource: { type_url: string; value: Buffer } }>;
  removed_resources: string[];
  type_url: string;
  nonce: string;
}

type SotwCall = grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;
type DeltaCall = grpc.ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;

interface StreamState {
  readonly call: SotwCall | DeltaCall;
  readonly delta: boolean;
  /** Set once Envoy's first request arrived: from then on it is sent every version. */
  started: boolean;
  sent: number;
  /** The last version this Envoy acknowledged (its seq): a replaced cluster retires once every stream is past it. */
  acked: number;
  /** SotW: the nonce, version and seq of the last response; only a request naming this nonce is an ACK or NACK. */
  lastNonce: string;
  lastVersion: string;
  lastSeq: number;
  /** Delta: the responses not yet answered, by nonce (their seq), and what Envoy holds (name → version). */
  readonly pending: Map<string, number>;
  readonly holds: Map<string, string>;
  /** Delta: every resource (wildcard), or only the names subscribed. */
  wildcard: boolean;
  readonly subscribed: Set<string>;
}

export interface ClusterDiscoveryOptions {
  /** Envoy's CA bundle file for registered clusters without `ca.crt` (clusterRegistry.envoyCaFile). */
  readonly envoyCaFile: string;
  readonly logger: Logger;
  readonly coalesceMs?: number;
  readonly retireAfterMs?: number;
  readonly now?: () => number;
}

/** The registered clusters' Envoy resources, and the CDS streams they are pushed to. */
export class ClusterDiscovery {
  /** The Envoy cluster serving each registered cluster now, by cluster id. */
  readonly #current = new Map<string, Resource>();
  /** Replaced Envoy clusters still served, by name. */
  readonly #retiring = new Map<string, Retiring>();
  readonly #streams = new Set<StreamState>();
  readonly #options: ClusterDiscoveryOptions;
  readonly #now: () => number;
  /** What the streams are sent: taken when a change is pushed, so a version always names the same resources. */
  #snapshot: Snapshot = { seq: 0, version: versionOf([]), resources: new Map(), anys: [] };
  #push: NodeJS.Timeout | undefined;
  #retireTimer: NodeJS.Timeout | undefined;

  constructor(options: ClusterDiscoveryOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** A cluster registered or changed (cluster-fleet.ts). Its credential is not read. */
  put(cluster: ClusterCredentials): void {
    const upstream: RegisteredUpstream = { id: cluster.id, server: cluster.server, caPem: cluster.caPem, tlsServerName: cluster.tlsServerName };
    const digest = createHash("sha256").update(JSON.stringify([upstream.server, upstream.caPem ?? null, upstream.tlsServerName ?? null, this.#options.envoyCaFile])).digest("hex");
    const previous = this.#current.get(cluster.id);
    if (previous?.digest === digest) return;
    const built = registeredClusterResource(upstream, this.#options.envoyCaFile);
    if ("unserved" in built) {
      this.#current.delete(cluster.id);
      this.#options.logger.error(
        { cluster_id: cluster.id, problem: built.unserved, ...(built.detail === undefined ? {} : { detail: built.detail }) },
        "registered cluster has no Envoy upstream: kube-api-proxy cannot reach it (CDS leaves it out)",
      );
    } else {
      this.#retiring.delete(built.name);
      this.#current.set(cluster.id, { name: built.name, clusterId: cluster.id, digest, value: built.value });
    }
    // The old name still routes tokens minted from the old server to it: withdrawn once Envoy has the new one.
    if (previous !== undefined && previous.name !== this.#current.get(cluster.id)?.name) {
      this.#retiring.set(previous.name, { resource: previous, afterSeq: this.#snapshot.seq + 1, deadline: this.#now() + (this.#options.retireAfterMs ?? RETIRE_AFTER_MS) });
      this.#armRetirement();
    }
    this.#changed();
  }

  /** A cluster unregistered: every Envoy cluster of it goes at once. */
  remove(clusterId: string): void {
    let removed = this.#current.delete(clusterId);
    for (const [name, retiring] of this.#retiring) if (retiring.resource.clusterId === clusterId) removed = this.#retiring.delete(name) || removed;
    if (removed) this.#changed();
  }

  /** The Envoy clusters served now (current and retiring), by name: what the next version will hold. */
  served(): string[] {
    return [...this.#current.values(), ...[...this.#retiring.values()].map((r) => r.resource)].map((r) => r.name).sort();
  }

  /** The StreamClusters and DeltaClusters handlers (FetchClusters is not served: UNIMPLEMENTED). */
  handlers(): grpc.UntypedServiceImplementation {
    return {
      StreamClusters: (call: SotwCall) => this.#open(call, false),
      DeltaClusters: (call: DeltaCall) => this.#open(call, true),
    };
  }

  /** Ends every stream (shutdown: they would otherwise hold the gRPC server's graceful stop). */
  close(): void {
    clearTimeout(this.#push);
    clearTimeout(this.#retireTimer);
    for (const stream of this.#streams) stream.call.end();
    this.#streams.clear();
  }

  #changed(): void {
    this.#push ??= setTimeout(() => {
      this.#push = undefined;
      const served = [...this.#current.values(), ...[...this.#retiring.values()].map((r) => r.resource)].sort((a, b) => (a.name < b.name ? -1 : 1));
      const version = versionOf(served);
      if (version === this.#snapshot.version) return;
      this.#snapshot = {
        seq: this.#snapshot.seq + 1,
        version,
        resources: new Map(served.map((r) => [r.name, r])),
        anys: served.map((r) => ({ type_url: CLUSTER_TYPE_URL, value: r.value })),
      };
      this.#options.logger.info({ version, clusters: served.length, retiring: this.#retiring.size, streams: this.#streams.size }, "CDS: new version of the registered clusters");
      for (const stream of this.#streams) if (stream.started) this.#send(stream);
      // With no Envoy listening (or all of them already past it), a replaced name has nobody to wait for.
      this.#retire();
    }, this.#options.coalesceMs ?? PUSH_COALESCE_MS).unref();
  }

  /** Withdraws the replaced clusters every started stream has acknowledged the successor of, and those past their deadline. */
  #retire(): void {
    const now = this.#now();
    const started = [...this.#streams].filter((s) => s.started);
    let withdrawn = false;
    for (const [name, retiring] of this.#retiring) {
      // Not before the version carrying its successor went out: only then can anyone have acknowledged it.
      if (this.#snapshot.seq < retiring.afterSeq) continue;
      if (retiring.deadline <= now || started.every((s) => s.acked >= retiring.afterSeq)) {
        this.#retiring.delete(name);
        withdrawn = true;
        if (retiring.deadline <= now) this.#options.logger.warn({ envoy_cluster: name, cluster_id: retiring.resource.clusterId }, "CDS: replaced Envoy cluster withdrawn at its deadline, not every Envoy acknowledged its successor");
      }
    }
    if (withdrawn) this.#changed();
    this.#armRetirement();
  }

  #armRetirement(): void {
    clearTimeout(this.#retireTimer);
    this.#retireTimer = undefined;
    if (this.#retiring.size === 0) return;
    const next = Math.min(...[...this.#retiring.values()].map((r) => r.deadline));
    this.#retireTimer = setTimeout(() => this.#retire(), Math.max(0, next - this.#now())).unref();
  }

  #open(call: SotwCall | DeltaCall, delta: boolean): void {
    const stream: StreamState = {
      call,
      delta,
      started: false,
      sent: 0,
      acked: 0,
      lastNonce: "",
      lastVersion: "",
      lastSeq: 0,
      pending: new Map(),
      holds: new Map(),
      wildcard: false,
      subscribed: new Set(),
    };
    this.#streams.add(stream);
    const forget = () => {
      this.#streams.delete(stream);
      // One fewer Envoy to wait for.
      if (this.#retiring.size > 0) this.#retire();
    };
    if (delta) (call as DeltaCall).on("data", (request: DeltaDiscoveryRequest) => this.#receivedDelta(stream, request));
    else (call as SotwCall).on("data", (request: DiscoveryRequest) => this.#received(stream, request));
    call.on("end", () => {
      forget();
      call.end();
    });
    call.on("cancelled", forget);
    call.on("error", forget);
  }

  /** A stream asking for another type is refused: it serves Clusters only. */
  #refusedType(stream: StreamState, typeUrl: string | undefined): boolean {
    if (typeUrl === undefined || typeUrl === "" || typeUrl === CLUSTER_TYPE_URL) return false;
    this.#streams.delete(stream);
    stream.call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: `this stream serves ${CLUSTER_TYPE_URL} only` });
    return true;
  }

  #received(stream: StreamState, request: DiscoveryRequest): void {
    if (this.#refusedType(stream, request.type_url)) return;
    if (!stream.started) {
      stream.started = true;
      this.#send(stream);
      return;
    }
    // Answers an older response: a newer one is on its way to Envoy, whose answer counts.
    if (request.response_nonce !== stream.lastNonce) return;
    this.#answered(stream, stream.lastSeq, stream.lastVersion, request.version_info ?? "", request.error_detail);
  }

  #receivedDelta(stream: StreamState, request: DeltaDiscoveryRequest): void {
    if (this.#refusedType(stream, request.type_url)) return;
    const nonce = request.response_nonce ?? "";
    if (nonce !== "") {
      const seq = stream.pending.get(nonce);
      // A nonce this stream was never sent (or already answered): nothing to acknowledge.
      if (seq !== undefined) {
        // Responses are answered in order: the ones before it will not be.
        for (const [n, s] of stream.pending) if (s <= seq) stream.pending.delete(n);
        this.#answered(stream, seq, String(seq), "", request.error_detail);
      }
    }
    const subscribe = request.resource_names_subscribe ?? [];
    const unsubscribe = request.resource_names_unsubscribe ?? [];
    for (const name of unsubscribe) {
      if (name === "*") stream.wildcard = false;
      else stream.subscribed.delete(name);
      // Envoy drops what it unsubscribed from: if asked again, it is sent again.
      stream.holds.delete(name);
    }
    for (const name of subscribe) {
      if (name === "*") stream.wildcard = true;
      else stream.subscribed.add(name);
    }
    if (!stream.started) {
      stream.started = true;
      // The legacy wildcard: a first request naming nothing asks for everything.
      if (subscribe.length === 0) stream.wildcard = true;
      for (const [name, version] of Object.entries(request.initial_resource_versions ?? {})) stream.holds.set(name, version);
      this.#send(stream, true);
      return;
    }
    if (subscribe.length > 0) this.#send(stream);
  }

  #answered(stream: StreamState, seq: number, version: string, acceptedVersion: string, error: Status | null | undefined): void {
    const logger = this.#options.logger;
    if (error) {
      // Not re-sent: the same resources would be refused again. Envoy keeps the version it last accepted.
      logger.error(
        { rejected_version: version, accepted_version: acceptedVersion, delta: stream.delta, code: error.code ?? 0, error: error.message ?? "" },
        "CDS: Envoy rejected the registered clusters (NACK)",
      );
      return;
    }
    logger.debug({ version, delta: stream.delta }, "CDS: Envoy accepted the registered clusters (ACK)");
    if (seq > stream.acked) stream.acked = seq;
    if (this.#retiring.size > 0) this.#retire();
  }

  /** `first`: a Delta stream's first answer goes out even when it holds everything already (Envoy waits for it). */
  #send(stream: StreamState, first = false): void {
    stream.sent += 1;
    const nonce = String(stream.sent);
    const snapshot = this.#snapshot;
    if (!stream.delta) {
      stream.lastNonce = nonce;
      stream.lastVersion = snapshot.version;
      stream.lastSeq = snapshot.seq;
      (stream.call as SotwCall).write({ version_info: snapshot.version, resources: snapshot.anys, type_url: CLUSTER_TYPE_URL, nonce });
      return;
    }
    const wanted = (name: string) => stream.wildcard || stream.subscribed.has(name);
    const resources: DeltaDiscoveryResponse["resources"] = [];
    for (const [name, resource] of snapshot.resources) {
      if (!wanted(name) || stream.holds.get(name) === resource.digest) continue;
      resources.push({ name, version: resource.digest, resource: { type_url: CLUSTER_TYPE_URL, value: resource.value } });
    }
    const removed = [...stream.holds.keys()].filter((name) => !snapshot.resources.has(name)).sort();
    if (resources.length === 0 && removed.length === 0 && !first) {
      stream.sent -= 1;
      // Nothing to tell, yet it holds this version: as good as acknowledged.
      if (snapshot.seq > stream.acked && stream.pending.size === 0) stream.acked = snapshot.seq;
      return;
    }
    for (const r of resources) stream.holds.set(r.name, r.version);
    for (const name of removed) stream.holds.delete(name);
    stream.pending.set(nonce, snapshot.seq);
    (stream.call as DeltaCall).write({ system_version_info: snapshot.version, resources, removed_resources: removed, type_url: CLUSTER_TYPE_URL, nonce });
  }
}

let service: grpc.ServiceDefinition | undefined;

/**
 * `envoy.service.cluster.v3.ClusterDiscoveryService`, for `server.addService`: requests as
 * protobufjs decodes them (an absent error_detail reads null, an absent string "", an absent map
 * {}), responses encoded as #send builds them (protos.ts protobufService).
 */
export function clusterDiscoveryService(): grpc.ServiceDefinition {
  service ??= protobufService(protoRoot("envoy/service/cluster/v3/cds.proto"), "envoy.service.cluster.v3.ClusterDiscoveryService");
  return service;
}
