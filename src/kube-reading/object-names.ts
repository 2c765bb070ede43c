/**
 * The lengths Kubernetes allows for what a request names, checked before anything is sent on.
 * Pure. A RequestInfo holds whatever the URL said (a name can be ~60 KB); kube-apiserver can never
 * store an object under such a name, so a request that names one is refused as malformed rather
 * than reviewed, cached and forwarded.
 *
 * Limits (k8s.io/apimachinery/pkg/util/validation): a namespace is a DNS label (63); an object
 * name, at most a DNS subdomain (253), the longest any built-in or custom resource accepts in
 * practice; an API group is a DNS subdomain (253); a version, a resource and a subresource are
 * DNS labels (63: CRD plurals are validated as such, built-in ones are far shorter).
 */
import type { RequestInfo } from "./request-info.ts";

export const MAX_NAMESPACE_LENGTH = 63;
export const MAX_NAME_LENGTH = 253;
export const MAX_API_GROUP_LENGTH = 253;
export const MAX_LABEL_LENGTH = 63;

const LIMITS = [
  ["namespace", MAX_NAMESPACE_LENGTH],
  ["name", MAX_NAME_LENGTH],
  ["apiGroup", MAX_API_GROUP_LENGTH],
  ["apiVersion", MAX_LABEL_LENGTH],
  ["resource", MAX_LABEL_LENGTH],
  ["subresource", MAX_LABEL_LENGTH],
] as const;

/** Which field of a resource request is longer than Kubernetes allows, if any; non-resource requests pass. */
export function oversizedField(info: RequestInfo): string | undefined {
  if (!info.isResourceRequest) return undefined;
  for (const [field, max] of LIMITS) {
    if (info[field].length > max) return `${field} longer than ${max} characters`;
  }
  return undefined;
}
