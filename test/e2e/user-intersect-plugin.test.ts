/**
 * FUN-17's promise, proven against a real kube-apiserver and a real OpenFGA: "a plugin you installed
 * cannot do more than the lesser of what it declared and what you yourself may do".
 *
 * Each row is sent to portcullis as Envoy would; on allow it is replayed against the real API
 * server with the injected header exactly as Envoy forwards it. The expected outcome of every row
 * is declared independently, from the RBAC the world sets up, as (user may) ∧ (plugin may).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { CERT_MANAGER_RBAC, startFundamentWorld, type FundamentWorld, type UserName, users, waitFor } from "./fundament-world.ts";
import { ids, pluginToken, userToken } from "../support/tokens.ts";

let world: FundamentWorld;
beforeAll(async () => {
  world = await startFundamentWorld();
}, 180_000);
afterAll(async () => world?.stop());

const cert = "/apis/cert-manager.io/v1";
const core = "/api/v1";
const newCert = { apiVersion: "cert-manager.io/v1", kind: "Certificate", metadata: { name: "new" }, spec: {} };

interface Row {
  user: UserName;
  method: string;
  path: string;
  userMay: boolean;
  pluginMay: boolean;
  body?: unknown;
}

// prettier-ignore
const rows: Row[] = [
  // alice: cert editor in team-a, cert viewer in team-b; reads secrets, pods and logs in team-a.
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates/web`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates?watch=1&timeoutSeconds=1`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/watch/namespaces/team-a/certificates?timeoutSeconds=1`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates?fieldSelector=metadata.name%3Dweb`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates?watch=true&fieldSelector=metadata.name%3Dweb&timeoutSeconds=1`, userMay: true, pluginMay: true },
  { user: "alice", method: "POST", path: `${cert}/namespaces/team-a/certificates?dryRun=All`, body: newCert, userMay: true, pluginMay: false },
  { user: "alice", method: "PUT", path: `${cert}/namespaces/team-a/certificates/web?dryRun=All`, body: { ...newCert, metadata: { name: "web" } }, userMay: true, pluginMay: false },
  { user: "alice", method: "PATCH", path: `${cert}/namespaces/team-a/certificates/web?dryRun=All`, body: { spec: { x: 1 } }, userMay: true, pluginMay: false },
  { user: "alice", method: "DELETE", path: `${cert}/namespaces/team-a/certificates/web?dryRun=All`, userMay: true, pluginMay: false },
  { user: "alice", method: "DELETE", path: `${cert}/namespaces/team-a/certificates?dryRun=All`, userMay: false, pluginMay: false },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificaterequests`, userMay: false, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-a/certificates/web/status`, userMay: false, pluginMay: false },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-b/certificates/web`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-b/certificates`, userMay: true, pluginMay: true },
  { user: "alice", method: "DELETE", path: `${cert}/namespaces/team-b/certificates/web?dryRun=All`, userMay: false, pluginMay: false },
  { user: "alice", method: "GET", path: `${cert}/namespaces/team-c/certificates`, userMay: false, pluginMay: true },
  { user: "alice", method: "GET", path: `${cert}/certificates`, userMay: false, pluginMay: true },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`, userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/secrets/db-password`, userMay: true, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/secrets`, userMay: true, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dcert-manager-webhook-ca`, userMay: true, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-b/secrets/cert-manager-webhook-ca`, userMay: false, pluginMay: true },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/pods`, userMay: true, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/pods/web-0/log`, userMay: true, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a`, userMay: false, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/nodes`, userMay: false, pluginMay: false },
  { user: "alice", method: "GET", path: `${core}/namespaces/team-a/configmaps`, userMay: false, pluginMay: false },
  // Non-resource paths: the bootstrap roles system:discovery and system:public-info-viewer grant both.
  { user: "alice", method: "GET", path: "/version", userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: "/openapi/v2", userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: "/api", userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: "/apis", userMay: true, pluginMay: true },
  { user: "alice", method: "GET", path: "/apis/cert-manager.io/v1", userMay: true, pluginMay: true },
  // bob: cluster-wide certificate viewer, nothing else.
  { user: "bob", method: "GET", path: `${cert}/certificates`, userMay: true, pluginMay: true },
  { user: "bob", method: "GET", path: `${cert}/namespaces/team-c/certificates/web`, userMay: true, pluginMay: true },
  { user: "bob", method: "GET", path: `${cert}/watch/certificates?timeoutSeconds=1`, userMay: true, pluginMay: true },
  { user: "bob", method: "POST", path: `${cert}/namespaces/team-a/certificates?dryRun=All`, body: newCert, userMay: false, pluginMay: false },
  { user: "bob", method: "GET", path: `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`, userMay: false, pluginMay: true },
  { user: "bob", method: "GET", path: `${cert}/namespaces/team-a/certificaterequests`, userMay: false, pluginMay: true },
  { user: "bob", method: "GET", path: `${core}/namespaces/team-a/pods`, userMay: false, pluginMay: false },
  // carol: admin of core resources in team-a only.
  { user: "carol", method: "GET", path: `${core}/namespaces/team-a/secrets`, userMay: true, pluginMay: false },
  { user: "carol", method: "GET", path: `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`, userMay: true, pluginMay: true },
  { user: "carol", method: "DELETE", path: `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca?dryRun=All`, userMay: true, pluginMay: false },
  { user: "carol", method: "PATCH", path: `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca?dryRun=All`, body: { metadata: { labels: { a: "b" } } }, userMay: true, pluginMay: false },
  { user: "carol", method: "GET", path: `${cert}/namespaces/team-a/certificates`, userMay: false, pluginMay: true },
  { user: "carol", method: "GET", path: `${core}/namespaces/team-a/configmaps`, userMay: true, pluginMay: false },
  { user: "carol", method: "GET", path: `${core}/namespaces/team-a/pods/web-0/log`, userMay: true, pluginMay: false },
  { user: "carol", method: "GET", path: `${core}/namespaces/team-b/secrets`, userMay: false, pluginMay: false },
  { user: "carol", method: "GET", path: `${core}/namespaces/team-b/secrets/cert-manager-webhook-ca`, userMay: false, pluginMay: true },
];

interface Outcome {
  portcullis: string;
  apiServer: number | "-";
  allowed: boolean;
}

async function send(user: UserName, method: string, path: string, body?: unknown): Promise<Outcome> {
  const token = await pluginToken({ sub: users[user], installation_id: world.installationUid });
  const res = await world.portcullis.check({ method, path: `/clusters/${ids.cluster}${path}`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
  if (!res.allowed) return { portcullis: `denied:${res.reason}`, apiServer: "-", allowed: false };
  // Envoy forwards with the mutations applied and /clusters/{id} stripped.
  const status = await world.replay(method, path, { authorization: res.set["authorization"]! }, body);
  return { portcullis: "allowed", apiServer: status, allowed: status !== 401 && status !== 403 };
}

describe("user ∩ plugin, end to end", () => {
  it(`holds for all ${rows.length} rows of the matrix`, async () => {
    const table: Array<Record<string, string | number | boolean>> = [];
    const mismatches: string[] = [];
    for (const row of rows) {
      const outcome = await send(row.user, row.method, row.path, row.body);
      const expected = row.userMay && row.pluginMay;
      table.push({
        user: row.user,
        request: `${row.method} ${row.path}`,
        "user may": row.userMay,
        "plugin may": row.pluginMay,
        portcullis: outcome.portcullis,
        "api server": outcome.apiServer,
        "end to end": outcome.allowed ? "allowed" : "denied",
      });
      if (outcome.allowed !== expected) mismatches.push(`${row.user} ${row.method} ${row.path}: expected ${expected}, got ${JSON.stringify(outcome)}`);
      // Where the user may not, the gateway's SAR is the cap; where only the plugin may not, the cluster is.
      if (!row.userMay && outcome.portcullis !== "denied:user-sar-denied") mismatches.push(`${row.user} ${row.method} ${row.path}: gateway should deny, got ${outcome.portcullis}`);
      if (row.userMay && !row.pluginMay && outcome.apiServer !== 403) mismatches.push(`${row.user} ${row.method} ${row.path}: API server should deny the plugin SA, got ${outcome.apiServer}`);
    }
    console.table(table);
    expect(rows.length).toBeGreaterThanOrEqual(40);
    expect(mismatches).toEqual([]);
  }, 120_000);

  it("UserToken requests carry the user's own ServiceAccount token, which the API server accepts as that user", async () => {
    const res = await world.portcullis.check({
      path: `/clusters/${ids.cluster}${cert}/namespaces/team-a/certificates`,
      headers: { authorization: `Bearer ${await userToken({ sub: users.alice })}` },
      policy: "kube-api-proxy",
    });
    expect(res.allowed).toBe(true);
    if (!res.allowed) return;
    expect(await world.replay("GET", `${cert}/namespaces/team-a/certificates`, { authorization: res.set["authorization"]! })).toBe(200);
    // The user's token has the user's reach, not the plugin's: a create the plugin could never do.
    expect(await world.replay("POST", `${cert}/namespaces/team-a/certificates?dryRun=All`, { authorization: res.set["authorization"]! }, newCert)).toBe(201);
  });
});

describe("lifecycle (FUN-17 §10) against the real systems", () => {
  const read = `${cert}/namespaces/team-a/certificates/web`;

  it("wrong cluster, unknown cluster and wrong installation are denied", async () => {
    const token = await pluginToken({ installation_id: world.installationUid });
    const unknown = "99999999-9999-4999-8999-999999999999";
    expect(await world.portcullis.check({ path: `/clusters/${ids.otherCluster}${read}`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" })).toMatchObject({ reason: "cluster-mismatch" });
    const unknownToken = await pluginToken({ cluster_id: unknown, installation_id: world.installationUid });
    await world.fgaClient.write({ writes: [{ user: "organization:acme", relation: "owner", object: `cluster:${unknown}` }] });
    expect(await world.portcullis.check({ path: `/clusters/${unknown}${read}`, headers: { authorization: `Bearer ${unknownToken}` }, policy: "kube-api-proxy" })).toMatchObject({ http: 404, reason: "unknown-cluster" });
    const otherInstallation = await pluginToken({ installation_id: ids.otherInstallation });
    expect(await world.portcullis.check({ path: `/clusters/${ids.cluster}${read}`, headers: { authorization: `Bearer ${otherInstallation}` }, policy: "kube-api-proxy" })).toMatchObject({ reason: "installation-unavailable" });
  });

  it("the SubjectAccessReview follows RoleBinding changes once the cache TTL has passed", async () => {
    expect(await send("bob", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).toMatchObject({ portcullis: "denied:user-sar-denied" });
    const { RbacAuthorizationV1Api } = await import("@kubernetes/client-node");
    const rbac = world.admin.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRoleBinding({
      namespace: "team-a",
      body: {
        metadata: { name: "bob-secrets" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "project-admin" },
        subjects: [{ kind: "ServiceAccount", name: `fundament-${users.bob}`, namespace: "fundament-system" }],
      },
    });
    await waitFor(async () => (await send("bob", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).allowed);
    await rbac.deleteNamespacedRoleBinding({ namespace: "team-a", name: "bob-secrets" });
    await waitFor(async () => (await send("bob", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).portcullis === "denied:user-sar-denied");
  });

  it("removing the user from the organization in OpenFGA denies once the cache TTL has passed", async () => {
    expect((await send("carol", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).allowed).toBe(true);
    await world.fgaClient.write({ deletes: [{ user: `user:${users.carol}`, relation: "admin", object: "organization:acme" }] });
    await new Promise((r) => setTimeout(r, 600));
    expect(await send("carol", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).toMatchObject({ portcullis: "denied:can-view-denied" });
    expect(await send("dave", "GET", "/version")).toMatchObject({ portcullis: "denied:can-view-denied" });
  });

  it("a re-pin to a narrower definition caps the next request at the new Role, and the audit line shows both hashes", async () => {
    const before = await send("alice", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`);
    expect(before).toMatchObject({ allowed: true, apiServer: 200 });
    const oldHash = (world.portcullis.logs.filter((l) => l["audit"] === "plugin_request").at(-1) ?? {})["pinned_definition_hash"];
    const narrower = CERT_MANAGER_RBAC.filter((r) => !r.resources?.includes("secrets"));
    const newHash = await world.repin(narrower);
    // The index follows the re-pin…
    await waitFor(async () => {
      await send("alice", "GET", "/version");
      await new Promise((r) => setTimeout(r, 20));
      return world.portcullis.logs.filter((l) => l["audit"] === "plugin_request").at(-1)?.["pinned_definition_hash"] === newHash;
    });
    // …and the cluster caps the plugin ServiceAccount at the new Role.
    expect(await send("alice", "GET", `${core}/namespaces/team-a/secrets/cert-manager-webhook-ca`)).toMatchObject({ portcullis: "allowed", apiServer: 403, allowed: false });
    await new Promise((r) => setTimeout(r, 20));
    const last = world.portcullis.logs.filter((l) => l["audit"] === "plugin_request").at(-1)!;
    expect(last).toMatchObject({ definition_hash: `sha256:${"ab".repeat(32)}`, pinned_definition_hash: newHash, decision: "allowed" });
    expect(newHash).not.toBe(oldHash);
  });

  it("deleting the installation denies the next request", async () => {
    const custom = world.admin.makeApiClient(CustomObjectsApi);
    await custom.deleteClusterCustomObject({ group: "plugins.fundament.io", version: "v1", plural: "plugininstallations", name: "cert-manager" });
    await waitFor(async () => (await send("alice", "GET", `${cert}/namespaces/team-a/certificates/web`)).portcullis === "denied:installation-unavailable");
  });
});
