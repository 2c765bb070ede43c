/**
 * Kubernetes RequestInfo: what kube-apiserver's authorization layer sees.
 *
 * A pure port of `RequestInfoFactory.NewRequestInfo` from
 * `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` (Kubernetes 1.35 line,
 * the tree that also carries the `AuthorizePodWebsocketUpgradeCreatePermission`
 * gate), configured as kube-apiserver configures it: APIPrefixes {api, apis},
 * GrouplessAPIPrefixes {api}. The rules, not the code, were carried over.
 *
 * Path shapes accepted (the path is split with kube's
 * `strings.Split(strings.Trim(path, "/"), "/")`, so leading/trailing slashes are
 * ignored and an inner `//` yields an empty segment):
 *
 * Resource paths (isResourceRequest: true)
 *   /api/{version}/{resource}
 *   /api/{version}/{resource}/{name}
 *   /api/{version}/{resource}/{name}/{subresource}[/{more}...]
 *   /api/{version}/namespaces                                   resource "namespaces"
 *   /api/{version}/namespaces/{namespace}                       resource "namespaces", name and namespace = {namespace}
 *   /api/{version}/namespaces/{namespace}/status|finalize[/...] subresource of the namespace itself
 *   /api/{version}/namespaces/{namespace}/{resource}
 *   /api/{version}/namespaces/{namespace}/{resource}/{name}[/{subresource}[/{more}...]]
 *   /apis/{group}/{version}/...                                 every form above, with an API group
 *
 * Legacy verb-in-path forms (the verb is taken from the path, not the method)
 *   /api/{version}/watch/{resource}[/{name}[/{subresource}]]
 *   /api/{version}/watch/namespaces/{namespace}/{resource}[/{name}[/{subresource}]]
 *   /api/{version}/proxy/{resource}/{name}[/{path}...]          never a subresource
 *   /api/{version}/proxy/namespaces/{namespace}/{resource}/{name}[/{path}...]
 *   /api/{version}/watch and /api/{version}/proxy with nothing after them: kube
 *   fails the request (HTTP 500) before authorization; here that is a resource
 *   RequestInfo carrying `parseError`, which the caller must refuse.
 *
 * Non-resource paths (isResourceRequest: false, verb = lower-cased HTTP method)
 *   /  /api  /api/{version}  /apis  /apis/{group}  /apis/{group}/{version}
 *   /healthz  /livez  /readyz  /version  /metrics  /openapi/v2  /openapi/v3/...
 *   and anything whose first segment is not `api` or `apis`.
 *
 * Input contract. kube parses `req.URL.Path`, which Go's net/http has already
 * percent-decoded. The caller passes the path exactly as the API server will
 * see it, after Envoy's normalisation (percent-decoding of unreserved
 * characters, slash merging, dot-segment removal) and after any gateway prefix
 * has been stripped. This module never decodes or normalises: a `%2F` that
 * survives to here is a literal three-character piece of its segment, `..` is
 * a segment called "..", and `//` yields an empty segment, exactly as kube
 * would treat the same decoded path. The query string is given already parsed
 * (URLSearchParams); differences between that parser and Go's
 * `url.ParseQuery` (Go drops pairs containing `;` or a bad escape) are the
 * caller's to reconcile.
 *
 * The parser is total: it never throws, for any strings, and is deterministic.
 * What it reads from a list's query is list-options.ts's (with field-selectors.ts and
 * label-selectors.ts), the name checks object-names.ts's, each mirroring its own Go package.
 */

import { decodeListOptions, fallbackWatch } from "./list-options.ts";
import { isValidPathSegmentName } from "./path-segment-names.ts";

export interface KubeHttpRequest {
  /** HTTP method, as sent (kube compares it case-sensitively: "get" is not GET). */
  method: string;
  /** The path as the API server sees it (already stripped of any gateway prefix), no query. */
  path: string;
  /** Parsed query string. */
  query: URLSearchParams;
}

