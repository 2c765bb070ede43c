/**
 * user ∩ plugin where kube-apiserver authorizes inside its handlers (src/kube-reading/requester-checks.ts),
 * against a real kube-apiserver: those checks are made for the requester, which on the PluginToken
 * path is the plugin's ServiceAccount, so the gateway must ask them of the user. Each case shows
 * the API server's side (what the plugin's ServiceAccount alone gets) and the gateway's refusal.
 * bob may get, patch and update ConfigMaps in team-a and create RoleBindings there, but neither
 * create ConfigMaps nor bind a role he does not hold; the plugin may do all of that.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Agent, fetch as undiciFetch } from "undici";
import { CoreV1Api, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { CERT_MANAGER_RBAC, startFundamentWorld, type FundamentWorld, users } from "./fundament-world.ts";
import { ids, pluginToken, userToken } from "../support/tokens.ts";

let world: FundamentWorld;
let pool: Agent;
beforeAll(async () => {
  world = await startFundamentWorld();
  pool = new Agent({ connect: { ca: world.api.caPem } });
  const rbac = world.admin.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({
    namespace: "team-a",
    body: {
      metadata: { name: "bob-writer" },
      rules: [
        { apiGroups: [""], resources: ["configmaps"], verbs: ["get", "patch", "update"] },
        { apiGroups: ["rbac.authorization.k8s.io"], resources: ["rolebindings"], verbs: ["create"] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: "team-a",
    body: {
      metadata: { name: "bob-writer" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "bob-writer" },
      subjects: [{ kind: "ServiceAccount", name: `fundament-${users.bob}`, namespace: "fundament-system" }],
    },
  });
  await world.repin([
    ...CERT_MANAGER_RBAC,
    { apiGroups: [""], resources: ["configmaps"], verbs: ["get", "create", "patch", "update"] },
    { apiGroups: ["rbac.authorization.k8s.io"], resources: ["rolebindings"], verbs: ["create"] },
  ]);
  await world.admin.makeApiClient(CoreV1Api).createNamespacedConfigMap({ namespace: "team-a", body: { metadata: { name: "existing" }, data: { a: "1" } } });
}, 180_000);
afterAll(async () => {
  await pool?.close();
  await world?.stop();
});

const CONFIGMAPS = "/api/v1/namespaces/team-a/configmaps";
const BINDINGS = "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings";
const SECRET = "/api/v1/namespaces/team-a/secrets/cert-manager-webhook-ca";
const APPLY = "application/apply-patch+yaml";

async function forward(method: string, path: string, authorization: string, contentType?: string, body?: unknown): Promise<number> {
  const res = await undiciFetch(`${world.api.url}${path}`, {
    method,
    headers: { accept: "application/json", authorization, ...(contentType === undefined ? {} : { "content-type": contentType }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    dispatcher: pool,
  });
  await res.body?.cancel();
  return res.status;
}

/** portcullis's decision and, when it allows, the API server's answer to the request Envoy forwards. */
async function through(credential: "plugin" | "user", method: string, path: string, contentType?: string, body?: unknown): Promise<number | string> {
  const token = credential === "plugin" ? await pluginToken({ sub: users.bob, installation_id: world.installationUid }) : await userToken({ sub: users.bob });
  const headers = { authorization: `Bearer ${token}`, ...(contentType === undefined ? {} : { "content-type": contentType }) };
  const res = await world.portcullis.check({ method, path: `/clusters/${ids.cluster}${path}`, headers, policy: "kube-api-proxy" });
  return res.allowed ? forward(method, path, res.set["authorization"]!, contentType, body) : `denied:${res.reason}`;
}

/** The plugin's ServiceAccount token, as portcullis hands it to Envoy for a request bob may make. */
async function pluginServiceAccountToken(): Promise<string> {
  const token = await pluginToken({ sub: users.bob, installation_id: world.installationUid });
  const res = await world.portcullis.check({ method: "GET", path: `/clusters/${ids.cluster}${CONFIGMAPS}/existing`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
  if (!res.allowed) throw new Error(`bob's read was refused: ${res.reason}`);
  return res.set["authorization"]!;
}

const configMap = (name: string) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: "team-a" }, data: { a: "2" } });
const bindingToPluginRole = (name: string) => ({
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "RoleBinding",
  metadata: { name },
  roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "plugin-cert-manager" },
  subjects: [{ kind: "ServiceAccount", name: `fundament-${users.bob}`, namespace: "fundament-system" }],
});

describe("a write the API server turns into a create", () => {
  it("the API server: a server-side apply of a missing object by the plugin's ServiceAccount creates it (201)", async () => {
    expect(await forward("PATCH", `${CONFIGMAPS}/premise?fieldManager=plugin`, await pluginServiceAccountToken(), APPLY, configMap("premise"))).toBe(201);
  });

  it("through the plugin, bob's apply of a missing ConfigMap is refused: he may not create one", async () => {
    expect(await through("plugin", "POST", CONFIGMAPS, "application/json", configMap("posted"))).toBe("denied:user-sar-denied");
    expect(await through("plugin", "PATCH", `${CONFIGMAPS}/smuggled?fieldManager=plugin`, APPLY, configMap("smuggled"))).toBe("denied:user-sar-denied");
  });

  it("through the plugin, bob's merge patch of an existing ConfigMap is still allowed (200)", async () => {
    expect(await through("plugin", "PATCH", `${CONFIGMAPS}/existing`, "application/merge-patch+json", { data: { a: "3" } })).toBe(200);
  });
});

describe("RBAC's escalation check", () => {
  it("the API server: bob may not bind the plugin's ClusterRole to himself, the plugin's ServiceAccount may (403, 201)", async () => {
    expect(await through("user", "POST", BINDINGS, "application/json", bindingToPluginRole("direct"))).toBe(403);
    expect(await forward("POST", `${BINDINGS}?dryRun=All`, await pluginServiceAccountToken(), "application/json", bindingToPluginRole("premise"))).toBe(201);
  });

  it("through the plugin, bob's binding is refused, and he still cannot read what only the plugin may", async () => {
    expect(await through("plugin", "POST", BINDINGS, "application/json", bindingToPluginRole("via-plugin"))).toBe("denied:user-sar-denied");
    expect(await through("user", "GET", SECRET)).toBe(403);
  });
});
