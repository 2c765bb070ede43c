/**
 * The live cluster registry (issue 16): each cluster portcullis serves, beyond the static
 * `clusters:` list, is a Secret in one namespace of the management cluster, labelled
 * `portcullis.fundament.io/secret-type: cluster`, holding the cluster's id, API server, CA and
 * credential — the way Argo CD and Cluster API register clusters. A labelled Secret rather than a
 * CRD: the credential must live in a Secret anyway, one object per cluster is one `kubectl apply`,
 * there is nothing to install, and reading them needs get/list/watch on Secrets in one namespace.
 *
 * The Secrets are watched (watched-index.ts: backoff, silence bound, fresh list after a failure).
 * Each arrival, change and deletion is turned into a change of the fleet (RegistryView, pure):
 * added, changed (any data: a rotated token or certificate, another CA or server), removed (the
 * Secret deleted, its label taken off, or it became invalid). An invalid Secret is logged (never
 * its credential) and counted, and registers nothing. A cluster id claimed by two or more valid
 * Secrets is served by none of them (its checks answer 404 unknown-cluster, as for an id no Secret
 * names) until all but one are gone, and the conflict is logged and counted: which Secret serves
 * an id must not depend on the order a replica happened to list them in (issue 42).
 *
 * When the registry's own watch breaks, the clusters it registered are kept and served: removing
 * every cluster on a blip of the management cluster would answer 404 for the whole fleet. The
 * fresh list that follows the outage removes the clusters whose Secrets went away meanwhile.
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import type { V1Secret } from "#kubernetes-client";
import type { Logger } from "pino";
import type { Cluster, ClusterCredentials } from "../kube-fleet/clusters.ts";
import { type IndexStore, resolveWatchOptions, WatchedIndex, type WatchedIndexOptions } from "./watched-index.ts";
import { publishClusterRegistryEvent } from "../metrics/events.ts";

/** The label that makes a Secret a registered cluster. */
export const CLUSTER_SECRET_LABEL = "portcullis.fundament.io/secret-type";
export const CLUSTER_SECRET_TYPE = "cluster";

/** The Secrets watched: the labelled ones of one namespace. */
export function clusterSecrets(namespace: string) {
  return { group: "", version: "v1", plural: "secrets", namespace, labelSelector: `${CLUSTER_SECRET_LABEL}=${CLUSTER_SECRET_TYPE}` } as const;
}

/** Why a Secret registers no cluster (logged and counted; never names the credential's value). */
export type InvalidSecret =
  | "undecodable-data"
  | "missing-cluster-id"
  | "bad-cluster-id"
  | "missing-server"
  | "bad-server"
  | "bad-ca"
  | "no-credential"
  | "two-credentials"
  | "bad-token"
  | "bad-client-certificate"
  | "bad-tls-server-name"
  | "bad-service-domain"
  | "static-cluster-id";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Strict base64 (what the API server stores in `data`): Buffer.from would skip anything else silently. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** A bearer token goes into a header: visible ASCII only, no spaces (RFC 6750 b64token and JWTs). */
