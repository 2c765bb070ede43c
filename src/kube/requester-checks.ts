/**
 * What kube-apiserver authorizes beyond the request's own verb, inside its handlers and admission
 * plugins, and always for the requester. On the PluginToken path the requester is the plugin's
 * ServiceAccount, so each of these would be decided for the plugin alone: the gateway asks the
 * user's review the same questions, and the request stays within user ∩ plugin (FUN-17 §4).
 * Where kube's question names something in the request body, which portcullis does not see (a
 * binding's roleRef, a CSR's signerName), it is asked for every name: stricter than kube, never
 * looser. Pure.
 *
 *  - A write that may create (k8s.io/apiserver handlers/patch.go and update.go): when the object
 *    does not exist, a server-side apply patch, or a PUT on a resource whose storage allows
 *    create-on-update, creates it, authorizing "create" on the same attributes.
 *  - RBAC's escalation check (pkg/registry/rbac): writing a Role or ClusterRole needs the rules it
 *    grants or "escalate" on it; writing a binding, which may add a subject to the role it refers
 *    to, needs that role's rules or "bind" on it.
 *  - Signers (plugin/pkg/admission/certificates): approving a CSR needs "approve", issuing its
 *    certificate "sign", and a ClusterTrustBundle "attest", on certificates.k8s.io/signers.
 *  - An unsafe delete (handlers/delete.go): deleting with
 *    ignoreStoreReadErrorWithClusterBreakingPotential needs "unsafe-delete-ignore-read-errors"; read
 *    from the query here (the option in a DELETE body is out of sight: see docs/operations.md).
 */
import type { AccessAttributes } from "../authz/ports.ts";
import type { ResourceRequestInfo, RequestInfo } from "./request-info.ts";

type ResourceAttributes = Extract<AccessAttributes, { kind: "resource" }>;

/** Patch types whose handler answers NotFound for a missing object (jsonPatcher, smpPatcher). */
const NON_CREATING_PATCH_TYPES: ReadonlySet<string> = new Set([
  "application/json-patch+json",
  "application/merge-patch+json",
  "application/strategic-merge-patch+json",
]);

/** `group/resource` whose storage strategy allows create-on-update in kube-apiserver v1.37 (pkg/registry). */
const CREATE_ON_UPDATE: ReadonlySet<string> = new Set([
  "/services",
  "/endpoints",
  "/events",
  "/limitranges",
  "events.k8s.io/events",
  "coordination.k8s.io/leases",
  "coordination.k8s.io/leasecandidates",
  "node.k8s.io/runtimeclasses",
  "rbac.authorization.k8s.io/roles",
  "rbac.authorization.k8s.io/rolebindings",
  "rbac.authorization.k8s.io/clusterroles",
  "rbac.authorization.k8s.io/clusterrolebindings",
]);

const RBAC = "rbac.authorization.k8s.io";
const CERTIFICATES = "certificates.k8s.io";
const WRITES: ReadonlySet<string> = new Set(["create", "update", "patch"]);
export const UNSAFE_DELETE_OPTION = "ignoreStoreReadErrorWithClusterBreakingPotential";

/** The reviews kube-apiserver runs for the requester beyond `info.verb` (none for a request it refuses before). */
export function requesterChecks(info: RequestInfo, query: URLSearchParams, contentType: string | undefined): ResourceAttributes[] {
  if (!info.isResourceRequest || info.parseError !== undefined) return [];
  const checks: ResourceAttributes[] = [];
  if (mayCreate(info, contentType)) checks.push(attributes(info, { verb: "create" }));
  const groupResource = `${info.apiGroup}/${info.resource}`;
  if (WRITES.has(info.verb) && info.subresource === "") {
    if (groupResource === `${RBAC}/roles` || groupResource === `${RBAC}/clusterroles`) {
      checks.push(attributes(info, { verb: "escalate", version: "*" }));
    }
    if (groupResource === `${RBAC}/rolebindings`) {
      checks.push(roleBinding("roles", info.namespace), roleBinding("clusterroles", info.namespace));
    }
    if (groupResource === `${RBAC}/clusterrolebindings`) checks.push(roleBinding("clusterroles", ""));
    if (groupResource === `${CERTIFICATES}/clustertrustbundles`) checks.push(signers("attest"));
  }
  if (groupResource === `${CERTIFICATES}/certificatesigningrequests` && (info.verb === "update" || info.verb === "patch")) {
    if (info.subresource === "approval") checks.push(signers("approve"));
    if (info.subresource === "status") checks.push(signers("sign"));
  }
  if ((info.verb === "delete" || info.verb === "deletecollection") && query.has(UNSAFE_DELETE_OPTION)) {
    checks.push(attributes(info, { verb: "unsafe-delete-ignore-read-errors" }));
  }
  return checks;
}

/**
 * Whether the API server may create the object: a PATCH whose Content-Type (the first value, cut
 * at a ";" after its first character, compared exactly, as the handler reads it) is not one of
 * the patch types that never create; a PUT on a create-on-update resource. Any subresource too:
 * a status PUT goes through the resource's own strategy.
 */
function mayCreate(info: ResourceRequestInfo, contentType: string | undefined): boolean {
  if (info.name === "") return false;
  if (info.verb === "patch") {
    const value = contentType ?? "";
    const semicolon = value.indexOf(";");
    return !NON_CREATING_PATCH_TYPES.has(semicolon > 0 ? value.slice(0, semicolon) : value);
  }
  return info.verb === "update" && CREATE_ON_UPDATE.has(`${info.apiGroup}/${info.resource}`);
}

function attributes(info: ResourceRequestInfo, change: { verb: string; version?: string }): ResourceAttributes {
  return {
    kind: "resource",
    verb: change.verb,
    group: info.apiGroup,
    version: change.version ?? info.apiVersion,
    resource: info.resource,
    subresource: info.subresource,
    namespace: info.namespace,
    name: info.name,
  };
}

/** "bind" on every role of that kind: the binding's roleRef is in its body (and, on update, in the stored object). */
function roleBinding(resource: "roles" | "clusterroles", namespace: string): ResourceAttributes {
  return { kind: "resource", verb: "bind", group: RBAC, version: "", resource, subresource: "", namespace, name: "" };
}

/** The verb on every signer: the signerName is in the body. */
function signers(verb: "approve" | "sign" | "attest"): ResourceAttributes {
  return { kind: "resource", verb, group: CERTIFICATES, version: "*", resource: "signers", subresource: "", namespace: "", name: "" };
}
