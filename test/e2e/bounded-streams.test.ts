/**
 * No stream outlives its token (issue 54), against a real kube-apiserver, a real OpenFGA and
 * portcullis over gRPC. Each watch is sent as Envoy sends it: the CheckRequest first; on allow the
 * CheckResponse, decoded with Envoy's protos, applied to the request (its headers set and removed,
 * its query_parameters_to_set applied to the :path as Envoy's ext_authz filter does, see
 * src/envoy/query-parameters.ts), the route's `/clusters/{id}` prefix stripped; then the watch is
 * opened on the API server and read to its end. `streams.pluginWatchMaxSeconds` is 2 here.
 *
 *  - a PluginToken watch opened without a timeout ends within the bound, ended by the API server;
 *  - a client resuming from its last resourceVersion misses no event across 10 consecutive bounded
 *    watches, compared with an unbounded watch opened from the same version;
 *  - `portcullis revoke` of the installation during an open watch: it ends within the bound, and its
 *    re-watch is refused 403 `revoked`;
 *  - the user's RoleBinding deleted during an open watch: the same, 403 `user-sar-denied`;
 *  - and timeoutSeconds as the real API server reads it (negative and wrapping values, one it refuses,
 *    a parameter spelled twice), the oracle for src/kube-reading/long-running.ts and src/authz/stream-bound.ts.
 */
import { CustomObjectsApi, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withQueryParametersSet } from "../../src/envoy/query-parameters.ts";
import { runRevoke } from "../../src/cli/revoke.ts";
import { envoyCheckRequest, type CheckResponse } from "../support/envoy.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { startFundamentWorld, type FundamentWorld, users, waitFor } from "./fundament-world.ts";

const BOUND_SECONDS = 2;
/** Past the bound: the API server's timer, the response's end reaching the client, a loaded machine. */
const SLACK_MS = 1_500;

let world: FundamentWorld;
let portcullis: TestServer;
let pool: Agent;

beforeAll(async () => {
  world = await startFundamentWorld({ revocations: true });
  portcullis = await startTestServer(world.ports, { ...world.config, streams: { pluginWatchMaxSeconds: BOUND_SECONDS } });
  pool = new Agent({ connect: { ca: world.api.caPem } });
}, 180_000);

afterAll(async () => {
  await portcullis?.stop();
  await pool?.close();
  await world?.stop();
});

const CERTIFICATES = `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates`;

interface WatchEvent {
  readonly type: string;
  readonly name: string;
  readonly resourceVersion: string;
}

type Opened =
  | { readonly kind: "denied"; readonly http: string; readonly reason: string | undefined }
  | { readonly kind: "watching"; readonly upstreamPath: string; readonly ended: Promise<{ events: WatchEvent[]; status: number; endedAt: number }> };

/** One watch through the check, as Envoy carries it (see the file comment). */
async function watchThroughEnvoy(gatewayPathAndQuery: string, token: string): Promise<Opened> {
  const response = (await portcullis.checkRaw(
    envoyCheckRequest({ path: gatewayPathAndQuery, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" }),
  )) as CheckResponse & { ok_response?: { query_parameters_to_set?: Array<{ key: string; value: string }> } };
  if (response.ok_response === undefined) {
    const reason = response.denied_response?.headers?.find((h) => h.header.key === "x-portcullis-reason")?.header.value;
    return { kind: "denied", http: String(response.denied_response?.status.code), reason };
  }
  const ok = response.ok_response;
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  for (const h of ok.headers ?? []) headers[h.header.key] = h.header.value;
  for (const name of ok.headers_to_remove ?? []) delete headers[name];
  const set = Object.fromEntries((ok.query_parameters_to_set ?? []).map((q) => [q.key, q.value]));
  const rewritten = Object.keys(set).length > 0 ? withQueryParametersSet(gatewayPathAndQuery, set) : gatewayPathAndQuery;
  // The route's prefix_rewrite; Envoy's own routing header is not the API server's.
  const upstreamPath = rewritten.slice(`/clusters/${ids.cluster}`.length);
  delete headers["x-fundament-kube-api-cluster"];
  const res = await undiciFetch(`${world.api.url}${upstreamPath}`, { headers: { accept: "application/json", ...headers }, dispatcher: pool });
  return { kind: "watching", upstreamPath, ended: readEvents(res) };
}

/** Reads a watch's events to its end, each pushed to `events` as it arrives. */
async function readEvents(res: Awaited<ReturnType<typeof undiciFetch>>, events: WatchEvent[] = []): Promise<{ events: WatchEvent[]; status: number; endedAt: number }> {
  if (res.status !== 200) {
    // A refusal: a Status object, not a stream of events.
    await res.text();
    return { events, status: res.status, endedAt: performance.now() };
  }
  let pending = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body ?? []) {
    pending += decoder.decode(chunk as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) !== -1) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (line === "") continue;
      const e = JSON.parse(line) as { type: string; object: { metadata: { name?: string; resourceVersion: string }; message?: string } };
      // An ERROR event carries a Status: its message is the name here.
      events.push({ type: e.type, name: e.type === "ERROR" ? String(e.object.message) : (e.object.metadata.name ?? ""), resourceVersion: e.object.metadata.resourceVersion });
    }
  }
  return { events, status: res.status, endedAt: performance.now() };
}