const TOKEN = /^[\x21-\x7e]+$/;
const HOSTNAME = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$/i;
const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * The cluster a Secret registers, or why it registers none. Pure: the data keys are `clusterId`,
 * `server` (https), `ca.crt` (PEM, optional: the system's CAs), and exactly one credential —
 * `token`, or `tls.crt` with `tls.key` — and optionally `tls-server-name` and `service-domain` (the DNS
 * suffix under which Envoy reaches the cluster's Services: plugin-proxy's upstreams).
 */
export function registeredClusterOf(data: Readonly<Record<string, string>> | undefined): { cluster: ClusterCredentials } | { invalid: InvalidSecret } {
  const fields = decodeData(data ?? {});
  if (fields === undefined) return { invalid: "undecodable-data" };
  const id = singleLine(fields["clusterId"]);
  if (id === undefined || id === "") return { invalid: "missing-cluster-id" };
  if (!UUID.test(id)) return { invalid: "bad-cluster-id" };
  const server = singleLine(fields["server"]);
  if (server === undefined || server === "") return { invalid: "missing-server" };
  if (!isApiServerUrl(server)) return { invalid: "bad-server" };

  const caPem = fields["ca.crt"];
  if (caPem !== undefined && !isCertificateBundle(caPem)) return { invalid: "bad-ca" };
  const tlsServerName = singleLine(fields["tls-server-name"]);
  if (tlsServerName !== undefined && !HOSTNAME.test(tlsServerName)) return { invalid: "bad-tls-server-name" };
  const serviceDomain = singleLine(fields["service-domain"]);
  // Envoy builds `{service}.{namespace}.{domain}` from it: a host name, nothing that could add a port or a path.
  if (fields["service-domain"] !== undefined && (serviceDomain === undefined || !HOSTNAME.test(serviceDomain))) return { invalid: "bad-service-domain" };

  const token = singleLine(fields["token"]);
  const certPem = fields["tls.crt"];
  const keyPem = fields["tls.key"];
  const hasToken = fields["token"] !== undefined;
  const hasCertificate = certPem !== undefined || keyPem !== undefined;
  // One credential, never a guess at which of two the operator meant.
  if (hasToken && hasCertificate) return { invalid: "two-credentials" };
  let credential: ClusterCredentials["credential"];
  if (hasToken) {
    if (token === undefined || !TOKEN.test(token)) return { invalid: "bad-token" };
    credential = { token };
  } else if (hasCertificate) {
    if (certPem === undefined || keyPem === undefined || !isKeyPair(certPem, keyPem)) return { invalid: "bad-client-certificate" };
    credential = { certPem, keyPem };
  } else {
    return { invalid: "no-credential" };
  }
  return {
    cluster: {
      id,
      server,
      ...(caPem === undefined ? {} : { caPem }),
      ...(tlsServerName === undefined ? {} : { tlsServerName }),
      ...(serviceDomain === undefined ? {} : { serviceDomain: serviceDomain.toLowerCase() }),
      credential,
    },
  };
}

function decodeData(data: Readonly<Record<string, string>>): Record<string, string> | undefined {
  const fields: Record<string, string> = {};
  for (const [key, value] of Object.entries(data)) {
    if (typeof value !== "string" || !BASE64.test(value)) return undefined;
    const bytes = Buffer.from(value, "base64");
    const text = bytes.toString("utf8");
    // Not UTF-8 (every field here is text): it would not read back as the same bytes.
    if (!Buffer.from(text, "utf8").equals(bytes)) return undefined;
    fields[key] = text;
  }
  return fields;
}

/** One line, with the trailing newline a file-made Secret (`--from-file`) carries taken off; undefined for several lines. */
function singleLine(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const line = value.replace(/\r?\n$/, "");
  return /[\x00-\x1f\x7f]/.test(line) ? undefined : line;
}

/** https, a host, no credentials, query or fragment in the URL. */
function isApiServerUrl(server: string): boolean {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return false;
  }
  return url.protocol === "https:" && url.hostname !== "" && url.username === "" && url.password === "" && url.search === "" && url.hash === "";
}

/** At least one PEM certificate, and every one of them parses. */
function isCertificateBundle(pem: string): boolean {
  const blocks = pem.match(PEM_CERTIFICATE);
  if (blocks === null) return false;
  try {
    for (const block of blocks) new X509Certificate(block);
    return true;
  } catch {
    return false;
  }
}

