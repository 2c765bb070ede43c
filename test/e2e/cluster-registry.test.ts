/**
 * The live cluster registry (issue 16) against a real kube-apiserver and a real OpenFGA, with
 * portcullis as a real process (`node src/cli/main.ts --config FILE`) answering gRPC Checks built
 * from the vendored Envoy protos. While a steady stream of PluginToken checks for static cluster A
 * runs (one every 25 ms, every answer recorded), cluster B is registered by creating its Secret,
 * served, has its credential rotated (the old one then revoked, so only the new one can work), and
 * is removed; A answers every check allowed and /readyz stays 200 throughout. Secrets that are not
 * valid registrations register nothing and break nothing (nor take the static cluster's id, nor a
 * registered one's: a second Secret claiming a registered id takes it out of service, never over). A cluster registered with an API server that accepts connections and never
 * answers gets 503s within the check's deadline, beside an undisturbed A.
 *
 * Issue 42: a second process started while two Secrets claim cluster F (the real one and an
 * attacker's `aaa-…`, which its first list meets first) serves F to no one — no Envoy cluster in its
 * CDS, checks 404 unknown-cluster, the conflict on /readyz?verbose, in its metrics and its log — nor
 * does the process already running; deleting the attacker's Secret serves F from the real one on both.
 *
 * One kube-apiserver plays every part: it is the management cluster holding the registry's Secrets,
 * static cluster A (the admin kubeconfig) and registered cluster B (a Secret naming the same API
 * server under another cluster id, reached with a ServiceAccount credential of its own). The
 * PluginInstallation and the RBAC therefore exist "on" both clusters.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { request } from "node:https";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api, type V1Secret } from "@kubernetes/client-node";
import type { OpenFgaClient } from "@openfga/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { CLUSTER_TYPE_URL } from "../../src/deploy/cluster-discovery.ts";
import { type AuthorizationClient, authorizationClient, LOAD_OPTIONS } from "../../src/envoy/protos.ts";
import { kubeConfig, type KubeApiserver, type OpenFGA, startKubeApiserver, startOpenFGA } from "../harness/index.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { freeAddresses, type PortcullisProcess, spawnPortcullisFile } from "../support/portcullis-process.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { MODEL_FILE, seedKubernetes, seedOpenFga, users } from "./fundament-world.ts";

const CLUSTER_A = ids.cluster;
const CLUSTER_B = "b1b1b1b1-0000-4000-8000-00000000000b";
/** Named by the invalid Secrets and the unlabelled one: never registered. */
const CLUSTER_C = "c1c1c1c1-0000-4000-8000-00000000000c";
/** The valid registration that follows the invalid Secrets: once it is served, they were all read. */
const CLUSTER_D = "d1d1d1d1-0000-4000-8000-00000000000d";
/** Registered with an API server that accepts connections and never answers. */
const CLUSTER_HUNG = "e1e1e1e1-0000-4000-8000-00000000000e";
/** Claimed by two Secrets (issue 42). */
const CLUSTER_F = "f1f1f1f1-0000-4000-8000-00000000000f";
const REGISTRY_NAMESPACE = "portcullis-clusters";
const CLUSTER_LABEL = { "portcullis.fundament.io/secret-type": "cluster" };
/** Where portcullis's own identities on the registered clusters live. */
const REMOTE_NAMESPACE = "portcullis-remote";

/** Behaviour bounds, generous on purpose: two cores shared with other suites (performance is not asserted). */
const SERVED_WITHIN_MS = 15_000;
/** portcullis's deadlines here: far above the machine's worst moments, so a 503 means a dependency, not the load. */
const CHECK_TIMEOUT_MS = 8_000;
const REVIEW_TIMEOUT_MS = 4_000;
const A_EVERY_MS = 25;

let api: KubeApiserver;
let fga: OpenFGA;
let admin: KubeConfig;
let core: CoreV1Api;
let fgaClient: OpenFgaClient;
let dir: string;
let portcullis: PortcullisProcess;
let client: AuthorizationClient;
let installationUid: string;
const tokens = new Map<string, string>();

