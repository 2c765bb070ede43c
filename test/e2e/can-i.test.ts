/**
 * `can-i` (issue 17 §3) against the real kube-apiserver and OpenFGA: the table of user ∩ plugin
 * for two users and two installations, each checked end to end — every request a listed row allows
 * gets through portcullis AND the API server (as Envoy forwards it), and every sampled request the
 * table does not list is refused by one of them. The second installation (pod-inspector) is built
 * here, with wildcard rules (`*` groups, `*∕status`, `*` verbs) the first one lacks.
 */
import { CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api, type V1PolicyRule } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CanIList, RuleRow } from "../../src/server/can-i.ts";
import { cli } from "../cli/run.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { startFundamentWorld, type FundamentWorld, type UserName, users, waitFor } from "./fundament-world.ts";

let world: FundamentWorld;
/** A second server on the world's ports, with the admin diagnostics on. */
let diagnostics: TestServer;
let admin: string;
let podInspectorUid: string;

const POD_INSPECTOR_RBAC: V1PolicyRule[] = [
  { apiGroups: [""], resources: ["pods", "pods/log", "configmaps"], verbs: ["get", "list"] },
  { apiGroups: ["*"], resources: ["*/status"], verbs: ["get"] },
  { apiGroups: ["cert-manager.io"], resources: ["certificates"], verbs: ["*"] },
  { apiGroups: [""], resources: ["secrets"], verbs: ["get"], resourceNames: ["db-password"] },
];

beforeAll(async () => {
  world = await startFundamentWorld();
  diagnostics = await startTestServer(world.ports, { ...world.config, admin: { ...world.config.admin, explain: true } });
  admin = `127.0.0.1:${diagnostics.server.adminPort}`;
  // A second installation, as plugin-controller would make it.
  const core = world.admin.makeApiClient(CoreV1Api);
  const rbac = world.admin.makeApiClient(RbacAuthorizationV1Api);
  const custom = world.admin.makeApiClient(CustomObjectsApi);
  await core.createNamespace({ body: { metadata: { name: "plugin-pod-inspector" } } });
  await core.createNamespacedServiceAccount({ namespace: "plugin-pod-inspector", body: { metadata: { name: "plugin-pod-inspector" } } });
  await rbac.createClusterRole({ body: { metadata: { name: "plugin-pod-inspector" }, rules: POD_INSPECTOR_RBAC } });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: "plugin-pod-inspector" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "plugin-pod-inspector" },
      subjects: [{ kind: "ServiceAccount", name: "plugin-pod-inspector", namespace: "plugin-pod-inspector" }],
    },
  });
  const installation = (await custom.createClusterCustomObject({
    group: "plugins.fundament.io",
    version: "v1",
    plural: "plugininstallations",
    body: {
      apiVersion: "plugins.fundament.io/v1",
      kind: "PluginInstallation",
      metadata: { name: "pod-inspector" },
      spec: { organizationId: "org-acme", definitionRef: { pluginName: "pod-inspector", pluginVersion: "0.3.0", definitionHash: `sha256:${"cd".repeat(32)}` } },
    },
  })) as { metadata: { uid: string } };
  podInspectorUid = installation.metadata.uid;
  await waitFor(async () => world.ports.installations.byUid(ids.cluster, podInspectorUid) !== undefined);
}, 180_000);

afterAll(async () => {
  await diagnostics?.stop();
  await world?.stop();
});

async function canI(body: Record<string, unknown>): Promise<{ status: number; json: unknown; text: string }> {
  const res = await fetch(`http://${admin}/can-i`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : undefined };
}

const list = async (user: UserName, installation: string, namespace: string) => {
  const res = await canI({ user: users[user], installation, cluster: ids.cluster, namespace });
  expect(res.status, res.text).toBe(200);
  return res.json as CanIList;
};

// ---- requests, as a path and an HTTP method, from (verb, group, resource, name, namespace) ----