/** The certificate parses, the key parses, and the key is the certificate's. */
function isKeyPair(certPem: string, keyPem: string): boolean {
  const blocks = certPem.match(PEM_CERTIFICATE);
  if (blocks === null) return false;
  try {
    const certificate = new X509Certificate(blocks[0]!);
    return certificate.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

/** A cluster id claimed by more than one Secret: served by none of them until all but one are gone. */
export interface ClusterIdConflict {
  readonly clusterId: string;
  /** The claiming Secrets (`namespace/name`), sorted. */
  readonly secrets: readonly string[];
}

/** A change of the fleet the registry asks for, or of the conflicts it reports. */
export type FleetChange =
  | { readonly event: "added" | "changed"; readonly secret: string; readonly cluster: ClusterCredentials }
  | { readonly event: "removed"; readonly secret: string; readonly clusterId: string }
  | { readonly event: "invalid"; readonly secret: string; readonly problem: InvalidSecret; readonly clusterId?: string }
  /** The id became claimed by more than one Secret, or its claimants changed while it was. */
  | ({ readonly event: "conflict" } & ClusterIdConflict)
  /** The id is claimed by one Secret (then served by it) or none again; `secrets` names what claims it now. */
  | ({ readonly event: "conflict-resolved" } & ClusterIdConflict);

/** A Secret's valid claim on a (non-static) cluster id. */
interface Claim {
  readonly cluster: ClusterCredentials;
  /** The Secret's data as last applied: any change of it rebuilds the cluster. */
  readonly fingerprint: string;
}

/**
 * Which Secret registers which cluster, and what each event changes. Pure: no watch, no pool.
 * Secrets are named by `namespace/name`.
 *
 * Every valid claim is kept; the served clusters are a function of the claims alone — an id is
 * served by the one Secret claiming it, by none while two or more do (a conflict), and never by a
 * Secret when the id is static. So which Secret owns an id never depends on the order Secrets were
 * listed or changed in, and every replica holding the same Secrets serves the same clusters: a
 * Secret that shows up beside a registered cluster's takes it out of service everywhere (a denial
 * of service, loud), and never over.
 *
 * A list (the first, and each fresh list after the watch broke) is applied as a whole when it
 * ends: until then a cluster is only ever taken out (a claim it names conflicts, or its owner
 * became invalid), never added or rebuilt — halfway through a list the claims are not all known,
 * and the clusters registered before an outage stay served through it.
 */
export class RegistryView {
  readonly #claims = new Map<string, Claim>();
  readonly #claimants = new Map<string, Set<string>>();
  /** What the fleet was told: the Secret serving each id, and the data it was built from. */
  readonly #served = new Map<string, { readonly secret: string; readonly fingerprint: string }>();
  /** The conflicts reported, by id. */
  readonly #conflicts = new Map<string, readonly string[]>();
  readonly #isStatic: (clusterId: string) => boolean;
  /** Secrets seen since a list began; undefined while no list is under way. The first list begins at once. */
  #listed: Set<string> | undefined = new Set();

  constructor(isStatic: (clusterId: string) => boolean) {
    this.#isStatic = isStatic;
  }

  /** The clusters served. */
  get size(): number {
    return this.#served.size;
  }

  /** The ids claimed by more than one Secret now, by id. */
  conflicts(): ClusterIdConflict[] {
    return [...this.#conflicts].map(([clusterId, secrets]) => ({ clusterId, secrets })).sort((a, b) => (a.clusterId < b.clusterId ? -1 : 1));
  }

  /** A Secret arrived or changed. */
  put(secret: string, data: Readonly<Record<string, string>> | undefined): FleetChange[] {
    this.#listed?.add(secret);
    const previous = this.#unclaim(secret);
    const parsed = registeredClusterOf(data);
    let invalid: FleetChange | undefined;
    if ("invalid" in parsed) invalid = { event: "invalid", secret, problem: parsed.invalid };
    else if (this.#isStatic(parsed.cluster.id)) invalid = { event: "invalid", secret, problem: "static-cluster-id", clusterId: parsed.cluster.id };
    else this.#claim(secret, { cluster: parsed.cluster, fingerprint: fingerprintOf(data ?? {}) });
    // The id it claimed before first: a Secret that now names another id releases the old one.
    const changes = this.#settle([previous?.cluster.id, "cluster" in parsed ? parsed.cluster.id : undefined]);
    return invalid === undefined ? changes : [...changes, invalid];
  }

  /** A Secret was deleted (or lost its label). */
  remove(secret: string): FleetChange[] {
    return this.#settle([this.#unclaim(secret)?.cluster.id]);
  }

  /** A fresh list begins (after the watch broke): what it does not name is dropped when it ends. */
  beginRelist(): void {
    this.#listed = new Set();
  }

  /** The list and its watch succeeded: the claims of Secrets it did not name are dropped, and the whole view applied. */
  endRelist(): FleetChange[] {
    const listed = this.#listed;
    if (listed === undefined) return [];
    this.#listed = undefined;
    for (const secret of [...this.#claims.keys()]) if (!listed.has(secret)) this.#unclaim(secret);
    return this.#settle([...this.#served.keys(), ...this.#conflicts.keys(), ...this.#claimants.keys()]);
  }

  #claim(secret: string, claim: Claim): void {
    this.#claims.set(secret, claim);
    const claimants = this.#claimants.get(claim.cluster.id);
    if (claimants === undefined) this.#claimants.set(claim.cluster.id, new Set([secret]));
    else claimants.add(secret);
  }

  #unclaim(secret: string): Claim | undefined {
    const claim = this.#claims.get(secret);
    if (claim === undefined) return undefined;
    this.#claims.delete(secret);
    const claimants = this.#claimants.get(claim.cluster.id)!;
    claimants.delete(secret);
    if (claimants.size === 0) this.#claimants.delete(claim.cluster.id);
    return claim;
  }

  /** Brings the served clusters and the reported conflicts of `clusterIds` in line with the claims. */
  #settle(clusterIds: ReadonlyArray<string | undefined>): FleetChange[] {
    const changes: FleetChange[] = [];
    for (const clusterId of new Set(clusterIds)) {
      if (clusterId === undefined) continue;
      const claimants = [...(this.#claimants.get(clusterId) ?? [])].sort();
      changes.push(...this.#reportConflict(clusterId, claimants));
      const owner = claimants.length === 1 ? claimants[0]! : undefined;
      const served = this.#served.get(clusterId);
      if (served !== undefined && served.secret !== owner) {
        this.#served.delete(clusterId);
        changes.push({ event: "removed", secret: served.secret, clusterId });
      }
      // Additions and rebuilds wait for the end of a list (see the class comment).
      if (owner === undefined || this.#listed !== undefined) continue;
      const claim = this.#claims.get(owner)!;
      const current = this.#served.get(clusterId);
      if (current?.fingerprint === claim.fingerprint) continue;
      this.#served.set(clusterId, { secret: owner, fingerprint: claim.fingerprint });
      changes.push({ event: current === undefined ? "added" : "changed", secret: owner, cluster: claim.cluster });
    }
    return changes;
  }

  #reportConflict(clusterId: string, claimants: readonly string[]): FleetChange[] {
    const reported = this.#conflicts.get(clusterId);
    if (claimants.length > 1) {
      if (reported !== undefined && reported.join("\n") === claimants.join("\n")) return [];
      this.#conflicts.set(clusterId, claimants);
      return [{ event: "conflict", clusterId, secrets: claimants }];
    }
    if (reported === undefined) return [];
    this.#conflicts.delete(clusterId);
    return [{ event: "conflict-resolved", clusterId, secrets: claimants }];
  }
}

/** A Secret's data in a form that is equal exactly when the data is. */
function fingerprintOf(data: Readonly<Record<string, string>>): string {
  return JSON.stringify(Object.entries(data).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** What the registry changes: the clusters, their watches and their caches (wired in src/server/cluster-fleet.ts). */
export interface ClusterFleet {
  isStatic(clusterId: string): boolean;
  /**
   * A cluster registered, or its registration changed (rebuilt from scratch). `initial`: it came
   * with the registry's first list, so it is treated like a static cluster for readiness.
   */
  register(cluster: ClusterCredentials, initial: boolean): void;
  unregister(clusterId: string): void;
}

/** Feeds the watched Secrets through the view into the fleet. */
class RegistryStore implements IndexStore<V1Secret> {
  readonly #view: RegistryView;
  /** `initial`: the changes of the registry's first list (clusters that count for readiness like static ones). */
  readonly #apply: (changes: FleetChange[], initial: boolean) => void;
  #listedOnce = false;

  constructor(view: RegistryView, apply: (changes: FleetChange[], initial: boolean) => void) {
    this.#view = view;
    this.#apply = apply;
  }

  get size(): number {
    return this.#view.size;
  }

  conflicts(): ClusterIdConflict[] {
    return this.#view.conflicts();
  }

  put(secret: V1Secret): void {
    this.#apply(this.#view.put(secretName(secret), secret.data), false);
  }

  remove(secret: V1Secret): void {
    this.#apply(this.#view.remove(secretName(secret)), false);
  }

  /** Before a fresh list: the clusters stay registered (see the top of this file) until it ends. */
  clear(): void {
    this.#view.beginRelist();
  }

  synced(): void {
    this.#apply(this.#view.endRelist(), !this.#listedOnce);
    this.#listedOnce = true;
  }
}

function secretName(secret: V1Secret): string {
  return `${secret.metadata?.namespace ?? ""}/${secret.metadata?.name ?? ""}`;
}

export interface ClusterRegistryOptions extends WatchedIndexOptions {
  readonly namespace: string;
}

export class ClusterRegistry {
  readonly #cluster: Cluster;
  readonly #watch: WatchedIndex<V1Secret>;
  readonly #store: RegistryStore;
  readonly #logger: Logger;

  /** `cluster`: the management cluster holding the Secrets. */
  constructor(cluster: Cluster, fleet: ClusterFleet, options: ClusterRegistryOptions) {
    this.#cluster = cluster;
    this.#logger = options.logger;
    this.#store = new RegistryStore(new RegistryView((id) => fleet.isStatic(id)), (changes, initial) => this.#apply(fleet, changes, initial));
    this.#watch = new WatchedIndex(cluster, clusterSecrets(options.namespace), this.#store, { index: "cluster registry", objects: "clusters" }, resolveWatchOptions(options));
  }

  /** Resolves once the first list has been attempted, synced or not; failures retry in the background. */
  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): Promise<void> {
    return this.#watch.stop();
  }

  /** The registry's watch is healthy now (metrics, /readyz?verbose). */
  get synced(): boolean {
    return this.#watch.synced;
  }

  /** Listed once: until then the process is not ready (the fleet is not known yet). */
  get hasSynced(): boolean {
    return this.#watch.hasSynced;
  }

  /** The cluster ids claimed by more than one Secret: served by none of them (metrics, /readyz?verbose). */
  conflicts(): ClusterIdConflict[] {
    return this.#store.conflicts();
  }

  /** As readiness and metrics read an index: the registered clusters, the watch's state, and the conflicts. */
  size(): { clusterId: string; size: number; synced: boolean; hasSynced: boolean; lastSyncedAt: Date | undefined; conflicts: ClusterIdConflict[] } {
    return {
      clusterId: this.#cluster.id,
      size: this.#store.size,
      synced: this.#watch.synced,
      hasSynced: this.#watch.hasSynced,
      lastSyncedAt: this.#watch.lastSyncedAt,
      conflicts: this.#store.conflicts(),
    };
  }

  #apply(fleet: ClusterFleet, changes: FleetChange[], initial: boolean): void {
    for (const change of changes) {
      // Never crash the watch over one cluster: a failure to build it is logged, counted as invalid, and the cluster left out.
      try {
        switch (change.event) {
          case "added":
          case "changed":
            fleet.register(change.cluster, initial);
            this.#logger.info({ cluster_id: change.cluster.id, secret: change.secret, server: change.cluster.server }, `cluster ${change.event === "added" ? "registered" : "registration changed: clients rebuilt"}`);
            break;
          case "removed":
            fleet.unregister(change.clusterId);
            this.#logger.info({ cluster_id: change.clusterId, secret: change.secret }, "cluster unregistered");
            break;
          case "invalid":
            this.#logger.error({ secret: change.secret, problem: change.problem, ...(change.clusterId === undefined ? {} : { cluster_id: change.clusterId }) }, "cluster Secret ignored: it registers no cluster");
            break;
          case "conflict":
            this.#logger.error(
              { cluster_id: change.clusterId, secrets: change.secrets, problem: "cluster-id-conflict" },
              "cluster id claimed by more than one cluster Secret: served by none of them until all but one are deleted",
            );
            break;
          case "conflict-resolved":
            this.#logger.warn({ cluster_id: change.clusterId, secrets: change.secrets }, "cluster id conflict resolved: claimed by one cluster Secret or none");
            break;
          default:
            change satisfies never;
        }
        publishClusterRegistryEvent(change.event);
      } catch (err) {
        publishClusterRegistryEvent("invalid");
        this.#logger.error({ ...("secret" in change ? { secret: change.secret } : {}), err: { message: (err as Error).message } }, "cluster registration failed");
      }
    }
  }
}
