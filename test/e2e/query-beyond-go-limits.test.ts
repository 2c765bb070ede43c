/**
 * Issue 11, "Query beyond Go's limits", against the real kube-apiserver v1.37.2 and OpenFGA.
 *
 * carol may, in team-b, list pods by the name web-1 only (RBAC resourceNames) and watch pods; she
 * may not list them all. The plugin may list and watch every pod in team-b. The request of the
 * issue, `?fieldSelector=metadata.name%3Dweb-1` followed by 10,000 `&`, has 10,001 parameters:
 * Go's net/url drops the whole query, so kube-apiserver runs `list pods` (every pod) where the
 * gateway used to review `list pods name=web-1`, which carol may. The `?watch=1` variant turns a
 * watch into that list. The test shows, on the real API server:
 *  1. kube-apiserver ignores the query: carol's own ServiceAccount token is refused both requests
 *     (403) though it may do the same request with 9,999 `&`;
 *  2. the plugin's token, which the gateway would have injected, lists every pod with them;
 *  3. portcullis denies both with a 400 bad-request, and still allows (and the API server serves)
 *     the same requests within Go's limit.
 * Issue 42 §6: a pair Go cannot read (`%zz`, a `;`) is dropped by kube-apiserver, which reads the
 * rest: the request is served. portcullis reads it the same way, so both ServiceAccounts it injects
 * get what carol's own gets, and a pair whose loss widens the request is reviewed widened (refused).
 */
import { Agent, fetch as undiciFetch } from "undici";
import { CoreV1Api, RbacAuthorizationV1Api, type V1PolicyRule } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFundamentWorld, type FundamentWorld, users } from "./fundament-world.ts";
import { ids, pluginToken, userToken } from "../support/tokens.ts";

const PODS = "/api/v1/namespaces/team-b/pods";
const SELECTOR = "fieldSelector=metadata.name%3Dweb-1";
const BEYOND = "&".repeat(10_000);
const WITHIN = "&".repeat(9_999);

let world: FundamentWorld;
let pool: Agent;
/** carol's own per-user ServiceAccount token and the plugin's, as portcullis injects them. */
let carolSa: string;
let pluginSa: string;

beforeAll(async () => {
  world = await startFundamentWorld();
  pool = new Agent({ connect: { ca: world.api.caPem } });
  const core = world.admin.makeApiClient(CoreV1Api);
  const rbac = world.admin.makeApiClient(RbacAuthorizationV1Api);
  // No controller-manager here: the namespace's default ServiceAccount is made by hand for admission.
  await core.createNamespacedServiceAccount({ namespace: "team-b", body: { metadata: { name: "default" } } });
  for (const name of ["web-1", "web-2", "db-0"]) {
    await core.createNamespacedPod({ namespace: "team-b", body: { metadata: { name }, spec: { containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }] } } });
  }
  const role = async (name: string, rules: V1PolicyRule[], subject: { kind: string; name: string; namespace: string }) => {
    await rbac.createNamespacedRole({ namespace: "team-b", body: { metadata: { name }, rules } });
    await rbac.createNamespacedRoleBinding({
      namespace: "team-b",
      body: { metadata: { name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name }, subjects: [subject] },
    });
  };
  await role(
    "carol-web-1",
    [
      { apiGroups: [""], resources: ["pods"], verbs: ["list"], resourceNames: ["web-1"] },
      { apiGroups: [""], resources: ["pods"], verbs: ["watch"] },
    ],
    { kind: "ServiceAccount", name: `fundament-${users.carol}`, namespace: "fundament-system" },
  );
  await role("plugin-pods", [{ apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] }], {
    kind: "ServiceAccount",
    name: "plugin-cert-manager",
    namespace: "plugin-cert-manager",
  });

  const viaUserToken = await world.portcullis.check({
    path: `/clusters/${ids.cluster}${PODS}`,
    headers: { authorization: `Bearer ${await userToken({ sub: users.carol })}` },
    policy: "kube-api-proxy",
  });
  const viaPluginToken = await check(`${PODS}?${SELECTOR}`);
  if (!viaUserToken.allowed || !viaPluginToken.allowed) throw new Error("setup: portcullis did not issue the two ServiceAccount tokens");
  carolSa = viaUserToken.set["authorization"]!;
  pluginSa = viaPluginToken.set["authorization"]!;
}, 240_000);
afterAll(async () => {
  await pool?.close();
  await world?.stop();
});

