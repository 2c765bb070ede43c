/**
 * The kube-api-proxy URL: `/clusters/{cluster_id}/{api|apis|version|openapi}/…`. Pure.
 * The part after the cluster is what the target API server sees; it is percent-decoded here
 * exactly as Go's net/http decodes URL.Path before kube-apiserver builds its RequestInfo.
 */
import { isUuid } from "../tokens/claim-formats.ts";

export type GatewayTarget =
  | { readonly kind: "ok"; readonly clusterId: string; readonly rest: string }
  | { readonly kind: "malformed"; readonly detail: string };

const PREFIX = "/clusters/";

export function parseGatewayPath(path: string): GatewayTarget {
  if (!path.startsWith(PREFIX)) return { kind: "malformed", detail: "path does not start with /clusters/" };
  const afterPrefix = path.slice(PREFIX.length);
  const slash = afterPrefix.indexOf("/");
  const clusterId = slash === -1 ? afterPrefix : afterPrefix.slice(0, slash);
  if (!isUuid(clusterId)) return { kind: "malformed", detail: "cluster id is not a lower-case UUID" };
  return { kind: "ok", clusterId, rest: slash === -1 ? "/" : afterPrefix.slice(slash) };
}

export type KubePath =
  | { readonly kind: "ok"; readonly path: string }
  | { readonly kind: "not-found" }
  | { readonly kind: "malformed"; readonly detail: string };

/** The roots an API server serves that the gateway forwards (DESIGN.md: kube-api-proxy paths). */
export const FORWARDED_ROOTS: ReadonlySet<string> = new Set(["api", "apis", "version", "openapi"]);

/**
 * Decodes and checks the API-server path. Envoy's normalize_path and merge_slashes should already
 * have removed dot segments and empty segments; one that still arrives is refused rather than guessed at.
 */
export function kubePathOf(rest: string): KubePath {
  let decoded = rest;
  // Without a `%` there is nothing to decode (decodeURIComponent would return the same text).
  if (rest.includes("%")) {
    try {
      decoded = decodeURIComponent(rest);
    } catch {
      return { kind: "malformed", detail: "invalid percent-encoding" };
    }
  }
  if (/[\x00-\x1f\x7f]/.test(decoded)) return { kind: "malformed", detail: "control character in path" };
  const trimmed = decoded.endsWith("/") ? decoded.slice(0, -1) : decoded;
  // parts[0] is what precedes the first "/" (nothing, for a path): the segments follow it.
  const parts = trimmed === "" ? [] : trimmed.split("/");
  let dotSegment = false;
  let emptySegment = false;
  for (let i = 1; i < parts.length; i++) {
    if (parts[i] === "." || parts[i] === "..") dotSegment = true;
    else if (parts[i] === "") emptySegment = true;
  }
  if (dotSegment) return { kind: "malformed", detail: "dot segment in path" };
  if (emptySegment) return { kind: "malformed", detail: "empty segment in path" };
  if (!FORWARDED_ROOTS.has(parts[1] ?? "")) return { kind: "not-found" };
  return { kind: "ok", path: decoded };
}
