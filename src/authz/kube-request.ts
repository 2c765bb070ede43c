/**
 * The Kubernetes request behind a kube-api-proxy gateway path, read once, as kube-apiserver would
 * read it, into the one value every later step uses: which credentials count (a proxy subresource
 * relays pages), what the audit line says, and what the user's SubjectAccessReview asks
 * (reviewAttributes(), built only for the PluginToken requests that are reviewed). Pure.
 *
 *  - `not-found`: the path is not under a root an API server serves (gateway-path.ts).
 *  - `bad-request`: kube-apiserver would refuse it before any authorization — in the path itself
 *    (`inPath`: an invalid %-escape, a dot segment), or in the request read from it: a target Go
 *    would read otherwise (a query past net/url's parameter limit), a bad `?timeout=`, a path it
 *    answers itself (`/api/v1/watch` with nothing after it), a name longer than Kubernetes can
 *    store. No review or TokenRequest is sent for such a request (a name Kubernetes could never
 *    store would otherwise be reviewed and held in a cache key).
 *  - `ok`: the RequestInfo.
 */
import type { AccessAttributes } from "../ports/policy-ports.ts";
import type { HttpRequest } from "../envoy/check-request.ts";
import { kubePathOf } from "../kube-reading/gateway-path.ts";
import { oversizedField } from "../kube-reading/object-names.ts";
import { authorizationVerbsFor, requestInfoFor, type RequestInfo } from "../kube-reading/request-info.ts";
import { invalidRequestTimeout } from "../kube-reading/request-timeout.ts";
import { requesterChecks } from "../kube-reading/requester-checks.ts";

export type KubeRequest =
  | { readonly kind: "ok"; readonly info: RequestInfo }
  | { readonly kind: "not-found" }
  | {
      readonly kind: "bad-request";
      readonly detail: string;
      /** The path itself is malformed: nothing was read from it. */
      readonly inPath: boolean;
      /** What was asked as Node reads the request, for the audit line; undefined when `inPath`. */
      readonly asked: RequestInfo | undefined;
    };

/** `rest`: the gateway path after `/clusters/{cluster_id}` (gateway-path.ts parseGatewayPath). */
export function readKubeRequest(request: Pick<HttpRequest, "method" | "query" | "headers" | "targetError">, rest: string): KubeRequest {
  const path = kubePathOf(rest);
  if (path.kind === "not-found") return path;
  if (path.kind === "malformed") return { kind: "bad-request", detail: path.detail, inPath: true, asked: undefined };
  const info = requestInfoFor({ method: request.method, path: path.path, query: request.query });
  const refused =
    request.targetError ?? invalidRequestTimeout(request.query) ?? (info.isResourceRequest ? info.parseError : undefined) ?? oversizedField(info);
  if (refused !== undefined) return { kind: "bad-request", detail: refused, inPath: false, asked: info };
  return { kind: "ok", info };
}

/** What was asked, as Node reads it: the audit line's, and what decides whether the request relays pages. */
export function askedOf(kube: KubeRequest): RequestInfo | undefined {
  return kube.kind === "ok" ? kube.info : kube.kind === "bad-request" ? kube.asked : undefined;
}

/**
 * What the user's review asks: the request's own verbs (a WebSocket GET on pods/exec|attach|
 * portforward needs both get and create, Kubernetes ≥ 1.35), then what kube-apiserver authorizes
 * inside its handlers for the requester, here the plugin's ServiceAccount (requester-checks.ts).
 */
export function reviewAttributes(info: RequestInfo, request: Pick<HttpRequest, "query" | "headers">): AccessAttributes[] {
  const own = authorizationVerbsFor(info).map((verb): AccessAttributes =>
    info.isResourceRequest
      ? {
          kind: "resource",
          verb,
          group: info.apiGroup,
          version: info.apiVersion,
          resource: info.resource,
          subresource: info.subresource,
          namespace: info.namespace,
          name: info.name,
        }
      : { kind: "non-resource", verb, path: info.path },
  );
  return [...own, ...requesterChecks(info, request.query, request.headers["content-type"])];
}
