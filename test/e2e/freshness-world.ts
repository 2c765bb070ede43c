/**
 * Issue 45's end-to-end measurement, shared by test/e2e/freshness.test.ts (a few repetitions, bounds
 * asserted) and bench/freshness.ts (≥ 20 repetitions, tables): the Fundament world of
 * fundament-world.ts in a real kube-apiserver and a real OpenFGA, two portcullis replicas (two
 * processes on one configuration), and each way access ends (FUN-17 §10) applied while both
 * replicas answer a steady load of the same request, one check every ~10 ms each through a real
 * gRPC client. Measured per replica: the time from the API call's return to the first refused
 * answer (for a re-created ServiceAccount: the first allow whose token the API server accepts).
 *
 * The replicas reach kube-apiserver through a TCP proxy that can hang the watch streams open through
 * it (test/support/watch-freeze-proxy.ts), and OpenFGA through an HTTP proxy that can fail its
 * changes endpoint (test/support/openfga-changes-proxy.ts): "sources cut" is both at once.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AuthenticationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  RbacAuthorizationV1Api,
  type V1PolicyRule,
} from "@kubernetes/client-node";
import type { OpenFgaClient } from "@openfga/sdk";
import { Agent, fetch as undiciFetch } from "undici";
import { REVOCATIONS } from "../../src/kube-watch/revocations.ts";
import { revocationObject } from "../../src/cli/revoke.ts";
import { authorizationClient, type AuthorizationClient } from "../../src/envoy/protos.ts";
import { applyManifests, kubeConfig, startKubeApiserver, startOpenFGA, type KubeApiserver, type OpenFGA } from "../harness/index.ts";
import { makeTempDir } from "../harness/binaries.ts";
import { type CheckResponse, envoyCheckRequest, type RequestSpec, summarize } from "../support/envoy.ts";
import { startOpenFgaChangesProxy, type OpenFgaChangesProxy } from "../support/openfga-changes-proxy.ts";
import { freeAddresses, MAIN, NODE, type PortcullisAddresses } from "../support/portcullis-process.ts";
import { ids, OLD_SECRET, pluginToken, SECRET, userToken } from "../support/tokens.ts";
import { startWatchFreezeProxy, type WatchFreezeProxy } from "../support/watch-freeze-proxy.ts";
import { CERT_MANAGER_RBAC, certManagerDefinition, MODEL_FILE, REVOCATION_CRD, seedKubernetes, seedOpenFga, users } from "./fundament-world.ts";
import { UNPROVEN_TOKEN_TTL_MS } from "../../src/kube-calls/service-account-tokens.ts";

// ---------------------------------------------------------------------------------------------
// The world: real dependencies, the proxies in front of them, the replicas.

/**
 * How the replicas are configured. `live`: the short TTLs far above the bound asserted (30 s), so
 * only an event explains a refusal within it. `cut`: today's defaults (allow 5 s, deny 2 s), for the
 * runs where the event sources are cut.
 */
export type Profile = "live" | "cut";

const LIVE_ALLOW_TTL_MS = 30_000;
/** Only how fast a restored right comes back without events; no refusal measured here depends on it. */
const LIVE_DENY_TTL_MS = 2_000;
/** Today's defaults (src/config/schema.ts), which a cut source must fall back to. */
export const DEFAULT_ALLOW_TTL_MS = 5_000;
export const DEFAULT_DENY_TTL_MS = 2_000;
/** kube.watch.freshnessBoundMs's default: the plugin path closes past it when its sources are not proven fresh. */
export const DEFAULT_FRESHNESS_BOUND_MS = 10_000;

export interface Replica {
  readonly name: string;
  readonly addresses: PortcullisAddresses;
  readonly client: AuthorizationClient;
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  /** The last lines it wrote (stdout and stderr), for a failure's message. */
  tail(): string;
  /** Its /metrics text. */
  metrics(): Promise<string>;
}

export interface FreshnessWorld {
  readonly api: KubeApiserver;
  readonly fga: OpenFGA;
  readonly admin: KubeConfig;
  readonly fgaClient: OpenFgaClient;
  readonly kubeProxy: WatchFreezeProxy;
  readonly fgaProxy: OpenFgaChangesProxy;
  /** metadata.uid of the cert-manager PluginInstallation now (a deleted and re-created one has a new uid). */
  installationUid: string;
  replicas: Replica[];
  /** Stops the running replicas (if any) and starts two on `profile`'s configuration. */
  startReplicas(profile: Profile): Promise<void>;
  /** Cuts the event sources: hangs every watch open through the kube proxy, fails OpenFGA's changes endpoint. */
  cutSources(): void;
  restoreSources(): void;
  /** Whether every replica's event sources prove freshness again (/readyz?verbose: every `event source` line `[+]`). */
  sourcesProving(): Promise<boolean>;
  /** Sends a request to kube-apiserver as Envoy forwards it after an allow; the status. */
  replay(path: string, authorization: string): Promise<number>;
  /** Whether kube-apiserver authenticates `token` (a TokenReview). */
  tokenAccepted(token: string): Promise<boolean>;
  /** The uid of ServiceAccount `namespace/name` as it is now (read once, then kept by recreateServiceAccount). */
  serviceAccountUid(namespace: string, name: string): Promise<string>;
  readonly serviceAccountUids: Map<string, string>;
  stop(): Promise<void>;
}

