/**
 * What kube-apiserver authorizes beyond the request's own verb, inside its handlers, registries and
 * admission plugins, and always for the requester. On the PluginToken path the requester is the
 * plugin's ServiceAccount, so each of these would be decided for the plugin alone: the gateway asks
 * the user's review the same questions, and the request stays within user ∩ plugin (FUN-17 §4).
 * Where kube's question names something in the request body, which portcullis does not see (a
 * binding's roleRef, a CSR's signerName, a policy's paramKind), it is asked for every name: stricter
 * than kube, never looser. Pure.
 *
 *  - A write that may create (k8s.io/apiserver handlers/patch.go and update.go): when the object
 *    does not exist, a server-side apply patch, or a PUT on a resource whose storage allows
 *    create-on-update, creates it, authorizing "create" on the same attributes. A subresource's
 *    storage decides for itself: its apply or PUT creates only for services/status (its strategy
 *    allows create-on-update) and validatingadmissionpolicies/status (it passes apply's
 *    forceAllowCreate on); every other status and scale storage, built-in or custom, forces it off.
 *  - RBAC's escalation check (pkg/registry/rbac): writing a Role or ClusterRole needs the rules it
 *    grants or "escalate" on it; writing a binding, which may add a subject to the role it refers
 *    to, needs that role's rules or "bind" on it.
 *  - Signers (plugin/pkg/admission/certificates, pkg/registry/certificates/podcertificaterequest):
 *    approving a CSR needs "approve", issuing its certificate or a PodCertificateRequest's "sign",
 *    and a ClusterTrustBundle "attest", on certificates.k8s.io/signers.
 *  - Admission policies' parameters (pkg/registry/admissionregistration, authz.go): writing a
 *    Validating- or MutatingAdmissionPolicy with a paramKind needs "get" on that kind, and its
 *    binding with a paramRef "get" or "list" on the referenced objects.
 *  - A ResourceClaim's status (pkg/registry/resource/utils.go, DRAResourceClaimGranularStatusAuthorization,
 *    on by default): changing its allocation needs the request's verb on resourceclaims/binding,
 *    changing a driver's device status "arbitrary-node:<verb>" on resourceclaims/driver.
 *  - An unsafe delete (handlers/delete.go): deleting with
 *    ignoreStoreReadErrorWithClusterBreakingPotential needs "unsafe-delete-ignore-read-errors"; read
 *    from the query here. The option in a DELETE body is out of sight, and the
 *    AllowUnsafeMalformedObjectDeletion gate that honours it is on by default from v1.37: see
 *    docs/operations.md.
 */
import type { AccessAttributes } from "../ports/policy-ports.ts";
import type { ResourceRequestInfo, RequestInfo } from "./request-info.ts";

type ResourceAttributes = Extract<AccessAttributes, { kind: "resource" }>;

/** Patch types whose handler answers NotFound for a missing object (jsonPatcher, smpPatcher). */
const NON_CREATING_PATCH_TYPES: ReadonlySet<string> = new Set([
  "application/json-patch+json",
  "application/merge-patch+json",
  "application/strategic-merge-patch+json",
]);

/**
 * `group/resource[/subresource]` whose storage strategy allows create-on-update in kube-apiserver
 * v1.37 (pkg/registry): a PUT or any patch that reaches a missing object creates it.
 */