beforeAll(async () => {
  [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE })]);
  admin = kubeConfig(api);
  core = admin.makeApiClient(CoreV1Api);
  installationUid = (await seedKubernetes(api)).metadata!.uid!;
  fgaClient = await seedOpenFga(fga);
  // The platform registers each cluster in OpenFGA too: without it can_view (gate 3, before
  // cluster-known) would deny B, C and D with 403 and never reach the registry's answer.
  await fgaClient.write({ writes: [CLUSTER_B, CLUSTER_C, CLUSTER_D, CLUSTER_HUNG, CLUSTER_F].map((id) => ({ user: "organization:acme", relation: "owner", object: `cluster:${id}` })) });
  await seedRemoteIdentities();
  await core.createNamespace({ body: { metadata: { name: REGISTRY_NAMESPACE } } });

  dir = mkdtempSync(join(tmpdir(), "portcullis-cluster-registry-"));
  portcullis = await startPortcullis("portcullis.yaml");
  client = authorizationClient(portcullis.addresses.grpc);
  for (const cluster of [CLUSTER_A, CLUSTER_B, CLUSTER_C, CLUSTER_D, CLUSTER_HUNG, CLUSTER_F]) {
    tokens.set(cluster, await pluginToken({ sub: users.alice, cluster_id: cluster, installation_id: installationUid }));
  }
  await until(async () => (await readyz().catch(() => 0)) === 200, 60_000, "portcullis to be ready", () => portcullis.stderr());
  await until(async () => (await check(CLUSTER_A)) === "allowed", SERVED_WITHIN_MS, "static cluster A to be served");
}, 240_000);