/** A UserToken request by carol through portcullis, as Envoy sends it. */
async function checkAsUser(pathAndQuery: string) {
  const token = await userToken({ sub: users.carol });
  return world.portcullis.check({ path: `/clusters/${ids.cluster}${pathAndQuery}`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
}

/** A PluginToken request by carol through portcullis, as Envoy sends it. */
async function check(pathAndQuery: string) {
  const token = await pluginToken({ sub: users.carol, installation_id: world.installationUid });
  return world.portcullis.check({ path: `/clusters/${ids.cluster}${pathAndQuery}`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
}

/** GET on the real API server with a ServiceAccount token: the status and the pod names it returned. */
async function kubeGet(pathAndQuery: string, authorization: string): Promise<{ status: number; pods: string[] }> {
  const res = await undiciFetch(`${world.api.url}${pathAndQuery}`, { headers: { accept: "application/json", authorization }, dispatcher: pool });
  // A list is one JSON object; a watch is a stream of events (its pods are not counted).
  const text = await res.text();
  let items: Array<{ metadata: { name: string } }> = [];
  try {
    items = (JSON.parse(text) as { items?: typeof items }).items ?? [];
  } catch {
    items = [];
  }
  return { status: res.status, pods: items.map((p) => p.metadata.name).sort() };
}

describe("a query past Go's 10,000 parameters, on the real kube-apiserver", () => {
  it("kube-apiserver ignores it: carol's own ServiceAccount is refused what she may do within the limit", async () => {
    expect(await kubeGet(`${PODS}?${SELECTOR}`, carolSa)).toEqual({ status: 200, pods: ["web-1"] });
    expect(await kubeGet(`${PODS}?${SELECTOR}${WITHIN}`, carolSa)).toEqual({ status: 200, pods: ["web-1"] });
    expect((await kubeGet(`${PODS}?${SELECTOR}${BEYOND}`, carolSa)).status).toBe(403);
    expect((await kubeGet(PODS, carolSa)).status).toBe(403);
    // The watch variant: a watch she may do becomes the list she may not.
    expect((await kubeGet(`${PODS}?watch=1&timeoutSeconds=1${WITHIN.slice(1)}`, carolSa)).status).toBe(200);
    expect((await kubeGet(`${PODS}?watch=1&timeoutSeconds=1${BEYOND}`, carolSa)).status).toBe(403);
  });

  it("the plugin's token lists every pod with it: what the gateway would have injected", async () => {
    expect(await kubeGet(`${PODS}?${SELECTOR}${BEYOND}`, pluginSa)).toEqual({ status: 200, pods: ["db-0", "web-1", "web-2"] });
    expect(await kubeGet(`${PODS}?watch=1${BEYOND}`, pluginSa)).toEqual({ status: 200, pods: ["db-0", "web-1", "web-2"] });
  });

  it("portcullis denies both with 400 bad-request, and allows the same requests within Go's limit", async () => {
    for (const query of [`${SELECTOR}${BEYOND}`, `watch=1${BEYOND}`, `watch=1&timeoutSeconds=1${BEYOND}`]) {
      expect(await check(`${PODS}?${query}`)).toMatchObject({ allowed: false, http: 400, grpc: 3, reason: "bad-request" });
    }
    const within = await check(`${PODS}?${SELECTOR}${WITHIN}`);
    expect(within.allowed).toBe(true);
    if (!within.allowed) return;
    expect(await kubeGet(`${PODS}?${SELECTOR}${WITHIN}`, within.set["authorization"]!)).toEqual({ status: 200, pods: ["web-1"] });
    expect(await check(`${PODS}?watch=1&timeoutSeconds=1${WITHIN.slice(1)}`)).toMatchObject({ allowed: true });
  });
});

describe("a pair Go drops while reading the rest (issue 42 §6), on the real kube-apiserver", () => {
  /** Through portcullis's decision: the token it injects, used as Envoy would, on the real API server. */
  async function throughGateway(decision: Awaited<ReturnType<typeof check>>, pathAndQuery: string) {
    expect(decision).toMatchObject({ allowed: true });
    if (!decision.allowed) return undefined;
    return kubeGet(pathAndQuery, decision.set["authorization"]!);
  }

  it("the issue's request: both ServiceAccounts get web-1 (200), as carol's own does", async () => {
    const issue = `${PODS}?${SELECTOR}&%zz=1`;
    expect(await kubeGet(issue, carolSa)).toEqual({ status: 200, pods: ["web-1"] });
    expect(await throughGateway(await checkAsUser(issue), issue)).toEqual({ status: 200, pods: ["web-1"] });
    expect(await throughGateway(await check(issue), issue)).toEqual({ status: 200, pods: ["web-1"] });
  });

  it("a dropped first fieldSelector: the second is the one both read", async () => {
    const shadowed = `${PODS}?fieldSelector=metadata.name%3Ddb-0;&${SELECTOR}&watch=1%zz`;
    expect(await kubeGet(shadowed, carolSa)).toEqual({ status: 200, pods: ["web-1"] });
    expect(await throughGateway(await check(shadowed), shadowed)).toEqual({ status: 200, pods: ["web-1"] });
  });

  it("a fieldSelector Go drops is reviewed as the list of every pod: refused, where the plugin's token would list them all", async () => {
    const widened = `${PODS}?${SELECTOR}%zz`;
    expect((await kubeGet(widened, carolSa)).status).toBe(403);
    expect(await kubeGet(widened, pluginSa)).toEqual({ status: 200, pods: ["db-0", "web-1", "web-2"] });
    expect(await check(widened)).toMatchObject({ allowed: false, http: 403, reason: "user-sar-denied" });
  });
});