const CREATE_ON_UPDATE: ReadonlySet<string> = new Set([
  "/services",
  "/services/status",
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

/** Subresources whose storage passes apply's forceAllowCreate on, as the resource's own does. */
const APPLY_CREATES: ReadonlySet<string> = new Set(["admissionregistration.k8s.io/validatingadmissionpolicies/status"]);

const RBAC = "rbac.authorization.k8s.io";
const CERTIFICATES = "certificates.k8s.io";
const ADMISSION = "admissionregistration.k8s.io";
const RESOURCE = "resource.k8s.io";
const WRITES: ReadonlySet<string> = new Set(["create", "update", "patch"]);
/** The verbs any check below concerns. */
const CHECKED_VERBS: ReadonlySet<string> = new Set([...WRITES, "delete", "deletecollection"]);
export const UNSAFE_DELETE_OPTION = "ignoreStoreReadErrorWithClusterBreakingPotential";

/** The reviews kube-apiserver runs for the requester beyond `info.verb` (none for a request it refuses before). */
export function requesterChecks(info: RequestInfo, query: URLSearchParams, contentType: string | undefined): ResourceAttributes[] {
  // Reads (nearly every request) are authorized at the filter only: answered before any string is built.
  if (!info.isResourceRequest || info.parseError !== undefined || !CHECKED_VERBS.has(info.verb)) return [];
  const checks: ResourceAttributes[] = [];
  const creates = mayCreate(info, contentType);
  if (creates) checks.push(attributes(info, { verb: "create" }));
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
    if (groupResource === `${ADMISSION}/validatingadmissionpolicybindings` || groupResource === `${ADMISSION}/mutatingadmissionpolicybindings`) {
      checks.push(policyParams("get"), policyParams("list"));
    }
  }
  // The policy's strategy validates a create (authorizeCreate), also one by apply on its status.
  if (WRITES.has(info.verb) && (info.subresource === "" || creates)) {
    if (groupResource === `${ADMISSION}/validatingadmissionpolicies` || groupResource === `${ADMISSION}/mutatingadmissionpolicies`) {
      checks.push(policyParams("get"));
    }
  }
  if (info.verb === "update" || info.verb === "patch") {
    if (groupResource === `${CERTIFICATES}/certificatesigningrequests`) {
      if (info.subresource === "approval") checks.push(signers("approve"));
      if (info.subresource === "status") checks.push(signers("sign"));
    }
    if (groupResource === `${CERTIFICATES}/podcertificaterequests` && info.subresource === "status") checks.push(signers("sign"));
    if (groupResource === `${RESOURCE}/resourceclaims` && info.subresource === "status") {
      checks.push(
        { ...attributes(info, { verb: info.verb }), subresource: "binding", namespace: "", name: "" },
        { ...attributes(info, { verb: `arbitrary-node:${info.verb}` }), subresource: "driver", name: "" },
      );
    }
  }
  if ((info.verb === "delete" || info.verb === "deletecollection") && query.has(UNSAFE_DELETE_OPTION)) {
    checks.push(attributes(info, { verb: "unsafe-delete-ignore-read-errors" }));
  }
  return checks;
}

/**
 * Whether the API server may create the object: a PATCH whose Content-Type (the first value, cut
 * at a ";" after its first character, compared exactly, as the handler reads it) is not one of
 * the patch types that never create, on a resource (an apply's forceAllowCreate) or on a
 * subresource whose storage creates; a PUT on a create-on-update resource or subresource.
 */
function mayCreate(info: ResourceRequestInfo, contentType: string | undefined): boolean {
  if (info.name === "") return false;
  const target = `${info.apiGroup}/${info.resource}${info.subresource === "" ? "" : `/${info.subresource}`}`;
  if (info.verb === "patch") {
    const value = contentType ?? "";
    const semicolon = value.indexOf(";");
    if (NON_CREATING_PATCH_TYPES.has(semicolon > 0 ? value.slice(0, semicolon) : value)) return false;
    return info.subresource === "" || CREATE_ON_UPDATE.has(target) || APPLY_CREATES.has(target);
  }
  return info.verb === "update" && CREATE_ON_UPDATE.has(target);
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
  return { kind: "resource", verb: "bind", group: RBAC, version: "*", resource, subresource: "", namespace, name: "" };
}

/** The verb on every signer: the signerName is in the body. */
function signers(verb: "approve" | "sign" | "attest"): ResourceAttributes {
  return { kind: "resource", verb, group: CERTIFICATES, version: "*", resource: "signers", subresource: "", namespace: "", name: "" };
}

/**
 * The verb on every object of every kind in every namespace: the paramKind (of the policy, or of
 * the policy a binding names) and the paramRef's name and namespace are in the body.
 */
function policyParams(verb: "get" | "list"): ResourceAttributes {
  return { kind: "resource", verb, group: "*", version: "*", resource: "*", subresource: "", namespace: "", name: "" };
}
