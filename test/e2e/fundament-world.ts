/**
 * A Fundament-like world in a real kube-apiserver and a real OpenFGA: per-user ServiceAccounts
 * with RoleBindings into project namespaces, a PluginInstallation whose ServiceAccount is bound to
 * a ClusterRole built from its PluginDefinition's permissions.rbac (what plugin-controller does),
 * and organizations, clusters and memberships in OpenFGA. portcullis runs on the REAL ports.
 */
import { createHash } from "node:crypto";
import { resolve } from "node:path";
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  KubernetesObjectApi,
  type KubernetesObject,
  RbacAuthorizationV1Api,
  type V1PolicyRule,
} from "@kubernetes/client-node";
import { OpenFgaClient } from "@openfga/sdk";
import { Agent, fetch as undiciFetch } from "undici";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { applyManifests, kubeConfig, startKubeApiserver, startOpenFGA, type KubeApiserver, type OpenFGA } from "../harness/index.ts";
import type { Config } from "../../src/config/schema.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids } from "../support/tokens.ts";

const ROOT = resolve(import.meta.dirname, "../..");
export const CRD_FILES = [resolve(ROOT, "deploy/k8s/crds/plugininstallations.plugins.fundament.io.yaml")];
export const REVOCATION_CRD = resolve(ROOT, "deploy/k8s/crds/revocations.portcullis.fundament.io.yaml");

export const users = {
  alice: ids.user,
  bob: "b0b0b0b0-1111-4111-8111-000000000b0b",
  carol: "ca401ca4-2222-4222-8222-000000000ca4",
  /** Not a member of any organization. */
  dave: "da7eda7e-3333-4333-8333-000000000da7",
} as const;
export type UserName = keyof typeof users;

/** The PluginDefinition manifest of FUN-17 §5's cert-manager example; its hash is the pin. */
export function certManagerDefinition(rbac: V1PolicyRule[]): { bytes: string; hash: string } {
  const bytes = JSON.stringify({ name: "cert-manager", version: "1.4.0", image: "ghcr.io/example/cert-manager-plugin:1.4.0", permissions: { rbac } });
  return { bytes, hash: `sha256:${createHash("sha256").update(bytes).digest("hex")}` };
}

export const CERT_MANAGER_RBAC: V1PolicyRule[] = [
  { apiGroups: ["cert-manager.io"], resources: ["certificates", "certificaterequests"], verbs: ["get", "list", "watch"] },
  { apiGroups: [""], resources: ["secrets"], verbs: ["get"], resourceNames: ["cert-manager-webhook-ca"] },
];

/** A cert-manager Certificate CRD, so the data path has real objects to read. */
const CERTIFICATE_CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: "certificates.cert-manager.io" },
  spec: {
    group: "cert-manager.io",
    scope: "Namespaced",
    names: { kind: "Certificate", plural: "certificates", singular: "certificate", listKind: "CertificateList" },
    versions: [
      {
        name: "v1",
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
      },
    ],
  },
};

export interface FundamentWorld {
  readonly api: KubeApiserver;
  readonly fga: OpenFGA;
  readonly admin: KubeConfig;
  readonly fgaClient: OpenFgaClient;
  readonly ports: ConnectedPorts;
  readonly portcullis: TestServer;
  /** What portcullis runs with (a second replica can be started from it). */
  readonly config: Config;
  /** metadata.uid of the cert-manager PluginInstallation. */
  installationUid: string;
  /** Sends a request to the API server as Envoy forwards it after an allow. */
  replay(method: string, kubePathAndQuery: string, headers: Record<string, string>, body?: unknown): Promise<number>;
  /** Re-pins the installation and reconciles the plugin ServiceAccount's ClusterRole, as plugin-controller does. */
  repin(rbac: V1PolicyRule[]): Promise<string>;
  stop(): Promise<void>;
}

export interface WorldOptions {
  allowTtlMs?: number;
  denyTtlMs?: number;
  /** portcullis's listen addresses; loopback port 0 (any free port) each by default. */
  listen?: { grpc: string; admin: string; internal: string };
  /** Echo portcullis's log and audit lines to stdout. */
  echoLogs?: boolean;
  /** Install the Revocation CRD and watch it on the same API server (the deny-list, issue 17). */
  revocations?: boolean;
  /** tokens.maxLifetimeSeconds.plugin (15 minutes when absent): the local stack's demo PluginTokens live a day. */
  pluginTokenMaxLifetimeSeconds?: number;
}