export interface ResourceRequestInfo {
  isResourceRequest: true;
  /** Kube verb: get, list, watch, create, update, patch, delete, deletecollection, proxy, or "" for an unknown method. */
  verb: string;
  apiPrefix: string;
  apiGroup: string;
  apiVersion: string;
  namespace: string;
  resource: string;
  subresource: string;
  name: string;
  /** Path parts starting at {resource}: resource/name/subresource/anything-else. */
  parts: string[];
  path: string;
  /**
   * Set only when kube's NewRequestInfo returns an error (`/{prefix}/{version}/watch`
   * or `/proxy` with nothing after). kube answers such a request with HTTP 500
   * before any authorization happens; the other fields hold what kube had parsed
   * at that point. A caller MUST deny when this is set.
   */
  parseError?: string;
}

export interface NonResourceRequestInfo {
  isResourceRequest: false;
  /** The lower-cased HTTP method. */
  verb: string;
  path: string;
}

export type RequestInfo = ResourceRequestInfo | NonResourceRequestInfo;

// ---------------------------------------------------------------------------
// Fixed vocabularies (kube names in comments)
// ---------------------------------------------------------------------------

/** RequestInfoFactory.APIPrefixes as kube-apiserver configures it. */
export const API_PREFIXES: ReadonlySet<string> = new Set(["api", "apis"]);

/** RequestInfoFactory.GrouplessAPIPrefixes: prefixes with no {group} segment. */
export const GROUPLESS_API_PREFIXES: ReadonlySet<string> = new Set(["api"]);

/** specialVerbs: legacy verbs carried as the first segment after the version. */
export const SPECIAL_VERBS: ReadonlySet<string> = new Set(["proxy", "watch"]);

/** specialVerbsNoSubresources: path verbs after which part 3 is never a subresource. */
export const SPECIAL_VERBS_NO_SUBRESOURCES: ReadonlySet<string> = new Set(["proxy"]);

/** namespaceSubresources: what may follow namespaces/{ns} as a subresource of the namespace. */
export const NAMESPACE_SUBRESOURCES: ReadonlySet<string> = new Set(["status", "finalize"]);

/** The verb a resource request gets from its (case-sensitive) HTTP method. Any other method: "". */
export const VERB_FOR_METHOD: ReadonlyMap<string, string> = new Map([
  ["POST", "create"],
  ["GET", "get"],
  ["HEAD", "get"],
  ["PUT", "update"],
  ["PATCH", "patch"],
  ["DELETE", "delete"],
]);

/**
 * Pod subresources whose `connect` handler, from Kubernetes 1.35 (feature gate
 * AuthorizePodWebsocketUpgradeCreatePermission, beta, on by default), also
 * authorizes the verb "create" when the request's verb is not already "create".
 * Not included, as in kube: pods/proxy, services/proxy, nodes/proxy.
 */
export const POD_SUBRESOURCES_REQUIRING_CREATE: ReadonlySet<string> = new Set(["exec", "attach", "portforward"]);

// ---------------------------------------------------------------------------
// RequestInfo
// ---------------------------------------------------------------------------

/** kube's splitPath: trim every leading and trailing "/", then split on "/". */
function splitPath(path: string): string[] {
  let start = 0;
  let end = path.length;
  while (start < end && path.charCodeAt(start) === 0x2f) start++;
  while (end > start && path.charCodeAt(end - 1) === 0x2f) end--;
  if (start === end) return [];
  return path.slice(start, end).split("/");
}

/** Element i of a list whose length the caller has already checked. */
function at(list: readonly string[], i: number): string {
  return list[i] ?? "";
}