export async function startFreshnessWorld(): Promise<FreshnessWorld> {
  const [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE })]);
  const admin = kubeConfig(api);
  const installation = await seedKubernetes(api);
  await applyManifests(api, [REVOCATION_CRD]);
  const fgaClient = await seedOpenFga(fga);

  const apiUrl = new URL(api.url);
  const kubeProxy = await startWatchFreezeProxy({ host: apiUrl.hostname, port: Number(apiUrl.port) });
  const fgaProxy = await startOpenFgaChangesProxy(fga.apiUrl);
  const dir = makeTempDir("freshness");
  // The replicas' kubeconfig: kube-apiserver's certificate names 127.0.0.1, so TLS holds through the proxy.
  const kubeconfig = join(dir, "kubeconfig.json");
  writeFileSync(kubeconfig, proxiedKubeconfig(`https://127.0.0.1:${kubeProxy.port}`, api.caPem, api.adminToken), { mode: 0o600 });

  const pool = new Agent({ connect: { ca: api.caPem } });
  const authn = admin.makeApiClient(AuthenticationV1Api);

  const world: FreshnessWorld = {
    api,
    fga,
    admin,
    fgaClient,
    kubeProxy,
    fgaProxy,
    installationUid: installation.metadata!.uid!,
    replicas: [],
    async startReplicas(profile) {
      await stopReplicas(world.replicas);
      const addresses = await Promise.all([freeAddresses(), freeAddresses()]);
      world.replicas = addresses.map((a, i) =>
        spawnReplica(`replica-${i + 1}`, join(dir, `replica-${i + 1}.json`), replicaConfig(profile, a, { openfga: fga, fgaUrl: fgaProxy.url, kubeconfig }), a),
      );
      await Promise.all(world.replicas.map(waitReady));
    },
    cutSources() {
      kubeProxy.freezeOpen();
      fgaProxy.failChanges(true);
    },
    restoreSources() {
      fgaProxy.failChanges(false);
      kubeProxy.thawAll();
    },
    async sourcesProving() {
      const pages = await Promise.all(world.replicas.map(async (r) => (await fetch(`http://${r.addresses.admin}/readyz?verbose`)).text()));
      return pages.every((page) => page.split("\n").every((line) => !line.startsWith("[-]event source")));
    },
    async replay(path, authorization) {
      const res = await undiciFetch(`${api.url}${path}`, { headers: { accept: "application/json", authorization }, dispatcher: pool });
      await res.body?.cancel();
      return res.status;
    },
    async tokenAccepted(token) {
      const review = await authn.createTokenReview({ body: { spec: { token } } });
      return review.status?.authenticated === true;
    },
    serviceAccountUids: new Map(),
    async serviceAccountUid(namespace, name) {
      const key = `${namespace}/${name}`;
      let uid = world.serviceAccountUids.get(key);
      if (uid === undefined) {
        uid = (await admin.makeApiClient(CoreV1Api).readNamespacedServiceAccount({ namespace, name })).metadata!.uid!;
        world.serviceAccountUids.set(key, uid);
      }
      return uid;
    },
    async stop() {
      await stopReplicas(world.replicas);
      await Promise.all([kubeProxy.stop(), fgaProxy.stop(), pool.close()]);
      await Promise.all([api.stop(), fga.stop()]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return world;
}

function proxiedKubeconfig(server: string, caPem: string, token: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "proxied", cluster: { server, "certificate-authority-data": Buffer.from(caPem).toString("base64") } }],
    users: [{ name: "proxied", user: { token } }],
    contexts: [{ name: "proxied", context: { cluster: "proxied", user: "proxied" } }],
    "current-context": "proxied",
  });
}

/** One configuration for both replicas; only the listen addresses differ (two processes cannot share a port). */
function replicaConfig(profile: Profile, listen: PortcullisAddresses, deps: { openfga: OpenFGA; fgaUrl: string; kubeconfig: string }): object {
  const ttls = profile === "live" ? { allowTtlMs: LIVE_ALLOW_TTL_MS, denyTtlMs: LIVE_DENY_TTL_MS } : {};
  return {
    listen,
    logLevel: "warn",
    check: { timeoutMs: 5_000 },
    tokens: { secrets: [{ env: "PORTCULLIS_SECRET" }, { env: "PORTCULLIS_OLD_SECRET" }] },
    openfga: { apiUrl: deps.fgaUrl, storeId: deps.openfga.storeId, authorizationModelId: deps.openfga.modelId, timeoutMs: 2_000, ...ttls },
    clusters: [{ id: ids.cluster, kubeconfig: deps.kubeconfig }],
    // Deadlines above a shared, noisy machine's worst call; the TTLs are what is measured.
    kube: { sar: { timeoutMs: 2_000, ...ttls }, tokenRequest: { timeoutMs: 2_000 } },
    revocations: { kubeconfig: deps.kubeconfig },
  };
}