const custom = () => world.admin.makeApiClient(CustomObjectsApi);

async function currentResourceVersion(): Promise<string> {
  const list = (await custom().listNamespacedCustomObject({ group: "cert-manager.io", version: "v1", namespace: "team-a", plural: "certificates" })) as {
    metadata: { resourceVersion: string };
  };
  return list.metadata.resourceVersion;
}

function createCertificate(name: string): Promise<unknown> {
  return custom().createNamespacedCustomObject({
    group: "cert-manager.io",
    version: "v1",
    namespace: "team-a",
    plural: "certificates",
    body: { apiVersion: "cert-manager.io/v1", kind: "Certificate", metadata: { name }, spec: { secretName: `${name}-tls` } },
  });
}

describe("bounded watches on a real kube-apiserver", () => {
  it("a PluginToken watch opened with no timeout gets timeoutSeconds = the bound and is ended by the API server within it", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    const started = performance.now();
    // resourceVersion=0: the current state first (one ADDED per object), as a client starting afresh asks.
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=true&resourceVersion=0`, token);
    expect(opened).toMatchObject({
      kind: "watching",
      upstreamPath: `/apis/cert-manager.io/v1/namespaces/team-a/certificates?resourceVersion=0&timeoutSeconds=${BOUND_SECONDS}&watch=true`,
    });
    if (opened.kind !== "watching") return;
    const { status, events, endedAt } = await opened.ended;
    const lasted = endedAt - started;
    console.log(`unbounded-asked PluginToken watch ended after ${lasted.toFixed(0)} ms (bound ${BOUND_SECONDS} s)`);
    expect(status).toBe(200);
    // The initial state: one ADDED per existing certificate, then a clean end.
    expect(events.map((e) => `${e.type} ${e.name}`)).toContain("ADDED web");
    expect(lasted).toBeGreaterThanOrEqual(BOUND_SECONDS * 1000 - 100);
    expect(lasted).toBeLessThan(BOUND_SECONDS * 1000 + SLACK_MS);
    const audit = portcullis.logs.filter((l) => l["audit"] === "plugin_request" && l["verb"] === "watch" && l["decision"] === "allowed");
    expect(audit.at(-1)).toMatchObject({ stream_bound_seconds: BOUND_SECONDS, resource: "certificates", namespace: "team-a" });
  }, 30_000);

  it("a client resuming from its last resourceVersion misses no event across 10 consecutive bounded watches (against an unbounded watch)", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    const from = await currentResourceVersion();
    // The reference: one unbounded watch from the same version, straight to the API server as the admin.
    const reference = new AbortController();
    const referenceRes = await undiciFetch(`${world.api.url}/apis/cert-manager.io/v1/namespaces/team-a/certificates?watch=true&resourceVersion=${from}&timeoutSeconds=600`, {
      headers: { accept: "application/json", authorization: `Bearer ${world.api.adminToken}` },
      dispatcher: pool,
      signal: reference.signal,
    });
    const referenceSeen: WatchEvent[] = [];
    const referenceRead = readEvents(referenceRes, referenceSeen).catch(() => undefined);

    let writing = true;
    let written = 0;
    const writer = (async () => {
      while (writing) {
        await createCertificate(`resume-${written++}`);
        await new Promise((r) => setTimeout(r, 150));
      }
    })();

    const seen: WatchEvent[] = [];
    let last = from;
    for (let i = 0; i < 10; i++) {
      const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=1&resourceVersion=${last}&allowWatchBookmarks=true`, token);
      expect(opened).toMatchObject({ kind: "watching" });
      if (opened.kind !== "watching") return;
      expect(opened.upstreamPath).toContain(`timeoutSeconds=${BOUND_SECONDS}`);
      const { events, status } = await opened.ended;
      expect(status).toBe(200);
      for (const e of events) {
        if (e.type !== "BOOKMARK") seen.push(e);
        last = e.resourceVersion;
      }
    }
    writing = false;
    await writer;
    // The reference has read up to the last version the client saw; then it is stopped.
    await waitFor(async () => referenceSeen.some((e) => BigInt(e.resourceVersion) >= BigInt(last)), 5_000);
    reference.abort();
    await referenceRead;

    const upTo = (events: WatchEvent[]) => events.filter((e) => e.type !== "BOOKMARK" && BigInt(e.resourceVersion) <= BigInt(last));
    console.log(`10 bounded watches saw ${seen.length} events of ${written} certificates written; the unbounded reference ${upTo(referenceSeen).length} up to the same version`);
    expect(seen.length).toBeGreaterThan(20);
    expect(seen).toEqual(upTo(referenceSeen));
  }, 90_000);

  it("`portcullis revoke` of the installation during an open watch: it ends within the bound, its re-watch is 403 revoked", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=true&resourceVersion=${await currentResourceVersion()}`, token);
    expect(opened).toMatchObject({ kind: "watching" });
    if (opened.kind !== "watching") return;
    let ended = false;
    void opened.ended.then(() => (ended = true));
    // `portcullis revoke`, run in this process (a CLI process would take longer to start than the bound).
    const kubeconfig = ["--kubeconfig", world.api.kubeconfigPath];
    const io = { out: () => {} };
    expect(await runRevoke("revoke", ["--installation", world.installationUid, "--reason", "INC-54: revoke during a watch", ...kubeconfig], io)).toBe(0);
    const revokedAt = performance.now();
    expect(ended).toBe(false);
    try {
      const { endedAt } = await opened.ended;
      const after = endedAt - revokedAt;
      console.log(`open PluginToken watch ended ${after.toFixed(0)} ms after portcullis revoke exited (bound ${BOUND_SECONDS} s)`);
      expect(after).toBeLessThan(BOUND_SECONDS * 1000 + SLACK_MS);
      // The deny-list's watch applies the entry within milliseconds (test/e2e/revocation.test.ts).
      await waitFor(async () => (await watchThroughEnvoy(`${CERTIFICATES}?watch=true`, token)).kind === "denied", 2_000);
      expect(await watchThroughEnvoy(`${CERTIFICATES}?watch=true`, token)).toEqual({ kind: "denied", http: "Forbidden", reason: "revoked" });
    } finally {
      expect(await runRevoke("unrevoke", ["--installation", world.installationUid, ...kubeconfig], io)).toBe(0);
    }
  }, 30_000);

  it("the user's RoleBinding deleted during an open watch: it ends within the bound, its re-watch is 403 user-sar-denied", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    await waitFor(async () => (await watchThroughEnvoy(`${CERTIFICATES}?watch=true&timeoutSeconds=1`, token)).kind === "watching", 5_000);
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=true&resourceVersion=${await currentResourceVersion()}`, token);
    expect(opened).toMatchObject({ kind: "watching" });
    if (opened.kind !== "watching") return;
    let ended = false;
    void opened.ended.then(() => (ended = true));
    await world.admin.makeApiClient(RbacAuthorizationV1Api).deleteNamespacedRoleBinding({ namespace: "team-a", name: "alice-cert-editor" });
    const deletedAt = performance.now();
    expect(ended).toBe(false);
    const { endedAt } = await opened.ended;
    const after = endedAt - deletedAt;
    console.log(`open PluginToken watch ended ${after.toFixed(0)} ms after alice's RoleBinding was deleted (bound ${BOUND_SECONDS} s)`);
    expect(after).toBeLessThan(BOUND_SECONDS * 1000 + SLACK_MS);
    // The RBAC watch drops the cached review within milliseconds (docs/operations.md).
    await waitFor(async () => (await watchThroughEnvoy(`${CERTIFICATES}?watch=true`, token)).kind === "denied", 2_000);
    expect(await watchThroughEnvoy(`${CERTIFICATES}?watch=true`, token)).toEqual({ kind: "denied", http: "Forbidden", reason: "user-sar-denied" });
  }, 30_000);
});

