/**
 * The gateway's remote dependencies against the real kube-apiserver and OpenFGA: concurrent cold
 * checks coalesce into one call per dependency, the PluginInstallation index follows the API
 * server, and the internal GetInstallationManifest RPC answers from it.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import * as grpc from "@grpc/grpc-js";
import { CoreV1Api, CustomObjectsApi, type KubernetesObject } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { OpenFgaCanView } from "../../src/fga/can-view.ts";
import type { DependencyCall } from "../../src/metrics/events.ts";
import { installationServiceConstructor } from "../../src/server/installation-service.ts";
import { startFundamentWorld, type FundamentWorld, users, waitFor } from "./fundament-world.ts";
import { ids, pluginToken } from "../support/tokens.ts";

let world: FundamentWorld;
let custom: CustomObjectsApi;
let manifests: grpc.Client & Record<string, grpc.MethodDefinition<unknown, unknown> | unknown>;

beforeAll(async () => {
  world = await startFundamentWorld({ allowTtlMs: 60_000, denyTtlMs: 60_000 });
  custom = world.admin.makeApiClient(CustomObjectsApi);
  const Service = installationServiceConstructor();
  manifests = new Service(`127.0.0.1:${world.portcullis.server.internalPort}`, grpc.credentials.createInsecure()) as typeof manifests;
}, 180_000);
afterAll(async () => {
  manifests?.close();
  await world?.stop();
});

function getManifest(clusterId: string, installationId: string): Promise<{ ok: true; value: Record<string, string> } | { ok: false; code: number }> {
  return new Promise((resolve) => {
    (manifests["GetInstallationManifest"] as (req: object, cb: (err: grpc.ServiceError | null, res: Record<string, string>) => void) => void).call(
      manifests,
      { cluster_id: clusterId, installation_id: installationId },
      (err, res) => resolve(err ? { ok: false, code: err.code } : { ok: true, value: res }),
    );
  });
}

describe("coalescing against the real dependencies", () => {
  it("100 concurrent identical cold checks cost 1 OpenFGA Check, 1 SubjectAccessReview and 1 TokenRequest", async () => {
    const counts: Record<string, number> = {};
    // The change feeds' own reads (ReadChanges, the RBAC and ServiceAccount watches) run beside the checks.
    const asked = new Set(["openfga", "kube-subjectaccessreview", "kube-tokenrequest"]);
    const onCall = (m: unknown) => {
      const { dependency } = m as DependencyCall;
      if (asked.has(dependency)) counts[dependency] = (counts[dependency] ?? 0) + 1;
    };
    // Once the feeds have synced: their first sync drops what was asked before it, and an answer in
    // flight across it is asked again by the next check (src/cache/cached-lookup.ts).
    const feeds = () => [...(world.ports.changeFeeds?.() ?? []), ...(world.ports.canView as OpenFgaCanView).feedStates()];
    await waitFor(async () => feeds().length > 0 && feeds().every((f) => f.synced));
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    subscribe("portcullis:dependency", onCall);
    try {
      const results = await Promise.all(
        Array.from({ length: 100 }, () =>
          world.portcullis.check({
            path: `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`,
            headers: { authorization: `Bearer ${token}` },
            policy: "kube-api-proxy",
          }),
        ),
      );
      expect(results.filter((r) => r.allowed)).toHaveLength(100);
    } finally {
      unsubscribe("portcullis:dependency", onCall);
    }
    expect(counts).toEqual({ openfga: 1, "kube-subjectaccessreview": 1, "kube-tokenrequest": 1 });
  });
});

describe("PluginInstallation index and GetInstallationManifest", () => {
  it("answers from the index with the installation's pin and status", async () => {
    const res = await getManifest(ids.cluster, world.installationUid);
    expect(res).toMatchObject({
      ok: true,
      value: { plugin_name: "cert-manager", plugin_version: "1.4.0", organization_id: "org-acme", installation_name: "cert-manager" },
    });
    if (res.ok) expect(res.value["definition_hash"]).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it.each([
    { name: "unknown installation", cluster: ids.cluster, installation: ids.otherInstallation, code: grpc.status.NOT_FOUND },
    { name: "unknown cluster", cluster: ids.otherCluster, installation: ids.installation, code: grpc.status.NOT_FOUND },
    { name: "malformed id", cluster: ids.cluster, installation: "cert-manager", code: grpc.status.INVALID_ARGUMENT },
  ])("$name → $code", async ({ cluster, installation, code }) => {
    expect(await getManifest(cluster, installation)).toEqual({ ok: false, code });
  });

  it("follows a new installation, then its deletion (deletionTimestamp → FAILED_PRECONDITION and denial, gone → NOT_FOUND)", async () => {
    const created = (await custom.createClusterCustomObject({
      group: "plugins.fundament.io",
      version: "v1",
      plural: "plugininstallations",
      body: {
        apiVersion: "plugins.fundament.io/v1",
        kind: "PluginInstallation",
        // The finalizer keeps the object around with a deletionTimestamp, as plugin-controller's does.
        metadata: { name: "external-dns", finalizers: ["plugins.fundament.io/teardown"] },
        spec: { organizationId: "org-acme", definitionRef: { pluginName: "external-dns", pluginVersion: "0.9.0", definitionHash: `sha256:${"cd".repeat(32)}` } },
      },
    })) as KubernetesObject;
    const uid = created.metadata!.uid!;
    await waitFor(async () => (await getManifest(ids.cluster, uid)).ok);
    expect(await getManifest(ids.cluster, uid)).toMatchObject({ ok: true, value: { plugin_name: "external-dns", installation_name: "external-dns" } });

    await custom.deleteClusterCustomObject({ group: "plugins.fundament.io", version: "v1", plural: "plugininstallations", name: "external-dns" });
    await waitFor(async () => {
      const res = await getManifest(ids.cluster, uid);
      return !res.ok && res.code === grpc.status.FAILED_PRECONDITION;
    });
    const token = await pluginToken({ sub: users.alice, installation_id: uid, installation_name: "external-dns", plugin_name: "external-dns" });
    expect(
      await world.portcullis.check({ path: `/clusters/${ids.cluster}/version`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" }),
    ).toMatchObject({ allowed: false, reason: "installation-unavailable" });

    await custom.patchClusterCustomObject({
      group: "plugins.fundament.io",
      version: "v1",
      plural: "plugininstallations",
      name: "external-dns",
      body: [{ op: "remove", path: "/metadata/finalizers" }],
    });
    await waitFor(async () => {
      const res = await getManifest(ids.cluster, uid);
      return !res.ok && res.code === grpc.status.NOT_FOUND;
    });
  });

  it("after a reinstall under the same name, injects a token the API server accepts, never the deleted ServiceAccount's", async () => {
    const core = world.admin.makeApiClient(CoreV1Api);
    const sa = { namespace: "plugin-loki", name: "plugin-loki" };
    const install = async () => {
      const created = (await custom.createClusterCustomObject({
        group: "plugins.fundament.io",
        version: "v1",
        plural: "plugininstallations",
        body: {
          apiVersion: "plugins.fundament.io/v1",
          kind: "PluginInstallation",
          metadata: { name: "loki" },
          spec: { organizationId: "org-acme", definitionRef: { pluginName: "loki", pluginVersion: "3.0.0", definitionHash: `sha256:${"ef".repeat(32)}` } },
        },
      })) as KubernetesObject;
      await core.createNamespacedServiceAccount({ namespace: sa.namespace, body: { metadata: { name: sa.name } } });
      return created.metadata!.uid!;
    };
    const injected = async (uid: string) => {
      const token = await pluginToken({ sub: users.alice, installation_id: uid, installation_name: "loki", plugin_name: "loki", plugin_version: "3.0.0" });
      const res = await world.portcullis.check({ path: `/clusters/${ids.cluster}/version`, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
      return res.allowed ? res.set?.["authorization"] : undefined;
    };
    const apiServerAccepts = async (authorization: string) => (await world.replay("GET", "/version", { authorization })) === 200;

    await core.createNamespace({ body: { metadata: { name: sa.namespace } } });
    const first = await install();
    await waitFor(async () => (await injected(first)) !== undefined);
    const oldToken = (await injected(first))!;
    expect(await apiServerAccepts(oldToken)).toBe(true);

    // Uninstall: the installation and its ServiceAccount go (the namespace stays: no namespace controller here).
    await custom.deleteClusterCustomObject({ group: "plugins.fundament.io", version: "v1", plural: "plugininstallations", name: "loki" });
    await core.deleteNamespacedServiceAccount({ namespace: sa.namespace, name: sa.name });
    await waitFor(async () => (await getManifest(ids.cluster, first)).ok === false);
    // The API server caches a token's authentication for 10 s; then the deleted ServiceAccount's token is refused.
    await waitFor(async () => !(await apiServerAccepts(oldToken)));

    const second = await install();
    expect(second).not.toBe(first);
    await waitFor(async () => (await injected(second)) !== undefined);
    const newToken = (await injected(second))!;
    expect(newToken).not.toBe(oldToken);
    expect(await apiServerAccepts(newToken)).toBe(true);
  });

  it("reports readiness through gRPC health and the admin port", async () => {
    const res = await fetch(`http://127.0.0.1:${world.portcullis.server.adminPort}/readyz`);
    expect(res.status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${world.portcullis.server.adminPort}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`portcullis_index_synced\\{index="plugininstallations",cluster_id="${ids.cluster}"\\} 1`));
    expect(metrics).toMatch(/portcullis_decisions_total\{policy="kube-api-proxy",outcome="allowed"\} \d+/);
  });
});
