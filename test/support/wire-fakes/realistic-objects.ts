/**
 * What a real API server adds to a PluginInstallation that was `kubectl apply`-ed and is reconciled
 * by a controller, for FakeKubeApi's `extra`: creationTimestamp, generation, labels, a finalizer,
 * kubectl's last-applied-configuration annotation (the applied manifest again, as JSON), and the
 * managedFields of client-side apply, of the controller's finalizer and of its status writes. The
 * status holds only `phase`: the CRD (deploy/k8s/crds) prunes anything else. The wire fake's own
 * objects carry only what the gateway reads.
 */
import type { FakeInstallation } from "./kube-apiserver.ts";

const API_VERSION = "plugins.fundament.io/v1";
const FINALIZER = "plugins.fundament.io/cleanup";
const SET = {};

export function appliedAndReconciled(i: Pick<FakeInstallation, "name" | "definitionHash">, at = new Date("2026-11-02T09:14:27Z")): NonNullable<FakeInstallation["extra"]> {
  const time = at.toISOString().replace(/\.\d+Z$/, "Z");
  const labels = { "app.kubernetes.io/managed-by": "fundament", "plugins.fundament.io/plugin": i.name, "fundament.io/organization": "acme" };
  const spec = {
    organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03",
    definitionRef: { pluginName: i.name, pluginVersion: "1.4.0", definitionHash: i.definitionHash },
  };
  const lastApplied = { apiVersion: API_VERSION, kind: "PluginInstallation", metadata: { annotations: {}, labels, name: i.name }, spec };
  return {
    metadata: {
      creationTimestamp: time,
      generation: 1,
      labels,
      annotations: { "kubectl.kubernetes.io/last-applied-configuration": `${JSON.stringify(lastApplied)}\n` },
      finalizers: [FINALIZER],
      managedFields: [
        {
          manager: "kubectl-client-side-apply",
          operation: "Update",
          apiVersion: API_VERSION,
          time,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:metadata": {
              "f:annotations": { ".": SET, "f:kubectl.kubernetes.io/last-applied-configuration": SET },
              "f:labels": { ".": SET, ...Object.fromEntries(Object.keys(labels).map((k) => [`f:${k}`, SET])) },
            },
            "f:spec": { ".": SET, "f:definitionRef": { ".": SET, "f:definitionHash": SET, "f:pluginName": SET, "f:pluginVersion": SET }, "f:organizationId": SET },
          },
        },
        {
          manager: "plugin-controller",
          operation: "Update",
          apiVersion: API_VERSION,
          time,
          fieldsType: "FieldsV1",
          fieldsV1: { "f:metadata": { "f:finalizers": { ".": SET, [`v:"${FINALIZER}"`]: SET } } },
        },
        {
          manager: "plugin-controller",
          operation: "Update",
          apiVersion: API_VERSION,
          time,
          fieldsType: "FieldsV1",
          fieldsV1: { "f:status": { ".": SET, "f:phase": SET } },
          subresource: "status",
        },
      ],
    },
  };
}