/** Straight to the API server as the admin (no check): how kube-apiserver itself reads a query. */
async function adminGet(path: string, abortAfterMs?: number): Promise<{ status: number; body: string; lastedMs: number; aborted: boolean }> {
  const started = performance.now();
  const controller = new AbortController();
  const timer = abortAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), abortAfterMs);
  const res = await undiciFetch(`${world.api.url}${path}`, { headers: { accept: "application/json", authorization: `Bearer ${world.api.adminToken}` }, dispatcher: pool, signal: controller.signal });
  let body = "";
  let aborted = false;
  try {
    body = await res.text();
  } catch {
    aborted = true;
  }
  clearTimeout(timer);
  return { status: res.status, body, lastedMs: performance.now() - started, aborted };
}

describe("timeoutSeconds as the real kube-apiserver reads it (the oracle for src/kube-reading/long-running.ts)", () => {
  const KUBE = "/apis/cert-manager.io/v1/namespaces/team-a/certificates";
  // bob: a ClusterRoleBinding to the certificate viewer (alice lost team-a above).
  const token = () => pluginToken({ sub: users.bob, installation_id: world.installationUid });

  it.each([
    { name: "negative", value: "-5" },
    { name: "int64's largest: the product wraps negative", value: "9223372036854775807" },
  ])("$name: the watch ends as it opens, so the check leaves it as asked", async ({ value }) => {
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=1&resourceVersion=0&timeoutSeconds=${value}`, await token());
    expect(opened).toMatchObject({ kind: "watching", upstreamPath: `${KUBE}?watch=1&resourceVersion=0&timeoutSeconds=${value}` });
    if (opened.kind !== "watching") return;
    const started = performance.now();
    const { status } = await opened.ended;
    expect(status).toBe(200);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("2^55 seconds: the product wraps to 0, the server's 30–60 min default; the check bounds it", async () => {
    const asIs = await adminGet(`${KUBE}?watch=1&resourceVersion=0&timeoutSeconds=36028797018963968`, BOUND_SECONDS * 1000 + SLACK_MS);
    expect(asIs).toMatchObject({ status: 200, aborted: true });
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=1&resourceVersion=0&timeoutSeconds=36028797018963968`, await token());
    expect(opened).toMatchObject({ kind: "watching", upstreamPath: `${KUBE}?resourceVersion=0&timeoutSeconds=${BOUND_SECONDS}&watch=1` });
    if (opened.kind !== "watching") return;
    const started = performance.now();
    await opened.ended;
    expect(performance.now() - started).toBeLessThan(BOUND_SECONDS * 1000 + SLACK_MS);
  }, 20_000);

  it("timeoutSeconds=abc: not rewritten (nothing repaired), kube-apiserver refuses it 400 as before", async () => {
    const opened = await watchThroughEnvoy(`${CERTIFICATES}?watch=1&timeoutSeconds=abc`, await token());
    expect(opened).toMatchObject({ kind: "watching", upstreamPath: `${KUBE}?watch=1&timeoutSeconds=abc` });
    if (opened.kind !== "watching") return;
    expect((await opened.ended).status).toBe(400);
  });

  it("watch=true&w%61tch=false: Envoy's rewrite would make kube-apiserver run a list reviewed as a watch, so the check refuses it 400", async () => {
    const rewritten = withQueryParametersSet(`${KUBE}?watch=true&w%61tch=false`, { timeoutSeconds: String(BOUND_SECONDS) });
    expect(rewritten).toBe(`${KUBE}?timeoutSeconds=${BOUND_SECONDS}&w%61tch=false&watch=true`);
    // What the API server would do with it: a list, answered at once.
    expect(JSON.parse((await adminGet(rewritten)).body)).toMatchObject({ kind: "CertificateList" });
    expect(await watchThroughEnvoy(`${CERTIFICATES}?watch=true&w%61tch=false`, await token())).toEqual({ kind: "denied", http: "BadRequest", reason: "bad-request" });
  });
});