const TAIL_BYTES = 16_384;

function spawnReplica(name: string, configFile: string, config: object, addresses: PortcullisAddresses): Replica {
  writeFileSync(configFile, JSON.stringify(config, null, 2));
  const child = spawn(NODE, [MAIN, "--config", configFile], {
    env: { PATH: process.env["PATH"] ?? "", PORTCULLIS_SECRET: SECRET, PORTCULLIS_OLD_SECRET: OLD_SECRET },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // Every PluginToken check writes an audit line: keep the end only.
  let tail = "";
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString()).slice(-TAIL_BYTES);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  return {
    name,
    addresses,
    child,
    client: authorizationClient(addresses.grpc),
    tail: () => tail,
    async metrics() {
      const res = await fetch(`http://${addresses.admin}/metrics`);
      return res.text();
    },
  };
}

async function waitReady(replica: Replica): Promise<void> {
  const deadline = performance.now() + 60_000;
  for (;;) {
    if (replica.child.exitCode !== null) throw new Error(`${replica.name} exited ${replica.child.exitCode}: ${replica.tail()}`);
    try {
      const res = await fetch(`http://${replica.addresses.admin}/readyz`, { signal: AbortSignal.timeout(1_000) });
      await res.body?.cancel();
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    if (performance.now() > deadline) throw new Error(`${replica.name} not ready after 60 s: ${replica.tail()}`);
    await sleep(100);
  }
}

async function stopReplicas(replicas: readonly Replica[]): Promise<void> {
  await Promise.all(
    replicas.map(async (r) => {
      r.client.close();
      if (r.child.exitCode !== null || r.child.signalCode !== null) return;
      const exited = new Promise((resolveExit) => r.child.once("exit", resolveExit));
      r.child.kill("SIGKILL");
      await exited;
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// The steady load: one check after another at each replica, every ~10 ms, judged end to end.

/** One answer of the load, judged. */
export interface Answer {
  /** When the outcome was known (performance.now()): the check's answer, or the replay's after an allow. */
  readonly at: number;
  /** The request went through: allowed, and (per the change's judge) accepted by the API server. */
  readonly ok: boolean;
  /** Why not: portcullis's reason, `api-server-<status>`, `token-rejected`, or the gRPC error. */
  readonly reason?: string | undefined;
  /** The ServiceAccount token an allow carried (`token-accepted` only). */
  readonly token?: string;
}

/**
 * How an answer is judged:
 *  - `gateway`: portcullis's verdict alone;
 *  - `api-server`: an allow is replayed against kube-apiserver with the injected token, as Envoy
 *    forwards it; a 401/403 there is a refusal (the plugin's RBAC is the cluster's to enforce);
 *  - `token-accepted`: an allow counts only if the token it carries is one kube-apiserver accepts:
 *    issued for the ServiceAccount as it is now. A ServiceAccount token names its account's uid, and
 *    kube-apiserver rejects a token whose account is gone or has another uid (re-created under the
 *    same name); a TokenReview asked right after the re-creation can still see the old account (its
 *    informer lags by milliseconds), so the answer is judged by the uid the token names against the
 *    uid the re-creation returned, and the token measured is then confirmed by a TokenReview
 *    (measureChange).
 */
export type Judge = "gateway" | "api-server" | "token-accepted";

export class SteadyLoad {
  readonly answers: Answer[] = [];
  #running = true;
  readonly #done: Promise<void>;
  readonly #world: FreshnessWorld;
  readonly #replica: Replica;
  readonly #request: () => Promise<RequestSpec>;
  readonly #judge: Judge;

  constructor(world: FreshnessWorld, replica: Replica, request: () => Promise<RequestSpec>, judge: Judge, intervalMs = 10) {
    this.#world = world;
    this.#replica = replica;
    this.#request = request;
    this.#judge = judge;
    this.#done = this.#run(intervalMs);
  }

  /** The answers known at or after `since`. */
  since(since: number): Answer[] {
    const out: Answer[] = [];
    for (let i = this.answers.length - 1; i >= 0 && this.answers[i]!.at >= since; i -= 1) out.unshift(this.answers[i]!);
    return out;
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#done;
  }

  async #run(intervalMs: number): Promise<void> {
    while (this.#running) {
      const started = performance.now();
      this.answers.push(await this.#one());
      // Bounded memory over a long bench: only the recent answers are ever read.
      if (this.answers.length > 20_000) this.answers.splice(0, 10_000);
      const wait = started + intervalMs - performance.now();
      if (wait > 0) await sleep(wait);
    }
  }

  async #one(): Promise<Answer> {
    const spec = await this.#request();
    let verdict: ReturnType<typeof summarize>;
    try {
      verdict = summarize((await this.#replica.client.check(envoyCheckRequest(spec), { deadline: Date.now() + 10_000 })) as CheckResponse);
    } catch (err) {
      return { at: performance.now(), ok: false, reason: `grpc: ${(err as Error).message}` };
    }
    const at = performance.now();
    if (!verdict.allowed) return { at, ok: false, reason: verdict.reason ?? `http ${verdict.http}` };
    const authorization = verdict.set["authorization"] ?? "";
    switch (this.#judge) {
      case "gateway":
        return { at, ok: true };
      case "api-server": {
        const status = await this.#world.replay(spec.path.replace(`/clusters/${ids.cluster}`, ""), authorization);
        return status >= 200 && status < 300 ? { at: performance.now(), ok: true } : { at: performance.now(), ok: false, reason: `api-server-${status}` };
      }
      case "token-accepted": {
        const token = authorization.replace(/^Bearer /, "");
        const account = serviceAccountOf(token);
        if (account === undefined) return { at, ok: false, reason: "not-a-serviceaccount-token", token };
        const current = await this.#world.serviceAccountUid(account.namespace, account.name);
        return account.uid === current ? { at, ok: true, token } : { at, ok: false, reason: "token-of-a-previous-serviceaccount", token };
      }
    }
  }
}

/** The ServiceAccount a (JWT) ServiceAccount token names, read without verifying it: kube-apiserver does that. */
function serviceAccountOf(token: string): { namespace: string; name: string; uid: string } | undefined {
  try {
    const claims = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString()) as {
      "kubernetes.io"?: { namespace?: string; serviceaccount?: { name?: string; uid?: string } };
    };
    const k = claims["kubernetes.io"];
    const sa = k?.serviceaccount;
    return k?.namespace && sa?.name && sa.uid ? { namespace: k.namespace, name: sa.name, uid: sa.uid } : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// The changes (FUN-17 §10): what is asked, what is changed, how it is undone.

const CERT = "/apis/cert-manager.io/v1";
const cluster = (path: string) => `/clusters/${ids.cluster}${path}`;

/** The same bytes with another version: a definition of the same permissions under another hash. */
const REVOKED_DEFINITION_HASH = `sha256:${createHash("sha256").update(certManagerDefinition(CERT_MANAGER_RBAC).bytes.replace("1.4.0", "1.4.1-revoked")).digest("hex")}`;
const PINNED_DEFINITION_HASH = certManagerDefinition(CERT_MANAGER_RBAC).hash;

export interface Change {
  readonly id: string;
  /** The table's row. */
  readonly label: string;
  /** `refused`: measured to the first refusal; `succeeds`: to the first allow whose token the API server accepts. */
  readonly until: "refused" | "succeeds";
  readonly judge: Judge;
  /** The reason a refusal must carry when the sources are live. */
  readonly reason?: string;
  /** What bounds the row, sources live and sources cut (docs/operations.md). */
  readonly bound: { readonly live: string; readonly cut: string };
  /** Measured with the sources cut within today's TTLs: false where the cut source has no short TTL to fall back to. */
  readonly cutWithinTtl: boolean;
  /**
   * With the sources cut, refused within this (ms) of the change though no TTL bounds it: the
   * Revocation and PluginInstallation indexes close the plugin path (503) once not proven fresh
   * within kube.watch.freshnessBoundMs (issue 52), and their last proof precedes the cut.
   */
  readonly cutBoundMs?: number;
  request(world: FreshnessWorld): Promise<RequestSpec>;
  /** Before the first repetition, and after the last. */
  setUp?(world: FreshnessWorld): Promise<void>;
  tearDown?(world: FreshnessWorld): Promise<void>;
  /** The change; resolves when its (last) API call has returned. */
  apply(world: FreshnessWorld): Promise<void>;
  /** Undoes it. */
  restore?(world: FreshnessWorld): Promise<void>;
}

/** PluginTokens and UserTokens, minted once per subject and installation and again before they expire. */
const minted = new Map<string, { token: string; at: number }>();
async function token(kind: "plugin" | "user", sub: string, installationId: string): Promise<string> {
  const key = `${kind}/${sub}/${installationId}`;
  const held = minted.get(key);
  if (held !== undefined && performance.now() - held.at < 300_000) return held.token;
  const fresh = kind === "plugin" ? await pluginToken({ sub, installation_id: installationId }) : await userToken({ sub });
  minted.set(key, { token: fresh, at: performance.now() });
  return fresh;
}

function pluginRequest(user: string, path: string): (world: FreshnessWorld) => Promise<RequestSpec> {
  return async (world) => ({
    path: cluster(path),
    headers: { authorization: `Bearer ${await token("plugin", user, world.installationUid)}` },
    policy: "kube-api-proxy",
  });
}

const rbac = (w: FreshnessWorld) => w.admin.makeApiClient(RbacAuthorizationV1Api);
const core = (w: FreshnessWorld) => w.admin.makeApiClient(CoreV1Api);
const custom = (w: FreshnessWorld) => w.admin.makeApiClient(CustomObjectsApi);
const INSTALLATIONS = { group: "plugins.fundament.io", version: "v1", plural: "plugininstallations" } as const;
const userSubject = (id: string) => [{ kind: "ServiceAccount", name: `fundament-${id}`, namespace: "fundament-system" }];
const clusterRole = (name: string) => ({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name });
const VIEWER_RULES = (verbs: string[]): V1PolicyRule[] => [{ apiGroups: ["cert-manager.io"], resources: ["certificates"], verbs }];

async function recreateServiceAccount(world: FreshnessWorld, namespace: string, name: string): Promise<void> {
  await core(world).deleteNamespacedServiceAccount({ namespace, name });
  const created = await core(world).createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  world.serviceAccountUids.set(`${namespace}/${name}`, created.metadata!.uid!);
}

async function repin(world: FreshnessWorld, hash: string): Promise<void> {
  await custom(world).patchClusterCustomObject({
    ...INSTALLATIONS,
    name: "cert-manager",
    body: [{ op: "replace", path: "/spec/definitionRef/definitionHash", value: hash }],
  });
}

const REVOKED_DEFINITION = revocationObject({ scope: "plugin", pluginName: "cert-manager", definitionHash: REVOKED_DEFINITION_HASH }, "freshness: a revoked definition to re-pin onto");
const revokedInstallation = (world: FreshnessWorld) => revocationObject({ scope: "installation", installationId: world.installationUid }, "freshness: revocation applied");
const nameOf = (obj: Record<string, unknown>) => (obj["metadata"] as { name: string }).name;

const SAR_EVENT = "RBAC watch event (kube-rbac) → SubjectAccessReview answers dropped";
/** A hung change-feed watch is aborted 2 s past its 3 s timeout (src/kube-watch/change-feed-watch.ts) and opened again on a new connection. */
const STALL = "the hung watch proves nothing past what it delivered (its stall detection: 3 s timeout + 2 s grace, then a new watch's event)";
const TOKEN_TTL = `${STALL}; at most the token's unproven TTL (${UNPROVEN_TOKEN_TTL_MS / 1000} s: kept longer only while kube-serviceaccounts proves) and a TokenRequest`;
const SAR_TTL = `${STALL}; at most the SubjectAccessReview allow TTL (kube.sar.allowTtlMs, ${DEFAULT_ALLOW_TTL_MS / 1000} s)`;

/**
 * Each way access ends, in an order that keeps the rows apart: the one judged by the API server
 * first, the ServiceAccounts last (a stale token cached by a replica without the ServiceAccount
 * watch would read as a refusal in a row replayed after them).
 */
export const CHANGES: readonly Change[] = [
  {
    id: "rolebinding-deleted",
    label: "RoleBinding deleted",
    until: "refused",
    judge: "gateway",
    reason: "user-sar-denied",
    bound: { live: SAR_EVENT, cut: SAR_TTL },
    cutWithinTtl: true,
    request: pluginRequest(users.alice, `${CERT}/namespaces/team-a/certificates/web`),
    apply: async (w) => void (await rbac(w).deleteNamespacedRoleBinding({ namespace: "team-a", name: "alice-cert-editor" })),
    restore: async (w) =>
      void (await rbac(w).createNamespacedRoleBinding({
        namespace: "team-a",
        body: { metadata: { name: "alice-cert-editor" }, roleRef: clusterRole("project-cert-editor"), subjects: userSubject(users.alice) },
      })),
  },
  {
    id: "plugin-clusterrole-narrowed",
    label: "ClusterRole narrowed (plugin re-consent)",
    until: "refused",
    judge: "api-server",
    reason: "api-server-403",
    bound: {
      live: "kube-apiserver's RBAC authorizer (the plugin's token is the one injected; nothing of it is cached)",
      cut: "kube-apiserver's RBAC authorizer (unchanged by the cut)",
    },
    cutWithinTtl: true,
    request: pluginRequest(users.alice, "/api/v1/namespaces/team-a/secrets/cert-manager-webhook-ca"),
    apply: async (w) =>
      void (await rbac(w).replaceClusterRole({
        name: "plugin-cert-manager",
        body: { metadata: { name: "plugin-cert-manager" }, rules: CERT_MANAGER_RBAC.filter((r) => !r.resources?.includes("secrets")) },
      })),
    restore: async (w) => void (await rbac(w).replaceClusterRole({ name: "plugin-cert-manager", body: { metadata: { name: "plugin-cert-manager" }, rules: CERT_MANAGER_RBAC } })),
  },
  {
    id: "user-clusterrole-narrowed",
    label: "ClusterRole narrowed (the user's)",
    until: "refused",
    judge: "gateway",
    reason: "user-sar-denied",
    bound: { live: SAR_EVENT, cut: SAR_TTL },
    cutWithinTtl: true,
    request: pluginRequest(users.bob, `${CERT}/namespaces/team-c/certificates/web`),
    apply: async (w) =>
      void (await rbac(w).replaceClusterRole({ name: "project-cert-viewer", body: { metadata: { name: "project-cert-viewer" }, rules: VIEWER_RULES(["list", "watch"]) } })),
    restore: async (w) =>
      void (await rbac(w).replaceClusterRole({ name: "project-cert-viewer", body: { metadata: { name: "project-cert-viewer" }, rules: VIEWER_RULES(["get", "list", "watch"]) } })),
  },
  {
    id: "clusterrolebinding-removed",
    label: "ClusterRoleBinding removed",
    until: "refused",
    judge: "gateway",
    reason: "user-sar-denied",
    bound: { live: SAR_EVENT, cut: SAR_TTL },
    cutWithinTtl: true,
    request: pluginRequest(users.bob, `${CERT}/namespaces/team-c/certificates/web`),
    apply: async (w) => void (await rbac(w).deleteClusterRoleBinding({ name: "bob-cert-viewer" })),
    restore: async (w) =>
      void (await rbac(w).createClusterRoleBinding({
        body: { metadata: { name: "bob-cert-viewer" }, roleRef: clusterRole("project-cert-viewer"), subjects: userSubject(users.bob) },
      })),
  },
  {
    id: "openfga-viewer-deleted",
    label: "OpenFGA viewer tuple deleted",
    until: "refused",
    judge: "gateway",
    reason: "can-view-denied",
    bound: {
      live: "OpenFGA ReadChanges (openfga-changes) → can_view answers dropped; changes read every openfga.changesPollMs (250 ms)",
      cut: `can_view allow TTL (openfga.allowTtlMs, ${DEFAULT_ALLOW_TTL_MS / 1000} s)`,
    },
    cutWithinTtl: true,
    request: pluginRequest(users.bob, `${CERT}/namespaces/team-c/certificates/web`),
    apply: async (w) => void (await w.fgaClient.write({ deletes: [{ user: `user:${users.bob}`, relation: "viewer", object: "organization:acme" }] })),
    restore: async (w) => void (await w.fgaClient.write({ writes: [{ user: `user:${users.bob}`, relation: "viewer", object: "organization:acme" }] })),
  },
  {
    id: "installation-repinned",
    label: "installation re-pinned (onto a revoked definition)",
    until: "refused",
    judge: "gateway",
    reason: "revoked",
    bound: {
      live: "PluginInstallation watch (the index holds the pin; no cache keyed by it)",
      cut: "the PluginInstallation watch hung: given up 2 s past its 3 s timeout, 503 for that cluster's PluginToken requests while it lists again (at most kube.watch.freshnessBoundMs, 10 s, unproven)",
    },
    cutWithinTtl: false,
    cutBoundMs: DEFAULT_FRESHNESS_BOUND_MS,
    request: pluginRequest(users.alice, `${CERT}/namespaces/team-a/certificates/web`),
    setUp: async (w) => void (await custom(w).createClusterCustomObject({ ...REVOCATIONS, body: REVOKED_DEFINITION })),
    tearDown: async (w) => void (await custom(w).deleteClusterCustomObject({ ...REVOCATIONS, name: nameOf(REVOKED_DEFINITION) })),
    apply: (w) => repin(w, REVOKED_DEFINITION_HASH),
    restore: (w) => repin(w, PINNED_DEFINITION_HASH),
  },
  {
    id: "revocation-applied",
    label: "Revocation applied",
    until: "refused",
    judge: "gateway",
    reason: "revoked",
    bound: {
      live: "Revocation watch (the deny-list; no cache keyed by it)",
      cut: "the Revocation watch hung: given up 2 s past its 3 s timeout, 503 for every PluginToken request while it lists again (at most kube.watch.freshnessBoundMs, 10 s, unproven)",
    },
    cutWithinTtl: false,
    cutBoundMs: DEFAULT_FRESHNESS_BOUND_MS,
    request: pluginRequest(users.alice, `${CERT}/namespaces/team-a/certificates/web`),
    apply: async (w) => void (await custom(w).createClusterCustomObject({ ...REVOCATIONS, body: revokedInstallation(w) })),
    restore: async (w) => void (await custom(w).deleteClusterCustomObject({ ...REVOCATIONS, name: nameOf(revokedInstallation(w)) })),
  },
  {
    id: "installation-deleted",
    label: "installation deleted",
    until: "refused",
    judge: "gateway",
    reason: "installation-unavailable",
    bound: {
      live: "PluginInstallation watch (the plugin ServiceAccount's token is cached per installation uid)",
      cut: "the PluginInstallation watch hung: given up 2 s past its 3 s timeout, 503 for that cluster's PluginToken requests while it lists again (at most kube.watch.freshnessBoundMs, 10 s, unproven)",
    },
    cutWithinTtl: false,
    cutBoundMs: DEFAULT_FRESHNESS_BOUND_MS,
    request: pluginRequest(users.alice, `${CERT}/namespaces/team-a/certificates/web`),
    apply: async (w) => void (await custom(w).deleteClusterCustomObject({ ...INSTALLATIONS, name: "cert-manager" })),
    async restore(w) {
      const created = (await custom(w).createClusterCustomObject({
        ...INSTALLATIONS,
        body: {
          apiVersion: "plugins.fundament.io/v1",
          kind: "PluginInstallation",
          metadata: { name: "cert-manager" },
          spec: { organizationId: "org-acme", definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_DEFINITION_HASH } },
        },
      })) as { metadata: { uid: string } };
      w.installationUid = created.metadata.uid;
    },
  },
  {
    id: "user-serviceaccount-recreated",
    label: "per-user ServiceAccount deleted and re-created",
    until: "succeeds",
    judge: "token-accepted",
    bound: {
      live: "ServiceAccount watch (kube-serviceaccounts) → the account's cached token dropped",
      cut: TOKEN_TTL,
    },
    cutWithinTtl: true,
    request: async () => ({
      path: cluster(`${CERT}/namespaces/team-a/certificates`),
      headers: { authorization: `Bearer ${await token("user", users.alice, "-")}` },
      policy: "kube-api-proxy",
    }),
    apply: (w) => recreateServiceAccount(w, "fundament-system", `fundament-${users.alice}`),
  },
  {
    id: "plugin-serviceaccount-recreated",
    label: "plugin ServiceAccount re-created",
    until: "succeeds",
    judge: "token-accepted",
    bound: {
      live: "ServiceAccount watch (kube-serviceaccounts) → the account's cached token dropped",
      cut: TOKEN_TTL,
    },
    cutWithinTtl: true,
    request: pluginRequest(users.alice, `${CERT}/namespaces/team-a/certificates/web`),
    apply: (w) => recreateServiceAccount(w, "plugin-cert-manager", "plugin-cert-manager"),
  },
];

// ---------------------------------------------------------------------------------------------
// One repetition: the steady state, the change, each replica's first refusal (or success), undone.

export interface Repetition {
  /** Per replica, in world.replicas' order: milliseconds from the API call's return; undefined when not within the cap. */
  readonly ms: ReadonlyArray<number | undefined>;
  /** Per replica: the reason of the answer measured (a refusal's). */
  readonly reasons: ReadonlyArray<string | undefined>;
  /** Not measured: the steady state before the change was not reached (what, per replica). */
  readonly notSteady?: string;
}

export interface RunOptions {
  /** Cut the event sources right before each change (and restore them after). */
  readonly cut: boolean;
  /** How long to wait for the refusal (or success) at each replica. */
  readonly capMs: number;
  /** How long to wait for the steady state (restored and answered from cache) before a change. */
  readonly steadyCapMs: number;
  /** Called after each repetition (the bench prints progress). */
  readonly onRepetition?: (change: Change, index: number, repetition: Repetition) => void;
}

/** Answers in a row that must all be ok before a change: the steady state, answered from cache. */
const STEADY_ANSWERS = 5;

/** Runs `repetitions` of `change` against both replicas under a steady load; the measurements. */
export async function measureChange(world: FreshnessWorld, change: Change, repetitions: number, options: RunOptions): Promise<Repetition[]> {
  const loads = world.replicas.map((r) => new SteadyLoad(world, r, () => change.request(world), change.judge));
  const out: Repetition[] = [];
  try {
    await change.setUp?.(world);
    for (let i = 0; i < repetitions; i += 1) {
      // Each cut starts from sources that prove again: a feed cut again before one of its watches
      // could end cleanly stays in its backoff, and the next figure would measure that backoff.
      const proving = options.cut ? await untilSourcesProving(world, options.steadyCapMs) : undefined;
      const steady = proving ?? (await untilSteady(loads, options.steadyCapMs));
      if (steady !== undefined) {
        const repetition: Repetition = { ms: loads.map(() => undefined), reasons: loads.map(() => undefined), notSteady: steady };
        out.push(repetition);
        options.onRepetition?.(change, i, repetition);
        // The state is not one a change can be measured from: a further repetition would not be either.
        break;
      }
      if (options.cut) {
        world.cutSources();
        // The cut is in force before the change is written.
        await sleep(100);
      }
      await change.apply(world);
      const appliedAt = performance.now();
      const measured = await firstAnswers(loads, appliedAt, change.until === "refused" ? (a) => !a.ok : (a) => a.ok, options.capMs);
      const repetition = change.judge === "token-accepted" ? await confirmedByTokenReview(world, measured) : measured;
      out.push(repetition);
      options.onRepetition?.(change, i, repetition);
      if (options.cut) world.restoreSources();
      await change.restore?.(world);
    }
  } finally {
    if (options.cut) world.restoreSources();
    await Promise.all(loads.map((l) => l.stop()));
    await change.tearDown?.(world);
  }
  return out;
}

/** Undefined once every replica's event sources prove freshness; else why not. */
async function untilSourcesProving(world: FreshnessWorld, capMs: number): Promise<string | undefined> {
  const deadline = performance.now() + capMs;
  while (!(await world.sourcesProving())) {
    if (performance.now() > deadline) return `event sources not proving ${capMs} ms after they were restored`;
    await sleep(100);
  }
  return undefined;
}

/** Undefined once every replica's last STEADY_ANSWERS answers went through; else what each answered last. */
async function untilSteady(loads: readonly SteadyLoad[], capMs: number): Promise<string | undefined> {
  const deadline = performance.now() + capMs;
  for (;;) {
    const lasts = loads.map((l) => l.answers.slice(-STEADY_ANSWERS));
    if (lasts.every((last) => last.length === STEADY_ANSWERS && last.every((a) => a.ok))) return undefined;
    if (performance.now() > deadline) return lasts.map((last, i) => `replica ${i + 1}: ${last.at(-1)?.reason ?? (last.at(-1)?.ok ? "ok" : "no answer")}`).join(", ");
    await sleep(20);
  }
}

/**
 * The tokens measured as the first accepted, confirmed by kube-apiserver (a TokenReview, retried
 * while its informer may still lag): one it rejects makes that replica's figure unmeasured.
 */
async function confirmedByTokenReview(world: FreshnessWorld, measured: Repetition & { tokens: ReadonlyArray<string | undefined> }): Promise<Repetition> {
  const confirmed = await Promise.all(
    measured.tokens.map(async (token) => {
      if (token === undefined) return true;
      for (let attempt = 0; attempt < 20; attempt += 1) {
        if (await world.tokenAccepted(token)) return true;
        await sleep(100);
      }
      return false;
    }),
  );
  return {
    ms: measured.ms.map((ms, i) => (confirmed[i] ? ms : undefined)),
    reasons: measured.reasons.map((reason, i) => (confirmed[i] ? reason : "token-rejected-by-tokenreview")),
  };
}

async function firstAnswers(
  loads: readonly SteadyLoad[],
  since: number,
  wanted: (a: Answer) => boolean,
  capMs: number,
): Promise<Repetition & { tokens: ReadonlyArray<string | undefined> }> {
  const found: Array<Answer | undefined> = loads.map(() => undefined);
  const deadline = since + capMs;
  while (found.some((f) => f === undefined) && performance.now() <= deadline) {
    loads.forEach((load, i) => {
      if (found[i] === undefined) found[i] = load.since(since).find(wanted);
    });
    await sleep(5);
  }
  return {
    ms: found.map((a) => (a === undefined || a.at - since > capMs ? undefined : a.at - since)),
    reasons: found.map((a, i) => (a !== undefined ? a.reason : loads[i]!.answers.at(-1)?.reason)),
    tokens: found.map((a) => a?.token),
  };
}

// ---------------------------------------------------------------------------------------------
// Reporting.

export interface Row {
  readonly change: Change;
  readonly repetitions: readonly Repetition[];
}

/** One Markdown table for replica `replica` (0-based): change | p50 | p99 | max | what bounds it. */
export function markdownTable(rows: readonly Row[], replica: number, mode: "live" | "cut", capMs: (row: Row) => number): string {
  const lines = ["| change | n | p50 (ms) | p99 (ms) | max (ms) | what bounds it |", "| --- | --: | --: | --: | --: | --- |"];
  for (const row of rows) {
    const measured = row.repetitions.filter((r) => r.notSteady === undefined);
    const values = measured.map((r) => r.ms[replica]);
    const within = values.filter((v): v is number => v !== undefined).sort((a, b) => a - b);
    const over = values.length - within.length;
    // The q-quantile by nearest rank; values past the cap sort last: a quantile among them is "> cap".
    const cell = (q: number): string => {
      if (values.length === 0) return "–";
      const rank = Math.min(values.length - 1, Math.max(0, Math.ceil(q * values.length) - 1));
      return rank < within.length ? within[rank]!.toFixed(0) : `> ${capMs(row)}`;
    };
    const label = row.change.until === "succeeds" ? `${row.change.label} (until the first accepted token)` : row.change.label;
    const note = row.repetitions.length > measured.length ? ` (${row.repetitions.length - measured.length} not measured: no steady state)` : over > 0 ? ` (${over} over the cap)` : "";
    lines.push(`| ${label} | ${values.length} | ${cell(0.5)} | ${cell(0.99)} | ${cell(1)} | ${row.change.bound[mode]}${note} |`);
  }
  return lines.join("\n");
}
