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
 * its credential) and counted, and registers nothing.
 *
 * When the registry's own watch breaks, the clusters it registered are kept and served: removing
 * every cluster on a blip of the management cluster would answer 404 for the whole fleet. The
 * fresh list that follows the outage removes the clusters whose Secrets went away meanwhile.
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import type { V1Secret } from "#kubernetes-client";
import type { Logger } from "pino";
import type { Cluster, ClusterCredentials } from "./clusters.ts";
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
  | "static-cluster-id"
  | "duplicate-cluster-id";

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
 * `token`, or `tls.crt` with `tls.key` — and optionally `tls-server-name`.
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

/** A change of the fleet the registry asks for. */
export type FleetChange =
  | { readonly event: "added" | "changed"; readonly secret: string; readonly cluster: ClusterCredentials }
  | { readonly event: "removed"; readonly secret: string; readonly clusterId: string }
  | { readonly event: "invalid"; readonly secret: string; readonly problem: InvalidSecret; readonly clusterId?: string };

interface Registration {
  readonly clusterId: string;
  /** The Secret's data as last applied: any change of it rebuilds the cluster. */
  readonly data: string;
}

/**
 * Which Secret registered which cluster, and what each event changes. Pure: no watch, no pool.
 * Secrets are named by `namespace/name`; one cluster id belongs to the first Secret that claimed
 * it, and never to a static cluster.
 */
export class RegistryView {
  readonly #bySecret = new Map<string, Registration>();
  readonly #owners = new Map<string, string>();
  readonly #isStatic: (clusterId: string) => boolean;
  /** Secrets seen since a fresh list began; undefined while no fresh list is under way. */
  #relisted: Set<string> | undefined;

  constructor(isStatic: (clusterId: string) => boolean) {
    this.#isStatic = isStatic;
  }

  get size(): number {
    return this.#bySecret.size;
  }

  /** A Secret arrived or changed. */
  put(secret: string, data: Readonly<Record<string, string>> | undefined): FleetChange[] {
    this.#relisted?.add(secret);
    const parsed = registeredClusterOf(data);
    const previous = this.#bySecret.get(secret);
    if ("invalid" in parsed) return [...this.#unregister(secret), { event: "invalid", secret, problem: parsed.invalid }];
    const { cluster } = parsed;
    const fingerprint = JSON.stringify(Object.entries(data ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    if (previous !== undefined && previous.clusterId === cluster.id) {
      if (previous.data === fingerprint) return [];
      this.#bySecret.set(secret, { clusterId: cluster.id, data: fingerprint });
      return [{ event: "changed", secret, cluster }];
    }
    // A new Secret, or one that now names another cluster id: the old id goes first.
    const removed = this.#unregister(secret);
    if (this.#isStatic(cluster.id)) return [...removed, { event: "invalid", secret, problem: "static-cluster-id", clusterId: cluster.id }];
    if (this.#owners.has(cluster.id)) return [...removed, { event: "invalid", secret, problem: "duplicate-cluster-id", clusterId: cluster.id }];
    this.#bySecret.set(secret, { clusterId: cluster.id, data: fingerprint });
    this.#owners.set(cluster.id, secret);
    return [...removed, { event: "added", secret, cluster }];
  }

  /** A Secret was deleted (or lost its label). */
  remove(secret: string): FleetChange[] {
    return this.#unregister(secret);
  }

  /** A fresh list begins (after the watch broke): what it does not name is removed when it ends. */
  beginRelist(): void {
    this.#relisted = new Set();
  }

  /** The fresh list and its watch succeeded: the clusters whose Secrets it did not name are removed. */
  endRelist(): FleetChange[] {
    const seen = this.#relisted;
    this.#relisted = undefined;
    if (seen === undefined) return [];
    return [...this.#bySecret.keys()].filter((secret) => !seen.has(secret)).flatMap((secret) => this.#unregister(secret));
  }

  #unregister(secret: string): FleetChange[] {
    const previous = this.#bySecret.get(secret);
    if (previous === undefined) return [];
    this.#bySecret.delete(secret);
    this.#owners.delete(previous.clusterId);
    return [{ event: "removed", secret, clusterId: previous.clusterId }];
  }
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
  readonly #apply: (changes: FleetChange[]) => void;

  constructor(view: RegistryView, apply: (changes: FleetChange[]) => void) {
    this.#view = view;
    this.#apply = apply;
  }

  get size(): number {
    return this.#view.size;
  }

  put(secret: V1Secret): void {
    this.#apply(this.#view.put(secretName(secret), secret.data));
  }

  remove(secret: V1Secret): void {
    this.#apply(this.#view.remove(secretName(secret)));
  }

  /** Before a fresh list: the clusters stay registered (see the top of this file) until it ends. */
  clear(): void {
    this.#view.beginRelist();
  }

  synced(): void {
    this.#apply(this.#view.endRelist());
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
    this.#store = new RegistryStore(new RegistryView((id) => fleet.isStatic(id)), (changes) => this.#apply(fleet, changes));
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

  /** As readiness and metrics read an index: the registered clusters, and the watch's state. */
  size(): { clusterId: string; size: number; synced: boolean; hasSynced: boolean; lastSyncedAt: Date | undefined } {
    return { clusterId: this.#cluster.id, size: this.#store.size, synced: this.#watch.synced, hasSynced: this.#watch.hasSynced, lastSyncedAt: this.#watch.lastSyncedAt };
  }

  #apply(fleet: ClusterFleet, changes: FleetChange[]): void {
    for (const change of changes) {
      // Never crash the watch over one cluster: a failure to build it is logged, counted as invalid, and the cluster left out.
      try {
        switch (change.event) {
          case "added":
          case "changed":
            fleet.register(change.cluster, !this.#watch.hasSynced);
            this.#logger.info({ cluster_id: change.cluster.id, secret: change.secret, server: change.cluster.server }, `cluster ${change.event === "added" ? "registered" : "registration changed: clients rebuilt"}`);
            break;
          case "removed":
            fleet.unregister(change.clusterId);
            this.#logger.info({ cluster_id: change.clusterId, secret: change.secret }, "cluster unregistered");
            break;
          case "invalid":
            this.#logger.error({ secret: change.secret, problem: change.problem, ...(change.clusterId === undefined ? {} : { cluster_id: change.clusterId }) }, "cluster Secret ignored: it registers no cluster");
            break;
          default:
            change satisfies never;
        }
        publishClusterRegistryEvent(change.event);
      } catch (err) {
        publishClusterRegistryEvent("invalid");
        this.#logger.error({ secret: change.secret, err: { message: (err as Error).message } }, "cluster registration failed");
      }
    }
  }
}
