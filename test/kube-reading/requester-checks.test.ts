/**
 * requesterChecks: what kube-apiserver authorizes for the requester inside its handlers and
 * admission, which the gateway must ask of the user too (on the PluginToken path the requester is
 * the plugin's ServiceAccount). One row per request; `checks` is `verb group/resource[/sub] ns/name`.
 * test/e2e/requester-checks.test.ts shows the real API server doing each of the first two kinds.
 */
import { describe, expect, it } from "vitest";
import { requestInfoFor } from "../../src/kube-reading/request-info.ts";
import { requesterChecks } from "../../src/kube-reading/requester-checks.ts";

const NS = "/api/v1/namespaces/team-a";
const RBAC = "/apis/rbac.authorization.k8s.io/v1";
const CSR = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const PCR = "/apis/certificates.k8s.io/v1/namespaces/team-a/podcertificaterequests";
const ADMISSION = "/apis/admissionregistration.k8s.io/v1";
const CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims";

interface Row {
  readonly method: string;
  readonly path: string;
  readonly query?: string;
  readonly contentType?: string;
  readonly checks: string[];
}

const rows: Array<[string, Row]> = [
  // A write that may create the object: the handler authorizes "create" on the same attributes.
  ["server-side apply", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/apply-patch+yaml", checks: ["create /configmaps team-a/web"] }],
  ["apply with a charset", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/apply-patch+yaml; charset=utf-8", checks: ["create /configmaps team-a/web"] }],
  ["apply as CBOR", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/apply-patch+cbor", checks: ["create /configmaps team-a/web"] }],
  ["apply on a custom resource", { method: "PATCH", path: "/apis/cert-manager.io/v1/namespaces/team-a/certificates/c", contentType: "application/apply-patch+yaml", checks: ["create cert-manager.io/certificates team-a/c"] }],
  ["apply on services/status, whose strategy creates on update", { method: "PATCH", path: `${NS}/services/web/status`, contentType: "application/apply-patch+yaml", checks: ["create /services/status team-a/web"] }],
  ["PUT on services/status, whose strategy creates on update", { method: "PUT", path: `${NS}/services/web/status`, checks: ["create /services/status team-a/web"] }],
  ["PUT on services/proxy, a connect, never creates", { method: "PUT", path: `${NS}/services/web/proxy`, checks: [] }],
  ["apply on a status its storage never creates (forceAllowCreate forced off)", { method: "PATCH", path: "/apis/apps/v1/namespaces/team-a/deployments/d/status", contentType: "application/apply-patch+yaml", checks: [] }],
  ["apply on a scale subresource", { method: "PATCH", path: "/apis/apps/v1/namespaces/team-a/deployments/d/scale", contentType: "application/apply-patch+yaml", checks: [] }],
  ["apply on a custom resource's status", { method: "PATCH", path: "/apis/cert-manager.io/v1/namespaces/team-a/certificates/c/status", contentType: "application/apply-patch+yaml", checks: [] }],
  ["two Content-Type values merged: kube reads the first, this reads neither as a non-creating patch", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/merge-patch+json, application/apply-patch+yaml", checks: ["create /configmaps team-a/web"] }],
  ["a patch type in another case is not one kube knows as non-creating", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "Application/Merge-Patch+JSON", checks: ["create /configmaps team-a/web"] }],
  ["a patch without Content-Type", { method: "PATCH", path: `${NS}/configmaps/web`, checks: ["create /configmaps team-a/web"] }],
  ["merge patch", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/merge-patch+json", checks: [] }],
  ["strategic merge patch", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/strategic-merge-patch+json", checks: [] }],
  ["JSON patch with a charset", { method: "PATCH", path: `${NS}/configmaps/web`, contentType: "application/json-patch+json; charset=utf-8", checks: [] }],
  ["PUT on a create-on-update resource", { method: "PUT", path: `${NS}/services/web`, checks: ["create /services team-a/web"] }],
  ["PUT on a Lease", { method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/l", checks: ["create coordination.k8s.io/leases team-a/l"] }],
  ["PUT on a ConfigMap, which never creates", { method: "PUT", path: `${NS}/configmaps/web`, checks: [] }],
  ["PUT on a custom resource, which never creates", { method: "PUT", path: "/apis/cert-manager.io/v1/namespaces/team-a/certificates/c", checks: [] }],
  ["POST is a create already", { method: "POST", path: `${NS}/configmaps`, checks: [] }],
  ["GET, DELETE", { method: "GET", path: `${NS}/configmaps/web`, checks: [] }],

  // RBAC's escalation check.
  ["create a Role", { method: "POST", path: `${RBAC}/namespaces/team-a/roles`, checks: ["escalate rbac.authorization.k8s.io/roles team-a/"] }],
  ["patch a ClusterRole", { method: "PATCH", path: `${RBAC}/clusterroles/view`, contentType: "application/merge-patch+json", checks: ["escalate rbac.authorization.k8s.io/clusterroles /view"] }],
  ["create a RoleBinding", { method: "POST", path: `${RBAC}/namespaces/team-a/rolebindings`, checks: ["bind rbac.authorization.k8s.io/roles team-a/", "bind rbac.authorization.k8s.io/clusterroles team-a/"] }],
  ["PUT a RoleBinding: create-on-update and bind", { method: "PUT", path: `${RBAC}/namespaces/team-a/rolebindings/b`, checks: ["create rbac.authorization.k8s.io/rolebindings team-a/b", "bind rbac.authorization.k8s.io/roles team-a/", "bind rbac.authorization.k8s.io/clusterroles team-a/"] }],
  ["patch a ClusterRoleBinding", { method: "PATCH", path: `${RBAC}/clusterrolebindings/b`, contentType: "application/json-patch+json", checks: ["bind rbac.authorization.k8s.io/clusterroles /"] }],
  ["read or delete RBAC", { method: "DELETE", path: `${RBAC}/namespaces/team-a/rolebindings/b`, checks: [] }],
  ["list Roles", { method: "GET", path: `${RBAC}/namespaces/team-a/roles`, checks: [] }],

  // Signers.
  ["approve a CSR", { method: "PUT", path: `${CSR}/csr-1/approval`, checks: ["approve certificates.k8s.io/signers /"] }],
  ["issue a CSR's certificate", { method: "PATCH", path: `${CSR}/csr-1/status`, contentType: "application/merge-patch+json", checks: ["sign certificates.k8s.io/signers /"] }],
  ["create a CSR", { method: "POST", path: CSR, checks: [] }],
  ["create a ClusterTrustBundle", { method: "POST", path: "/apis/certificates.k8s.io/v1beta1/clustertrustbundles", checks: ["attest certificates.k8s.io/signers /"] }],
  ["issue a PodCertificateRequest's certificate", { method: "PUT", path: `${PCR}/p/status`, checks: ["sign certificates.k8s.io/signers /"] }],
  ["create a PodCertificateRequest", { method: "POST", path: PCR, checks: [] }],

  // Admission policies' parameters.
  ["create a ValidatingAdmissionPolicy", { method: "POST", path: `${ADMISSION}/validatingadmissionpolicies`, checks: ["get */* /"] }],
  ["apply a MutatingAdmissionPolicy", { method: "PATCH", path: `${ADMISSION}/mutatingadmissionpolicies/p`, contentType: "application/apply-patch+yaml", checks: ["create admissionregistration.k8s.io/mutatingadmissionpolicies /p", "get */* /"] }],
  ["apply on a ValidatingAdmissionPolicy's status, which may create it", { method: "PATCH", path: `${ADMISSION}/validatingadmissionpolicies/p/status`, contentType: "application/apply-patch+yaml", checks: ["create admissionregistration.k8s.io/validatingadmissionpolicies/status /p", "get */* /"] }],
  ["merge-patch a ValidatingAdmissionPolicy's status", { method: "PATCH", path: `${ADMISSION}/validatingadmissionpolicies/p/status`, contentType: "application/merge-patch+json", checks: [] }],
  ["update a ValidatingAdmissionPolicyBinding", { method: "PUT", path: `${ADMISSION}/validatingadmissionpolicybindings/b`, checks: ["get */* /", "list */* /"] }],
  ["create a MutatingAdmissionPolicyBinding", { method: "POST", path: `${ADMISSION}/mutatingadmissionpolicybindings`, checks: ["get */* /", "list */* /"] }],
  ["delete a ValidatingAdmissionPolicy", { method: "DELETE", path: `${ADMISSION}/validatingadmissionpolicies/p`, checks: [] }],

  // A ResourceClaim's status.
  ["patch a ResourceClaim's status", { method: "PATCH", path: `${CLAIMS}/c/status`, contentType: "application/merge-patch+json", checks: ["patch resource.k8s.io/resourceclaims/binding /", "arbitrary-node:patch resource.k8s.io/resourceclaims/driver team-a/"] }],
  ["update a ResourceClaim's status", { method: "PUT", path: `${CLAIMS}/c/status`, checks: ["update resource.k8s.io/resourceclaims/binding /", "arbitrary-node:update resource.k8s.io/resourceclaims/driver team-a/"] }],
  ["update a ResourceClaim", { method: "PUT", path: `${CLAIMS}/c`, checks: [] }],

  // Unsafe delete.
  ["delete ignoring read errors", { method: "DELETE", path: `${NS}/configmaps/web`, query: "ignoreStoreReadErrorWithClusterBreakingPotential=true", checks: ["unsafe-delete-ignore-read-errors /configmaps team-a/web"] }],
  ["deletecollection with the option at any value", { method: "DELETE", path: `${NS}/configmaps`, query: "ignoreStoreReadErrorWithClusterBreakingPotential=", checks: ["unsafe-delete-ignore-read-errors /configmaps team-a/"] }],

  // Nothing for requests kube refuses or that name no resource.
  ["a non-resource path", { method: "POST", path: "/version", checks: [] }],
  ["a request kube refuses before authorization", { method: "PATCH", path: "/api/v1/watch", contentType: "application/apply-patch+yaml", checks: [] }],
];

describe("requesterChecks", () => {
  it.each(rows)("%s", (_name, row) => {
    const query = new URLSearchParams(row.query ?? "");
    const info = requestInfoFor({ method: row.method, path: row.path, query });
    const checks = requesterChecks(info, query, row.contentType).map(
      (a) => `${a.verb} ${a.group}/${a.resource}${a.subresource === "" ? "" : `/${a.subresource}`} ${a.namespace}/${a.name}`,
    );
    expect(checks).toEqual(row.checks);
  });
});

describe("requesterChecks: the version kube asks with", () => {
  // escalation_check.go and certauthorization.go ask on APIVersion "*", the handlers on the request's.
  it.each([
    ["bind", "POST", `${RBAC}/namespaces/team-a/rolebindings`, undefined, ["*", "*"]],
    ["escalate", "PATCH", `${RBAC}/clusterroles/view`, "application/merge-patch+json", ["*"]],
    ["signers", "PUT", `${CSR}/csr-1/approval`, undefined, ["*"]],
    ["admission policy parameters", "POST", `${ADMISSION}/validatingadmissionpolicybindings`, undefined, ["*", "*"]],
    ["create on apply", "PATCH", `${NS}/configmaps/web`, "application/apply-patch+yaml", ["v1"]],
    ["ResourceClaim status", "PUT", `${CLAIMS}/c/status`, undefined, ["v1", "v1"]],
  ])("%s", (_name, method, path, contentType, versions) => {
    const query = new URLSearchParams();
    const info = requestInfoFor({ method, path, query });
    expect(requesterChecks(info, query, contentType).map((a) => a.version)).toEqual(versions);
  });
});