const CLUSTER_SCOPED = new Set(["selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews", "namespaces", "nodes", "clustertrustbundles"]);
/** The groups the world's rules name (the bootstrap roles give every ServiceAccount clustertrustbundles, a beta API the harness does not serve: 404 after authorization). */
const VERSION: Record<string, string> = { "": "v1", "cert-manager.io": "v1", "authorization.k8s.io": "v1", "authentication.k8s.io": "v1", "certificates.k8s.io": "v1beta1" };
const REVIEW_BODIES: Record<string, unknown> = {
  selfsubjectaccessreviews: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectAccessReview", spec: { resourceAttributes: { verb: "get", resource: "pods" } } },
  selfsubjectrulesreviews: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectRulesReview", spec: { namespace: "team-a" } },
  selfsubjectreviews: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
};

interface Probe {
  verb: string;
  group: string;
  resource: string;
  subresource: string;
  name: string;
  namespace: string;
}

function httpOf(p: Probe): { method: string; path: string; body?: unknown } {
  const version = VERSION[p.group];
  if (version === undefined) throw new Error(`no probe for group ${p.group}`);
  const base = p.group === "" ? "/api/v1" : `/apis/${p.group}/${version}`;
  const ns = CLUSTER_SCOPED.has(p.resource) || p.namespace === "" ? "" : `/namespaces/${p.namespace}`;
  const collection = `${base}${ns}/${p.resource}`;
  const object = `${collection}/${p.name}${p.subresource === "" ? "" : `/${p.subresource}`}`;
  const kind = p.resource === "certificates" ? { apiVersion: "cert-manager.io/v1", kind: "Certificate" } : { apiVersion: "v1", kind: p.resource === "secrets" ? "Secret" : "ConfigMap" };
  const review = REVIEW_BODIES[p.resource];
  switch (p.verb) {
    case "get":
      return { method: "GET", path: object };
    case "list":
      return { method: "GET", path: collection };
    case "watch":
      return { method: "GET", path: `${collection}?watch=1&timeoutSeconds=1` };
    case "create":
      return { method: "POST", path: `${collection}?dryRun=All`, body: review ?? { ...kind, metadata: { name: "probe" } } };
    case "update":
      return { method: "PUT", path: `${object}?dryRun=All`, body: { ...kind, metadata: { name: p.name } } };
    case "patch":
      return { method: "PATCH", path: `${object}?dryRun=All`, body: { metadata: { labels: { probe: "x" } } } };
    case "delete":
      return { method: "DELETE", path: `${object}?dryRun=All` };
    case "deletecollection":
      return { method: "DELETE", path: `${collection}?dryRun=All` };
    default:
      throw new Error(`no probe for verb ${p.verb}`);
  }
}

/** Objects the world has, so that a get reaches one (a 404 would still have passed every gate). */
const NAME_OF: Record<string, string> = { certificates: "web", secrets: "cert-manager-webhook-ca", pods: "web-0", configmaps: "kube-root-ca.crt" };
const EVERY_VERB = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

/** The concrete requests one listed row allows (a name per listed resourceName, `*` verbs as every verb). */
function probesOf(row: RuleRow): Probe[] {
  const [resource, subresource = ""] = row.resource.split("/") as [string, string?];
  const verbs = row.verbs.includes("*") ? EVERY_VERB : row.verbs;
  const names = row.resourceNames.length > 0 ? row.resourceNames : [NAME_OF[resource] ?? "probe"];
  return verbs.flatMap((verb) => {
    // A collection verb names nothing, so a row limited to names does not allow it.
    const collectionVerb = verb === "list" || verb === "watch" || verb === "deletecollection" || (verb === "create" && subresource === "");
    if (collectionVerb && row.resourceNames.length > 0) return [];
    return (collectionVerb ? [""] : names).map((name) => ({ verb, group: row.apiGroup, resource, subresource, name, namespace: row.namespace }));
  });
}

/** Whether the table lists a request: an independent reading of the rows, as RBAC matches. */
function tableLists(listed: CanIList, p: Probe): boolean {
  const combined = p.subresource === "" ? p.resource : `${p.resource}/${p.subresource}`;
  return listed.rows.some(
    (r) =>
      (r.apiGroup === "*" || r.apiGroup === p.group) &&
      (r.resource === "*" || r.resource === combined || (p.subresource !== "" && r.resource === `*/${p.subresource}`)) &&
      (r.verbs.includes("*") || r.verbs.includes(p.verb)) &&
      (r.resourceNames.length === 0 || (p.name !== "" && r.resourceNames.includes(p.name))),
  );
}