export const MODEL_FILE = resolve(ROOT, "deploy/openfga/model.fga");

export async function startFundamentWorld(options: WorldOptions = {}): Promise<FundamentWorld> {
  const [api, fga] = await Promise.all([startKubeApiserver(), startOpenFGA({ modelFile: MODEL_FILE })]);
  const admin = kubeConfig(api);
  const installation = await seedKubernetes(api);
  if (options.revocations) await applyManifests(api, [REVOCATION_CRD]);
  const fgaClient = await seedOpenFga(fga);

  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  const custom = admin.makeApiClient(CustomObjectsApi);

  const config = testConfig({
    clusters: [{ id: ids.cluster, kubeconfig: api.kubeconfigPath }],
    openfga: {
      apiUrl: fga.apiUrl,
      storeId: fga.storeId,
      authorizationModelId: fga.modelId,
      timeoutMs: 2_000,
      allowTtlMs: options.allowTtlMs ?? 500,
      denyTtlMs: options.denyTtlMs ?? 300,
    },
    kube: {
      sar: { timeoutMs: 2_000, allowTtlMs: options.allowTtlMs ?? 500, denyTtlMs: options.denyTtlMs ?? 300 },
      tokenRequest: { timeoutMs: 2_000 },
    },
    check: { timeoutMs: 5_000 },
    ...(options.listen === undefined ? {} : { listen: options.listen }),
    ...(options.echoLogs ? { logLevel: "info" } : {}),
    ...(options.revocations ? { revocations: { kubeconfig: api.kubeconfigPath } } : {}),
    ...(options.pluginTokenMaxLifetimeSeconds === undefined
      ? {}
      : { tokens: { ...testConfig().tokens, maxLifetimeSeconds: { plugin: options.pluginTokenMaxLifetimeSeconds } } }),
  });
  const ports = await connectPorts(config, createLogging("warn").logger);
  await waitFor(async () => ports.ready());
  const portcullis = await startTestServer(ports, config, { echo: options.echoLogs ?? false });

  const pool = new Agent({ connect: { ca: api.caPem } });
  const world: FundamentWorld = {
    api,
    fga,
    admin,
    fgaClient,
    ports,
    portcullis,
    config,
    installationUid: installation.metadata!.uid!,
    async replay(method, kubePathAndQuery, headers, body) {
      const res = await undiciFetch(`${api.url}${kubePathAndQuery}`, {
        method,
        headers: { accept: "application/json", ...headers, ...(body === undefined ? {} : { "content-type": method === "PATCH" ? "application/merge-patch+json" : "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        dispatcher: pool,
      });
      await res.body?.cancel();
      return res.status;
    },
    async repin(rules) {
      const next = certManagerDefinition(rules);
      await custom.patchClusterCustomObject({
        group: "plugins.fundament.io",
        version: "v1",
        plural: "plugininstallations",
        name: "cert-manager",
        body: [{ op: "replace", path: "/spec/definitionRef/definitionHash", value: next.hash }],
      });
      await rbac.replaceClusterRole({ name: "plugin-cert-manager", body: { metadata: { name: "plugin-cert-manager" }, rules } });
      return next.hash;
    },
    async stop() {
      await portcullis.stop();
      await pool.close();
      await Promise.all([api.stop(), fga.stop()]);
    },
  };
  return world;
}

/** The Kubernetes half of the world (namespaces, identities, RBAC, the installation, objects); returns the installation. */
export async function seedKubernetes(api: KubeApiserver): Promise<KubernetesObject> {
  const admin = kubeConfig(api);
  const objects = KubernetesObjectApi.makeApiClient(admin);
  const core = admin.makeApiClient(CoreV1Api);
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  const custom = admin.makeApiClient(CustomObjectsApi);

  await applyManifests(api, CRD_FILES);
  await objects.create(CERTIFICATE_CRD as KubernetesObject);
  await waitFor(async () => {
    try {
      await custom.listNamespacedCustomObject({ group: "cert-manager.io", version: "v1", namespace: "default", plural: "certificates" });
      return true;
    } catch {
      return false;
    }
  });

  for (const ns of ["fundament-system", "team-a", "team-b", "team-c", "plugin-cert-manager"]) {
    await core.createNamespace({ body: { metadata: { name: ns } } });
  }
  // Per-user identities (FUN-17 §4: "their per-user SA, driven by project membership").
  for (const id of Object.values(users)) {
    await core.createNamespacedServiceAccount({ namespace: "fundament-system", body: { metadata: { name: `fundament-${id}` } } });
  }
  const userSubject = (id: string) => [{ kind: "ServiceAccount", name: `fundament-${id}`, namespace: "fundament-system" }];
  await rbac.createClusterRole({
    body: {
      metadata: { name: "project-cert-editor" },
      rules: [
        { apiGroups: ["cert-manager.io"], resources: ["certificates"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
        { apiGroups: [""], resources: ["secrets", "pods", "pods/log"], verbs: ["get", "list"] },
      ],
    },
  });
  await rbac.createClusterRole({
    body: { metadata: { name: "project-cert-viewer" }, rules: [{ apiGroups: ["cert-manager.io"], resources: ["certificates"], verbs: ["get", "list", "watch"] }] },
  });
  await rbac.createClusterRole({
    body: {
      metadata: { name: "project-admin" },
      rules: [{ apiGroups: [""], resources: ["secrets", "configmaps", "pods", "pods/log"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] }],
    },
  });
  const bindIn = (ns: string, name: string, role: string, id: string) =>
    rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: { metadata: { name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role }, subjects: userSubject(id) },
    });
  await bindIn("team-a", "alice-cert-editor", "project-cert-editor", users.alice);
  await bindIn("team-b", "alice-cert-viewer", "project-cert-viewer", users.alice);
  await bindIn("team-a", "carol-admin", "project-admin", users.carol);
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: "bob-cert-viewer" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "project-cert-viewer" },
      subjects: userSubject(users.bob),
    },
  });

  // The plugin half: the installation's ServiceAccount, bound to a ClusterRole materialised from the pinned definition.
  await core.createNamespacedServiceAccount({ namespace: "plugin-cert-manager", body: { metadata: { name: "plugin-cert-manager" } } });
  const definition = certManagerDefinition(CERT_MANAGER_RBAC);
  await rbac.createClusterRole({ body: { metadata: { name: "plugin-cert-manager" }, rules: CERT_MANAGER_RBAC } });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: "plugin-cert-manager" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "plugin-cert-manager" },
      subjects: [{ kind: "ServiceAccount", name: "plugin-cert-manager", namespace: "plugin-cert-manager" }],
    },
  });
  const installation = (await custom.createClusterCustomObject({
    group: "plugins.fundament.io",
    version: "v1",
    plural: "plugininstallations",
    body: {
      apiVersion: "plugins.fundament.io/v1",
      kind: "PluginInstallation",
      metadata: { name: "cert-manager" },
      spec: { organizationId: "org-acme", definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: definition.hash } },
    },
  })) as KubernetesObject;

  // Objects to read.
  for (const ns of ["team-a", "team-b", "team-c"]) {
    await custom.createNamespacedCustomObject({
      group: "cert-manager.io",
      version: "v1",
      namespace: ns,
      plural: "certificates",
      body: { apiVersion: "cert-manager.io/v1", kind: "Certificate", metadata: { name: "web" }, spec: { secretName: "web-tls" } },
    });
    for (const secret of ["cert-manager-webhook-ca", "db-password"]) {
      await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: secret }, stringData: { v: "x" } } });
    }
  }
  return installation;
}

/** The OpenFGA half: organization acme owns the cluster; alice, bob and carol are its members. */
export async function seedOpenFga(fga: OpenFGA): Promise<OpenFgaClient> {
  const fgaClient = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.modelId });
  await fgaClient.write({
    writes: [
      { user: "organization:acme", relation: "owner", object: `cluster:${ids.cluster}` },
      { user: `user:${users.alice}`, relation: "viewer", object: "organization:acme" },
      { user: `user:${users.bob}`, relation: "viewer", object: "organization:acme" },
      { user: `user:${users.carol}`, relation: "admin", object: "organization:acme" },
    ],
  });
  return fgaClient;
}

export async function waitFor(condition: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 100));
  }
}
