// Smoke test of the dependency harness: the real servers start, and the
// behaviours the authorizer's integration tests build on actually work.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  RbacAuthorizationV1Api,
} from "@kubernetes/client-node";
import { OpenFgaClient } from "@openfga/sdk";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  applyManifests,
  kubeConfig,
  startKubeApiserver,
  startOpenFGA,
  type KubeApiserver,
  type OpenFGA,
} from "./index.ts";

describe("kube-apiserver", () => {
  let api: KubeApiserver;
  beforeAll(async () => {
    api = await startKubeApiserver();
  });
  afterAll(async () => {
    await api?.stop();
  });

  it("serves the admin through the written kubeconfig", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(api.kubeconfigPath);
    const namespaces = await kc.makeApiClient(CoreV1Api).listNamespace();
    expect(namespaces.items.map((ns) => ns.metadata?.name)).toContain("default");
  });

  it("issues ServiceAccount tokens via TokenRequest, authorized by RBAC", async () => {
    const admin = kubeConfig(api);
    const core = admin.makeApiClient(CoreV1Api);
    const [namespace, name] = ["harness", "reader"];
    const username = `system:serviceaccount:${namespace}:${name}`;
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });

    const tokenRequest = await core.createNamespacedServiceAccountToken({
      name,
      namespace,
      body: { spec: { audiences: [api.url], expirationSeconds: 600 } },
    });
    const token = tokenRequest.status?.token ?? "";
    expect(token).not.toBe("");

    const review = await kubeConfig(api, token).makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    expect(review.status?.userInfo?.username).toBe(username);

    const authz = admin.makeApiClient(AuthorizationV1Api);
    const canListPods = async (): Promise<boolean> => {
      const sar = await authz.createSubjectAccessReview({
        body: { spec: { user: username, resourceAttributes: { namespace, verb: "list", resource: "pods" } } },
      });
      return sar.status?.allowed === true;
    };
    expect(await canListPods()).toBe(false);

    // A Role of its own: the built-in view/edit/admin ClusterRoles are
    // aggregated, and stay empty without kube-controller-manager.
    const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace,
      body: { metadata: { name: "pod-reader" }, rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["list"] }] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: "reader-pods" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
        subjects: [{ kind: "ServiceAccount", name, namespace }],
      },
    });
    // The RBAC authorizer reads bindings from an informer cache.
    await vi.waitFor(async () => expect(await canListPods()).toBe(true), { timeout: 10_000, interval: 100 });
  });

  it("applies a CRD and a resource of its kind from one multi-document file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "portcullis-manifests-"));
    try {
      const file = join(dir, "widgets.yaml");
      writeFileSync(file, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.harness.example.com
spec:
  group: harness.example.com
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: { type: object, properties: { size: { type: integer } } }
---
apiVersion: harness.example.com/v1
kind: Widget
metadata: { name: w1, namespace: default }
spec: { size: 3 }
`);
      await applyManifests(api, [file]);
      // Applying again replaces instead of failing on AlreadyExists.
      await applyManifests(api, [file]);

      const objects = KubernetesObjectApi.makeApiClient(kubeConfig(api));
      const widget = await objects.read<{ apiVersion: string; kind: string; spec?: { size?: number } }>({
        apiVersion: "harness.example.com/v1",
        kind: "Widget",
        metadata: { name: "w1", namespace: "default" },
      });
      expect(widget.spec?.size).toBe(3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("OpenFGA", () => {
  let fga: OpenFGA;
  beforeAll(async () => {
    fga = await startOpenFGA({ modelFile: join(import.meta.dirname, "../../deploy/openfga/model.fga") });
  });
  afterAll(async () => {
    await fga?.stop();
  });

  it("derives cluster can_view from organization viewer via owner", async () => {
    const client = new OpenFgaClient({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.modelId });
    await client.write({
      writes: [
        { user: "user:u", relation: "viewer", object: "organization:o" },
        { user: "organization:o", relation: "owner", object: "cluster:c" },
      ],
    });
    expect((await client.check({ user: "user:u", relation: "can_view", object: "cluster:c" })).allowed).toBe(true);
    expect((await client.check({ user: "user:other", relation: "can_view", object: "cluster:c" })).allowed).toBe(false);
  });
});