const INSTALLATIONS = {
  "cert-manager": () => ({ uid: world.installationUid, name: "cert-manager", plugin: "cert-manager" }),
  "pod-inspector": () => ({ uid: podInspectorUid, name: "pod-inspector", plugin: "pod-inspector" }),
} as const;
type InstallationName = keyof typeof INSTALLATIONS;

/** Sends one request through portcullis, then (on allow) to the API server as Envoy forwards it. */
async function endToEnd(user: UserName, installation: InstallationName, http: { method: string; path: string; body?: unknown }): Promise<{ allowed: boolean; via: string }> {
  const inst = INSTALLATIONS[installation]();
  const token = await pluginToken({ sub: users[user], installation_id: inst.uid, installation_name: inst.name, plugin_name: inst.plugin });
  const res = await world.portcullis.check({ method: http.method, path: `/clusters/${ids.cluster}${http.path}`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
  if (!res.allowed) return { allowed: false, via: `portcullis ${res.reason}` };
  const status = await world.replay(http.method, http.path, { authorization: res.set["authorization"]! }, http.body);
  return { allowed: status !== 401 && status !== 403, via: `api server ${status}` };
}

/** Requests the table may or may not list; each is checked against the table's own answer. */
// prettier-ignore
const SAMPLES: Probe[] = [
  ...["get", "list", "create", "delete", "patch"].flatMap((verb) => [
    { verb, group: "cert-manager.io", resource: "certificates", subresource: "", name: verb === "list" || verb === "create" ? "" : "web", namespace: "team-a" },
    { verb, group: "", resource: "secrets", subresource: "", name: verb === "list" || verb === "create" ? "" : "cert-manager-webhook-ca", namespace: "team-a" },
    { verb, group: "", resource: "configmaps", subresource: "", name: verb === "list" || verb === "create" ? "" : "kube-root-ca.crt", namespace: "team-a" },
  ]),
  { verb: "get", group: "", resource: "secrets", subresource: "", name: "db-password", namespace: "team-a" },
  { verb: "get", group: "cert-manager.io", resource: "certificaterequests", subresource: "", name: "web", namespace: "team-a" },
  { verb: "list", group: "cert-manager.io", resource: "certificaterequests", subresource: "", name: "", namespace: "team-a" },
  { verb: "get", group: "cert-manager.io", resource: "certificates", subresource: "status", name: "web", namespace: "team-a" },
  { verb: "get", group: "", resource: "pods", subresource: "", name: "web-0", namespace: "team-a" },
  { verb: "list", group: "", resource: "pods", subresource: "", name: "", namespace: "team-a" },
  { verb: "get", group: "", resource: "pods", subresource: "log", name: "web-0", namespace: "team-a" },
  { verb: "get", group: "", resource: "pods", subresource: "status", name: "web-0", namespace: "team-a" },
  { verb: "get", group: "", resource: "namespaces", subresource: "", name: "team-a", namespace: "" },
  { verb: "list", group: "", resource: "nodes", subresource: "", name: "", namespace: "" },
];

const COMBINATIONS: Array<[UserName, InstallationName]> = [
  ["alice", "cert-manager"],
  ["alice", "pod-inspector"],
  ["carol", "cert-manager"],
  ["carol", "pod-inspector"],
];

describe("can-i --list: the table is what gets through portcullis and the API server", () => {
  it.each(COMBINATIONS)("%s with %s in team-a", async (user, installation) => {
    const listed = await list(user, installation, "team-a");
    expect(listed).toMatchObject({ canView: true, incomplete: false, installation: { name: installation } });
    expect(listed.user).toMatchObject({ exists: true, serviceAccount: `fundament-system/fundament-${users[user]}` });
    expect(listed.plugin).toMatchObject({ exists: true, serviceAccount: `plugin-${installation}/plugin-${installation}` });
    const mismatches: string[] = [];
    const table: Array<Record<string, unknown>> = [];
    // Every listed row: each request it allows gets through.
    let listedProbes = 0;
    for (const row of listed.rows) {
      for (const probe of probesOf(row)) {
        const http = httpOf(probe);
        const outcome = await endToEnd(user, installation, http);
        listedProbes++;
        table.push({ listed: true, request: `${http.method} ${http.path}`, ...outcome });
        if (!outcome.allowed) mismatches.push(`listed but refused: ${http.method} ${http.path} (${outcome.via})`);
      }
    }
    // Every non-resource URL listed gets through too.
    for (const row of listed.nonResource) {
      if (!row.verbs.includes("get") && !row.verbs.includes("*")) continue;
      const path = row.url === "*" ? "/version" : row.url.endsWith("*") ? { "/api/*": "/api/v1", "/apis/*": "/apis/cert-manager.io/v1" }[row.url] : row.url;
      if (path === undefined) continue;
      const outcome = await endToEnd(user, installation, { method: "GET", path });
      listedProbes++;
      table.push({ listed: true, request: `GET ${path}`, ...outcome });
      if (!outcome.allowed) mismatches.push(`listed but refused: GET ${path} (${outcome.via})`);
    }
    // The samples: through iff the table lists them.
    let refusedSamples = 0;
    for (const probe of SAMPLES) {
      const http = httpOf(probe);
      const lists = tableLists(listed, probe);
      const outcome = await endToEnd(user, installation, http);
      if (!lists) refusedSamples++;
      table.push({ listed: lists, request: `${http.method} ${http.path}`, ...outcome });
      if (outcome.allowed !== lists) mismatches.push(`${lists ? "listed" : "not listed"} but ${outcome.allowed ? "allowed" : "refused"}: ${http.method} ${http.path} (${outcome.via})`);
    }
    console.table(table);
    expect(mismatches).toEqual([]);
    expect(listed.rows.length).toBeGreaterThan(0);
    expect(listedProbes).toBeGreaterThan(3);
    expect(refusedSamples).toBeGreaterThan(3);
  }, 120_000);

  it("lists the intersection the world's RBAC implies", async () => {
    const row = (l: CanIList, group: string, resource: string) => l.rows.filter((r) => r.apiGroup === group && r.resource === resource).map((r) => ({ verbs: r.verbs, names: r.resourceNames }));
    const aliceCert = await list("alice", "cert-manager", "team-a");
    expect(row(aliceCert, "cert-manager.io", "certificates")).toEqual([{ verbs: ["get", "list", "watch"], names: [] }]);
    expect(row(aliceCert, "", "secrets")).toEqual([{ verbs: ["get"], names: ["cert-manager-webhook-ca"] }]);
    expect(row(aliceCert, "cert-manager.io", "certificaterequests")).toEqual([]);
    // pod-inspector's `*` verbs on certificates meet alice's editor verbs; its single secret name meets her secrets.
    const alicePods = await list("alice", "pod-inspector", "team-a");
    expect(row(alicePods, "cert-manager.io", "certificates")).toEqual([{ verbs: ["create", "delete", "get", "list", "patch", "update", "watch"], names: [] }]);
    expect(row(alicePods, "", "secrets")).toEqual([{ verbs: ["get"], names: ["db-password"] }]);
    expect(row(alicePods, "", "pods/log")).toEqual([{ verbs: ["get", "list"], names: [] }]);
    // Outside team-a alice has no secrets, whatever the plugin has.
    expect(row(await list("alice", "pod-inspector", "team-b"), "", "secrets")).toEqual([]);
    // Non-resource URLs: both have the bootstrap discovery roles.
    expect(aliceCert.nonResource.map((u) => u.url)).toEqual(expect.arrayContaining(["/version", "/api", "/apis/*"]));
    // …but only those the gateway forwards: the review lists /healthz and /livez for both.
    expect(aliceCert.nonResource.map((u) => u.url).filter((u) => !/^\/(api|apis|version|openapi)(\/|$)/.test(u))).toEqual([]);
  });

  it("says when can_view(user, cluster) does not hold, and lists nothing", async () => {
    const res = await canI({ user: users.dave, installation: "cert-manager", cluster: ids.cluster, namespace: "team-a" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ canView: false, rows: [], nonResource: [] });
  });

  it("finds the installation by uid or name, and refuses what it cannot find", async () => {
    const byUid = await canI({ user: users.alice, installation: podInspectorUid, cluster: ids.cluster, namespace: "team-a" });
    expect(byUid.json).toMatchObject({ installation: { uid: podInspectorUid, name: "pod-inspector" } });
    expect((await canI({ user: users.alice, installation: "nope", cluster: ids.cluster })).status).toBe(404);
    expect((await canI({ user: users.alice, installation: "cert-manager", cluster: ids.otherCluster })).status).toBe(404);
    expect((await canI({ user: "../x", installation: "cert-manager", cluster: ids.cluster })).status).toBe(400);
    expect((await canI({ user: users.alice })).status).toBe(400);
  });
});

describe("portcullis can-i (the CLI)", () => {
  const base = () => ["can-i", "--admin", admin, "--cluster", ids.cluster];

  it("--list prints the table and the gates", async () => {
    const run = await cli([...base(), "--list", "--user", users.alice, "--installation", "cert-manager", "-n", "team-a"]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("can_view(user, cluster): yes");
    expect(run.stdout).toMatch(/^""\s+secrets\s+cert-manager-webhook-ca\s+get\s+team-a$/m);
    expect(run.stdout).toMatch(/^cert-manager\.io\s+certificates\s+\*\s+get,list,watch\s+team-a$/m);
  });

  // prettier-ignore
  const questions: Array<[UserName, string, string[], string, number]> = [
    ["alice", "cert-manager", ["get", "secrets/cert-manager-webhook-ca"], "yes", 0],
    ["alice", "cert-manager", ["get", "secrets/db-password"], "no (decided by plugin)", 1],
    ["alice", "pod-inspector", ["get", "secrets/db-password"], "yes", 0],
    ["bob", "cert-manager", ["get", "secrets/cert-manager-webhook-ca"], "no (decided by user)", 1],
    ["dave", "cert-manager", ["get", "certificates.cert-manager.io/web"], "no (decided by can_view)", 1],
    ["alice", "cert-manager", ["delete", "certificates.cert-manager.io/web"], "no (decided by plugin)", 1],
    ["alice", "pod-inspector", ["delete", "certificates.cert-manager.io/web"], "yes", 0],
    ["alice", "cert-manager", ["get", "/version"], "yes", 0],
    // Both ServiceAccounts may read /healthz, but the gateway forwards only /api, /apis, /version and /openapi.
    ["alice", "cert-manager", ["get", "/healthz"], "no (decided by path)", 1],
  ];
  it.each(questions)("%s with %s: can-i %j → %s", async (user, installation, question, answer, code) => {
    const run = await cli([...base(), "--user", users[user], "--installation", installation, "-n", "team-a", ...question]);
    expect(run.stderr).toBe("");
    expect(run.stdout.split("\n")[0]).toBe(answer);
    expect(run.code).toBe(code);
    // The answer is the end-to-end outcome.
    const [verb, target] = question as [string, string];
    const probe = target.startsWith("/")
      ? { method: "GET", path: target }
      : httpOf({ verb, group: target.includes(".") ? "cert-manager.io" : "", resource: target.split(/[./]/)[0]!, subresource: "", name: target.split("/")[1]!, namespace: "team-a" });
    expect((await endToEnd(user, installation as InstallationName, probe)).allowed).toBe(code === 0);
  });

  it("usage errors exit 2; an admin port without admin.explain says how to turn it on", async () => {
    expect((await cli(["can-i", "--list"])).code).toBe(2);
    expect((await cli([...base(), "--user", users.alice, "--installation", "cert-manager", "--list", "get", "secrets"])).code).toBe(2);
    const off = await cli(["can-i", "--admin", `127.0.0.1:${world.portcullis.server.adminPort}`, "--cluster", ids.cluster, "--user", users.alice, "--installation", "cert-manager", "--list"]);
    expect(off.code).toBe(2);
    expect(off.stderr).toContain("admin.explain");
  });
});