export function requestInfoFor(req: KubeHttpRequest): RequestInfo {
  const method = typeof req.method === "string" ? req.method : "";
  const path = typeof req.path === "string" ? req.path : "";
  const query = typeof req.query?.getAll === "function" ? req.query : new URLSearchParams();

  // Non-resource until proven otherwise.
  const lowerMethod = method.toLowerCase();
  const nonResource: NonResourceRequestInfo = { isResourceRequest: false, verb: lowerMethod, path };

  let current = splitPath(path);
  if (current.length < 3) return nonResource;

  const apiPrefix = at(current, 0);
  if (!API_PREFIXES.has(apiPrefix)) return nonResource;
  current = current.slice(1);

  let apiGroup = "";
  if (!GROUPLESS_API_PREFIXES.has(apiPrefix)) {
    // The prefix is consumed, so this asks for four parts in all.
    if (current.length < 3) return nonResource;
    apiGroup = at(current, 0);
    current = current.slice(1);
  }

  const apiVersion = at(current, 0);
  current = current.slice(1);
  // From here on current has at least one element.

  let verb: string;
  if (SPECIAL_VERBS.has(at(current, 0))) {
    if (current.length < 2) {
      return {
        isResourceRequest: true,
        verb: lowerMethod,
        apiPrefix,
        apiGroup,
        apiVersion,
        namespace: "",
        resource: "",
        subresource: "",
        name: "",
        parts: [],
        path,
        parseError: `unable to determine kind and namespace from url, ${path}`,
      };
    }
    verb = at(current, 0);
    current = current.slice(1);
  } else {
    verb = VERB_FOR_METHOD.get(method) ?? "";
  }

  // namespaces/{namespace}/{resource}/...: parts are re-based onto {resource},
  // unless what follows the namespace name is a namespace subresource.
  let namespace = "";
  if (at(current, 0) === "namespaces" && current.length > 1) {
    namespace = at(current, 1);
    if (current.length > 2 && !NAMESPACE_SUBRESOURCES.has(at(current, 2))) {
      current = current.slice(2);
    }
  }

  const parts = current;
  let subresource = "";
  let name = "";
  let resource = "";
  if (parts.length >= 3 && !SPECIAL_VERBS_NO_SUBRESOURCES.has(verb)) subresource = at(parts, 2);
  if (parts.length >= 2) name = at(parts, 1);
  if (parts.length >= 1) resource = at(parts, 0);

  // No name and a get: it is really a list or a watch, read from the ListOptions
  // in the query. (Never reached for the path verbs: their verb is not "get".)
  if (name === "" && verb === "get") {
    const options = decodeListOptions(query);
    if (options.ok) {
      verb = options.watch ? "watch" : "list";
      const exact = options.metadataName;
      if (exact !== undefined && isValidPathSegmentName(exact)) name = exact;
    } else {
      // kube logs the decode error, resets the options and keeps only `watch`,
      // judged with strings.ToLower instead of the codec's EqualFold.
      verb = fallbackWatch(query) ? "watch" : "list";
    }
  }

  // No name and a delete: deletecollection.
  if (name === "" && verb === "delete") verb = "deletecollection";

  return {
    isResourceRequest: true,
    verb,
    apiPrefix,
    apiGroup,
    apiVersion,
    namespace,
    resource,
    subresource,
    name,
    parts,
    path,
  };
}

// ---------------------------------------------------------------------------
// Authorization verbs
// ---------------------------------------------------------------------------

/**
 * The verbs that must all be authorized for a request.
 *
 * Normally `[info.verb]`. From Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission,
 * beta, on by default) the core pod registry's `connect` handlers for
 * pods/exec, pods/attach and pods/portforward also authorize "create" whenever
 * the request's verb is not already "create". Those handlers are only reached by
 * GET (verb "get": the WebSocket handshake) and POST (verb "create": SPDY), so a
 * "get" on one of them yields `["get", "create"]`.
 *
 * kube does not look at the upgrade headers for this: the extra check runs for
 * every GET that reaches the handler, and a GET that is not an upgrade is
 * refused right after it anyway, so neither does this. The scope matches kube's
 * (core group only; not pods/proxy, services/proxy or nodes/proxy).
 */
export function authorizationVerbsFor(info: RequestInfo): string[] {
  if (
    info.isResourceRequest &&
    info.parseError === undefined &&
    info.verb === "get" &&
    info.apiGroup === "" &&
    info.resource === "pods" &&
    POD_SUBRESOURCES_REQUIRING_CREATE.has(info.subresource)
  ) {
    return ["get", "create"];
  }
  return [info.verb];
}