/** A portcullis process of its own (its own ports), configured as every replica is. */
async function startPortcullis(file: string): Promise<PortcullisProcess> {
  const addresses = await freeAddresses();
  const config = join(dir, file);
  writeFileSync(
    config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
logLevel: info
shutdown: { drainMs: 0 }
check: { timeoutMs: ${CHECK_TIMEOUT_MS} }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
openfga: { apiUrl: "${fga.apiUrl}", storeId: "${fga.storeId}", authorizationModelId: "${fga.modelId}", timeoutMs: ${REVIEW_TIMEOUT_MS}, allowTtlMs: 1000, denyTtlMs: 300 }
kube:
  sar: { timeoutMs: ${REVIEW_TIMEOUT_MS}, allowTtlMs: 1000, denyTtlMs: 300 }
  tokenRequest: { timeoutMs: ${REVIEW_TIMEOUT_MS} }
clusters: [{ id: "${CLUSTER_A}", kubeconfig: "${api.kubeconfigPath}" }]
clusterRegistry: { namespace: "${REGISTRY_NAMESPACE}", kubeconfig: "${api.kubeconfigPath}" }
`,
  );
  return spawnPortcullisFile(config, addresses);
}

async function stopPortcullis(process: PortcullisProcess): Promise<void> {
  process.child.kill("SIGTERM");
  await Promise.race([process.exited, sleep(10_000)]);
  process.kill();
}

afterAll(async () => {
  client?.close();
  if (portcullis !== undefined) await stopPortcullis(portcullis);
  await Promise.all([api?.stop(), fga?.stop()]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/**
 * What portcullis needs on a registered cluster (reviews, token requests, the installation watch),
 * granted to two ServiceAccounts: one credential and the one it is rotated to.
 */
async function seedRemoteIdentities(): Promise<void> {
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespace({ body: { metadata: { name: REMOTE_NAMESPACE } } });
  await rbac.createClusterRole({
    body: {
      metadata: { name: "portcullis-remote" },
      rules: [
        { apiGroups: ["authorization.k8s.io"], resources: ["subjectaccessreviews"], verbs: ["create"] },
        { apiGroups: [""], resources: ["serviceaccounts/token"], verbs: ["create"] },
        { apiGroups: ["plugins.fundament.io"], resources: ["plugininstallations"], verbs: ["get", "list", "watch"] },
      ],
    },
  });
  for (const name of ["portcullis-1", "portcullis-2"]) {
    await core.createNamespacedServiceAccount({ namespace: REMOTE_NAMESPACE, body: { metadata: { name } } });
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: `portcullis-remote-${name}` },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "portcullis-remote" },
        subjects: [{ kind: "ServiceAccount", name, namespace: REMOTE_NAMESPACE }],
      },
    });
  }
}

/** A bound token for one of portcullis's remote identities (a TokenRequest, as `kubectl create token` makes). */
async function remoteCredential(serviceAccount: string): Promise<string> {
  const review = await core.createNamespacedServiceAccountToken({
    name: serviceAccount,
    namespace: REMOTE_NAMESPACE,
    body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { audiences: [], expirationSeconds: 3600 } },
  });
  return review.status!.token!;
}

function clusterSecret(name: string, data: Record<string, string>, labels: Record<string, string> = CLUSTER_LABEL): V1Secret {
  return { metadata: { name, namespace: REGISTRY_NAMESPACE, labels }, stringData: data };
}

/** The registration the Secret contract describes: id, server, CA, bearer credential. */
function registration(clusterId: string, token: string): Record<string, string> {
  return { clusterId, server: api.url, "ca.crt": api.caPem, token };
}

const certificatePath = (cluster: string, name: string) => `/clusters/${cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/${name}`;

/** One PluginToken check as Envoy sends it (to the first process, or `via`); the whole answer. */
async function checkResponse(cluster: string, name = "web", via: AuthorizationClient = client) {
  return summarize(
    (await via.check(
      envoyCheckRequest({ path: certificatePath(cluster, name), headers: { authorization: `Bearer ${tokens.get(cluster)!}` }, policy: "kube-api-proxy" }),
      { deadline: Date.now() + 20_000 },
    )) as CheckResponse,
  );
}

/** "allowed", or "<http status> <reason>", or "error <gRPC failure>". */
async function check(cluster: string, name = "web", via: AuthorizationClient = client): Promise<string> {
  try {
    const res = await checkResponse(cluster, name, via);
    return res.allowed ? "allowed" : `${res.http} ${res.reason}`;
  } catch (err) {
    return `error ${(err as Error).message}`;
  }
}

/** A certificate name no check has asked about: its SubjectAccessReview cannot come from a cache. */
let fresh = 0;
const freshName = () => `cert-${++fresh}`;

async function adminGet(path: string, of: PortcullisProcess = portcullis): Promise<Response> {
  return fetch(`http://${of.addresses.admin}${path}`);
}

async function readyz(of: PortcullisProcess = portcullis): Promise<number> {
  const res = await adminGet("/readyz", of);
  await res.body?.cancel();
  return res.status;
}

/** One series of a metric, e.g. `portcullis_registered_clusters{source="registry"}`; undefined when absent. */
async function metric(series: string, of: PortcullisProcess = portcullis): Promise<number | undefined> {
  const text = await (await adminGet("/metrics", of)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const registryClusters = () => metric('portcullis_registered_clusters{source="registry"}');
const registryEvents = (event: "added" | "changed" | "removed" | "invalid") => metric(`portcullis_cluster_registry_events_total{event="${event}"}`);

/** Status of a GET against the API server with `token`, as Envoy forwards an allowed request. */
function asToken(token: string, path: string): Promise<number> {
  return new Promise((resolveStatus, reject) => {
    const req = request(new URL(path, api.url), { ca: api.caPem, headers: { authorization: `Bearer ${token}` }, timeout: 10_000 }, (res) => {
      res.resume();
      resolveStatus(res.statusCode ?? 0);
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on("error", reject);
    req.end();
  });
}

/** The `sub` of a ServiceAccount JWT (read only; the API server's answer to it is the proof). */
function subjectOf(jwt: string): string {
  return (JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString("utf8")) as { sub: string }).sub;
}

async function until(condition: () => Promise<boolean>, timeoutMs: number, what: string, detail: () => string = () => ""): Promise<number> {
  const started = performance.now();
  while (!(await condition())) {
    if (performance.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail().slice(-4000)}`);
    await sleep(50);
  }
  return performance.now() - started;
}

interface Answer {
  /** performance.now() when the check was sent. */
  readonly at: number;
  readonly ms: number;
  readonly outcome: string;
}

/** Sends one request every `everyMs` (the next once the previous answered and the interval passed), keeping every answer. */
class Stream {
  readonly answers: Answer[] = [];
  #running = true;
  readonly #done: Promise<void>;

  constructor(everyMs: number, send: () => Promise<string>) {
    this.#done = (async () => {
      while (this.#running) {
        const at = performance.now();
        const outcome = await send().catch((err: unknown) => `error ${(err as Error).message}`);
        const ms = performance.now() - at;
        this.answers.push({ at, ms, outcome });
        await sleep(Math.max(0, everyMs - ms));
      }
    })();
  }

  async stop(): Promise<Answer[]> {
    this.#running = false;
    await this.#done;
    return this.answers;
  }
}

/** Outcome → count, for messages and the printed record. */
function tally(answers: ReadonlyArray<Answer | string>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) {
    const outcome = typeof a === "string" ? a : a.outcome;
    counts[outcome] = (counts[outcome] ?? 0) + 1;
  }
  return counts;
}

function p99(answers: readonly Answer[]): number {
  const sorted = answers.map((a) => a.ms).sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] ?? 0;
}

/** Cluster A's stream and /readyz, every answer kept, across one test. */
function watchClusterA(): { stop(): Promise<{ a: Answer[]; ready: Answer[] }> } {
  const a = new Stream(A_EVERY_MS, () => check(CLUSTER_A));
  const ready = new Stream(100, async () => String(await readyz()));
  return {
    async stop() {
      return { a: await a.stop(), ready: await ready.stop() };
    },
  };
}

function expectUndisturbed(run: { a: Answer[]; ready: Answer[] }): void {
  console.log(`cluster A: ${run.a.length} checks ${JSON.stringify(tally(run.a))}, p99 ${p99(run.a).toFixed(1)} ms; /readyz ${JSON.stringify(tally(run.ready))}`);
  // The stream ran (one check every 25 ms: even a short test sends a dozen).
  expect(run.a.length).toBeGreaterThan(10);
  expect(tally(run.a)).toEqual({ allowed: run.a.length });
  expect(tally(run.ready)).toEqual({ "200": run.ready.length });
}

describe("clusters registered, rotated and removed while portcullis runs", () => {
  it("B: registered → served within seconds with the plugin's ServiceAccount token; rotated → still served on the new credential; removed → 404 unknown-cluster; A undisturbed", async () => {
    expect(await check(CLUSTER_B)).toBe("404 unknown-cluster");
    expect(await registryClusters()).toBe(0);
    const watch = watchClusterA();
    const credential1 = await remoteCredential("portcullis-1");

    // Registration: one Secret.
    await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("cluster-b", registration(CLUSTER_B, credential1)) });
    const registering: string[] = [];
    const registeredMs = await until(
      async () => {
        registering.push(await check(CLUSTER_B));
        return registering.at(-1) === "allowed";
      },
      SERVED_WITHIN_MS,
      "cluster B to be served",
      () => JSON.stringify(registering.slice(-5)),
    );
    console.log(`registration → first allowed check on B: ${registeredMs.toFixed(0)} ms (answers before it: ${JSON.stringify(tally(registering.slice(0, -1)))})`);
    // Until it is synced, B is unknown or unavailable: never anything else.
    expect(registering.slice(0, -1).every((o) => o === "404 unknown-cluster" || o === "503 dependency-unavailable")).toBe(true);
    expect(registeredMs).toBeLessThan(SERVED_WITHIN_MS);
    expect(await registryClusters()).toBe(1);
    expect(await metric("portcullis_cluster_registry_synced")).toBe(1);

    // The swap: the plugin's ServiceAccount, which may read the certificate but not the user's other core.
    const allowed = await checkResponse(CLUSTER_B);
    expect(allowed.allowed).toBe(true);
    const swapped = (allowed as { set: Record<string, string> }).set["authorization"]!.replace(/^Bearer /, "");
    expect(subjectOf(swapped)).toBe("system:serviceaccount:plugin-cert-manager:plugin-cert-manager");
    expect(await asToken(swapped, "/apis/cert-manager.io/v1/namespaces/team-a/certificates/web")).toBe(200);
    expect(await asToken(swapped, "/api/v1/namespaces/team-a/secrets/db-password")).toBe(403);

    // B's own stream: a certificate never asked before on every check, so each one is reviewed on B.
    const b = new Stream(50, () => check(CLUSTER_B, freshName()));

    // Rotation: a second credential in the Secret, then the first one revoked (its ServiceAccount deleted).
    const credential2 = await remoteCredential("portcullis-2");
    const changesBefore = (await registryEvents("changed"))!;
    const current = await core.readNamespacedSecret({ name: "cluster-b", namespace: REGISTRY_NAMESPACE });
    const rotatedAt = performance.now();
    await core.replaceNamespacedSecret({
      name: "cluster-b",
      namespace: REGISTRY_NAMESPACE,
      body: { ...current, data: { ...current.data, token: Buffer.from(credential2).toString("base64") } },
    });
    const seenMs = await until(async () => (await registryEvents("changed"))! > changesBefore, SERVED_WITHIN_MS, "the registry to rebuild B's clients");
    expect(await asToken(credential1, "/apis")).toBe(200);
    await core.deleteNamespacedServiceAccount({ name: "portcullis-1", namespace: REMOTE_NAMESPACE });
    await until(async () => (await asToken(credential1, "/apis")) === 401, SERVED_WITHIN_MS, "the old credential to be rejected by the API server");
    const revokedAt = performance.now();
    // Served on the new credential: fresh reviews allowed after the old credential stopped working.
    await until(async () => b.answers.some((x) => x.at > revokedAt && x.outcome === "allowed"), SERVED_WITHIN_MS, "B to be served after the old credential was revoked");
    const servedAgainMs = performance.now() - revokedAt;
    await sleep(1_000);
    const afterRevocation = b.answers.filter((x) => x.at > revokedAt + servedAgainMs);
    console.log(
      `rotation: Secret updated → registry event ${seenMs.toFixed(0)} ms; old credential revoked → allowed on the new one ${servedAgainMs.toFixed(0)} ms; ` +
        `B during rotation ${JSON.stringify(tally(b.answers.filter((x) => x.at >= rotatedAt)))}` +
        ` (denials sent at ${JSON.stringify(b.answers.filter((x) => x.outcome !== "allowed").map((x) => `${(x.at - rotatedAt).toFixed(0)} ms`))} from the Secret update; revoked at ${(revokedAt - rotatedAt).toFixed(0)} ms)`,
    );
    expect(afterRevocation.length).toBeGreaterThan(5);
    expect(tally(afterRevocation)).toEqual({ allowed: afterRevocation.length });
    // Rotating never serves B as another cluster or as unknown; at worst a 503 while its clients are rebuilt.
    expect(b.answers.every((x) => x.outcome === "allowed" || x.outcome === "503 dependency-unavailable")).toBe(true);

    // Removal: delete the Secret. Timed from the request, as the rotation is: the registry's watch can
    // remove B before the delete call returns, and a check sent meanwhile rightly answers 404.
    const removedAt = performance.now();
    await core.deleteNamespacedSecret({ name: "cluster-b", namespace: REGISTRY_NAMESPACE });
    const removedMs = await until(async () => b.answers.some((x) => x.at > removedAt && x.outcome === "404 unknown-cluster"), SERVED_WITHIN_MS, "B to answer 404 unknown-cluster");
    await sleep(1_000);
    const bAnswers = await b.stop();
    const firstUnknown = bAnswers.findIndex((x) => x.at > removedAt && x.outcome === "404 unknown-cluster");
    const afterRemoval = bAnswers.slice(firstUnknown);
    console.log(`removal → 404 unknown-cluster on B: ${removedMs.toFixed(0)} ms; after it ${JSON.stringify(tally(afterRemoval))}`);
    // Once removed, it stays removed: no check served from a cache or a stopped watch.
    expect(tally(afterRemoval)).toEqual({ "404 unknown-cluster": afterRemoval.length });
    expect(bAnswers.slice(0, firstUnknown).every((x) => x.outcome === "allowed" || x.outcome === "503 dependency-unavailable")).toBe(true);
    expect(await check(CLUSTER_B)).toBe("404 unknown-cluster");
    expect(await registryClusters()).toBe(0);

    expectUndisturbed(await watch.stop());
    // Neither credential, nor a token handed out for B, is ever logged.
    for (const secret of [credential1, credential2, swapped]) {
      expect(portcullis.stdout()).not.toContain(secret);
      expect(portcullis.stderr()).not.toContain(secret);
    }
  }, 120_000);

  it("Secrets that are not valid registrations register nothing and break nothing; the static cluster's id and a registered one's cannot be taken (a second claim on a registered id takes it out of service until it is gone)", async () => {
    const watch = watchClusterA();
    const credential = await remoteCredential("portcullis-2");
    const without = (key: string) => Object.fromEntries(Object.entries(registration(CLUSTER_C, credential)).filter(([k]) => k !== key));
    /** Where a Secret that took over a cluster's id would send its checks: nothing listens there. */
    const nowhere = "https://127.0.0.1:1";
    const invalid: Array<{ name: string; data: Record<string, string>; labels?: Record<string, string> }> = [
      { name: "bad-cluster-id", data: { ...registration(CLUSTER_C, credential), clusterId: "cluster-c" } },
      { name: "no-cluster-id", data: without("clusterId") },
      { name: "no-server", data: without("server") },
      { name: "plain-http-server", data: { ...registration(CLUSTER_C, credential), server: api.url.replace("https:", "http:") } },
      { name: "no-credential", data: without("token") },
      { name: "two-credentials", data: { ...registration(CLUSTER_C, credential), "tls.crt": api.caPem, "tls.key": "not a key" } },
      { name: "not-pem-ca", data: { ...registration(CLUSTER_C, credential), "ca.crt": "not a certificate" } },
      // The static cluster A, claimed by a Secret pointing elsewhere: A's stream below would fail if it took.
      { name: "static-cluster-id", data: { ...registration(CLUSTER_A, credential), server: nowhere } },
    ];
    const invalidBefore = (await registryEvents("invalid"))!;
    for (const s of invalid) await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret(s.name, s.data, s.labels) });
    // Valid data, but not labelled as a cluster: the registry reads only its own Secrets.
    await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("unlabelled", registration(CLUSTER_C, credential), {}) });
    // Watch events arrive in order: once D (created last) is served, every Secret before it was read.
    await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("cluster-d", registration(CLUSTER_D, credential)) });
    const dMs = await until(async () => (await check(CLUSTER_D)) === "allowed", SERVED_WITHIN_MS, "cluster D to be served after the invalid Secrets");
    console.log(`cluster D served ${dMs.toFixed(0)} ms after its Secret, behind ${invalid.length + 1} Secrets that register nothing`);
    expect((await registryEvents("invalid"))! - invalidBefore).toBe(invalid.length);

    // D's id claimed again by a second Secret (issue 42): served by neither, never by the newcomer; deleting it restores D.
    await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("cluster-d-again", { ...registration(CLUSTER_D, credential), server: nowhere }) });
    await until(async () => (await check(CLUSTER_D, freshName())) === "404 unknown-cluster", SERVED_WITHIN_MS, "D to be taken out by the second claim");
    expect(await metric("portcullis_cluster_registry_conflicts")).toBe(1);
    expect((await registryEvents("invalid"))! - invalidBefore).toBe(invalid.length);
    await core.deleteNamespacedSecret({ name: "cluster-d-again", namespace: REGISTRY_NAMESPACE });
    await until(async () => (await check(CLUSTER_D, freshName())) === "allowed", SERVED_WITHIN_MS, "D to be served again once the second claim is gone");
    expect(await metric("portcullis_cluster_registry_conflicts")).toBe(0);

    expect(await check(CLUSTER_C)).toBe("404 unknown-cluster");
    expect(await registryClusters()).toBe(1);
    expect(await metric("portcullis_cluster_registry_synced")).toBe(1);

    for (const name of [...invalid.map((s) => s.name), "unlabelled", "cluster-d"]) await core.deleteNamespacedSecret({ name, namespace: REGISTRY_NAMESPACE });
    await until(async () => (await check(CLUSTER_D)) === "404 unknown-cluster", SERVED_WITHIN_MS, "D to be removed");
    expect(await registryClusters()).toBe(0);
    expectUndisturbed(await watch.stop());
    expect(portcullis.stdout()).not.toContain(credential);
    expect(portcullis.stderr()).not.toContain(credential);
  }, 90_000);

  it("a registered cluster whose API server accepts connections and never answers: its checks 503 within their deadline, A and readiness undisturbed; removed → 404", async () => {
    // Accepts every connection and never writes a byte: not even the TLS handshake completes.
    const held = new Set<Socket>();
    const silent = createServer((socket) => {
      held.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => held.delete(socket));
    });
    await new Promise<void>((resolveListen) => silent.listen(0, "127.0.0.1", () => resolveListen()));
    const port = (silent.address() as { port: number }).port;
    try {
      const before = watchClusterA();
      await sleep(3_000);
      const alone = await before.stop();

      const watch = watchClusterA();
      const credential = await remoteCredential("portcullis-2");
      await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("cluster-hung", { ...registration(CLUSTER_HUNG, credential), server: `https://127.0.0.1:${port}` }) });
      await until(async () => (await registryClusters()) === 1, SERVED_WITHIN_MS, "the silent cluster to be registered");
      await until(async () => held.size > 0, SERVED_WITHIN_MS, "portcullis to connect to the silent API server");
      // Several at once, each a review of its own: the silent server holds them all.
      const hung = await Promise.all(
        Array.from({ length: 8 }, async () => {
          const at = performance.now();
          const outcome = await check(CLUSTER_HUNG, freshName());
          return { at, ms: performance.now() - at, outcome };
        }),
      );
      const beside = await watch.stop();
      console.log(
        `silent registered cluster: ${hung.length} checks ${JSON.stringify(tally(hung))}, max ${Math.max(...hung.map((h) => h.ms)).toFixed(0)} ms ` +
          `(deadline ${CHECK_TIMEOUT_MS} ms, reviews ${REVIEW_TIMEOUT_MS} ms); cluster A p99 alone ${p99(alone.a).toFixed(1)} ms, beside it ${p99(beside.a).toFixed(1)} ms`,
      );
      expect(tally(hung)).toEqual({ "503 dependency-unavailable": hung.length });
      expect(Math.max(...hung.map((h) => h.ms))).toBeLessThan(CHECK_TIMEOUT_MS + 2_000);
      expectUndisturbed(alone);
      expectUndisturbed(beside);

      await core.deleteNamespacedSecret({ name: "cluster-hung", namespace: REGISTRY_NAMESPACE });
      await until(async () => (await check(CLUSTER_HUNG)) === "404 unknown-cluster", SERVED_WITHIN_MS, "the silent cluster to be removed");
      expect(await registryClusters()).toBe(0);
      expect(await readyz()).toBe(200);
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise<void>((resolveClose) => silent.close(() => resolveClose()));
    }
  }, 90_000);
});

/**
 * What a process's CDS serves now, as Envoy asks for it: the Envoy clusters of its first response,
 * by name, with the port of each one's API server.
 */
async function cdsClusters(of: PortcullisProcess): Promise<Record<string, number>> {
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync("envoy/service/cluster/v3/cds.proto", LOAD_OPTIONS)) as any;
  const cds = new loaded.envoy.service.cluster.v3.ClusterDiscoveryService(of.addresses.grpc, grpc.credentials.createInsecure());
  const call = cds.StreamClusters();
  try {
    const response = await new Promise<{ resources?: Array<{ value: Buffer }> }>((resolveResponse, reject) => {
      const timer = setTimeout(() => reject(new Error("no CDS response within 10 s")), 10_000);
      call.on("data", (r: { resources?: Array<{ value: Buffer }> }) => (clearTimeout(timer), resolveResponse(r)));
      call.on("error", (err: Error) => (clearTimeout(timer), reject(err)));
      call.write({ type_url: CLUSTER_TYPE_URL, node: { id: "test-envoy", cluster: "test" } });
    });
    const type = envoyRoot().lookupType("envoy.config.cluster.v3.Cluster");
    return Object.fromEntries(
      (response.resources ?? []).map((r) => {
        const cluster = type.toObject(type.decode(r.value), { defaults: false }) as any;
        // By `kube-api-{id}`: a registered cluster's Envoy cluster name ends in a digest of where it goes.
        return [(cluster.name as string).replace(/-[0-9a-f]{32}$/, ""), cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value as number];
      }),
    );
  } finally {
    call.cancel();
    cds.close();
  }
}

describe("issue 42: a cluster id two Secrets claim, and a process started while they do", () => {
  it("neither the running process nor one started after the attacker's Secret serves F; deleting that Secret serves F from the real one on both", async () => {
    const credential = await remoteCredential("portcullis-2");
    const attackerToken = `attacker-${CLUSTER_F}`;
    const realPort = Number(new URL(api.url).port);
    const attacker = createServer((socket) => socket.destroy());
    await new Promise<void>((resolveListen) => attacker.listen(0, "127.0.0.1", () => resolveListen()));
    const attackerServer = `https://127.0.0.1:${(attacker.address() as { port: number }).port}`;
    let second: PortcullisProcess | undefined;
    let secondClient: AuthorizationClient | undefined;
    try {
      await core.createNamespacedSecret({ namespace: REGISTRY_NAMESPACE, body: clusterSecret("cluster-f", registration(CLUSTER_F, credential)) });
      await until(async () => (await check(CLUSTER_F, freshName())) === "allowed", SERVED_WITHIN_MS, "F to be served by its one Secret");
      // The attacker's Secret: its own server and CA, any token; sorted before the real one in every list.
      await core.createNamespacedSecret({
        namespace: REGISTRY_NAMESPACE,
        body: clusterSecret("aaa-cluster-f", { clusterId: CLUSTER_F, server: attackerServer, "ca.crt": api.caPem, token: attackerToken }),
      });
      await until(async () => (await check(CLUSTER_F, freshName())) === "404 unknown-cluster", SERVED_WITHIN_MS, "the running process to take F out");

      second = await startPortcullis("portcullis-second.yaml");
      const started = second;
      secondClient = authorizationClient(started.addresses.grpc);
      await until(async () => (await readyz(started).catch(() => 0)) === 200, 60_000, "the second process to be ready", () => started.stderr());
      const f = `kube-api-${CLUSTER_F}`;
      expect(await check(CLUSTER_F, freshName(), secondClient)).toBe("404 unknown-cluster");
      expect(await check(CLUSTER_A, freshName(), secondClient)).toBe("allowed");
      expect(await cdsClusters(started)).not.toHaveProperty(f);
      expect(await cdsClusters(portcullis)).not.toHaveProperty(f);
      const verbose = await (await adminGet("/readyz?verbose", started)).text();
      expect(verbose).toContain(`[-]cluster id conflict cluster=${CLUSTER_F}: claimed by 2 cluster Secrets (${REGISTRY_NAMESPACE}/aaa-cluster-f, ${REGISTRY_NAMESPACE}/cluster-f): served by none of them`);
      expect(verbose.endsWith("ready\n") && !verbose.endsWith("not ready\n")).toBe(true);
      expect(await metric("portcullis_cluster_registry_conflicts", started)).toBe(1);
      expect(await metric("portcullis_cluster_registry_conflicts")).toBe(1);
      const logged = started.lines().find((l) => l["problem"] === "cluster-id-conflict" && l["cluster_id"] === CLUSTER_F);
      expect(logged).toMatchObject({ level: 50, secrets: [`${REGISTRY_NAMESPACE}/aaa-cluster-f`, `${REGISTRY_NAMESPACE}/cluster-f`] });
      // Neither process ever registered F with the attacker's server.
      for (const p of [portcullis, started]) {
        expect(p.lines().filter((l) => l["cluster_id"] === CLUSTER_F && l["server"] === attackerServer)).toEqual([]);
      }

      await core.deleteNamespacedSecret({ name: "aaa-cluster-f", namespace: REGISTRY_NAMESPACE });
      for (const via of [client, secondClient]) {
        await until(async () => (await check(CLUSTER_F, freshName(), via)) === "allowed", SERVED_WITHIN_MS, "F to be served from the real Secret");
      }
      // CDS follows the registration, not the first allowed check: it may come a push later.
      for (const p of [started, portcullis]) {
        await until(async () => (await cdsClusters(p))[f] === realPort, SERVED_WITHIN_MS, "CDS to send F, to the real server");
      }
      expect(await metric("portcullis_cluster_registry_conflicts", started)).toBe(0);
      for (const p of [portcullis, started]) {
        expect(p.stdout()).not.toContain(attackerToken);
        expect(p.stdout()).not.toContain(credential);
      }
    } finally {
      secondClient?.close();
      if (second !== undefined) await stopPortcullis(second);
      await core.deleteNamespacedSecret({ name: "aaa-cluster-f", namespace: REGISTRY_NAMESPACE }).catch(() => {});
      await core.deleteNamespacedSecret({ name: "cluster-f", namespace: REGISTRY_NAMESPACE }).catch(() => {});
      await new Promise<void>((resolveClose) => attacker.close(() => resolveClose()));
    }
  }, 150_000);
});
