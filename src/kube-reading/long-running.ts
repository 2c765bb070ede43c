/**
 * Which requests kube-apiserver serves as long-running streams, and how long it keeps a watch open.
 * Pure, total.
 *
 * Long-running: kube-apiserver's BasicLongRunningRequestCheck as it configures it (verbs watch and
 * proxy; subresources attach, exec, proxy, log, portforward). A watch ends on the server's clock and
 * its client resumes from its last resourceVersion; the others carry bytes that cannot be replayed.
 *
 * A watch's duration is read as its handler reads it (k8s.io/apiserver/pkg/endpoints/handlers/get.go
 * ListResource): the ListOptions decoded from the query (list-options.ts; a query that does not decode
 * is answered 400, no watch opens), then `time.Duration(*opts.TimeoutSeconds) * time.Second`, an int64
 * product that wraps, then 0 becomes the server's default, minRequestTimeout × [1, 2): 30 to 60
 * minutes with kube-apiserver's default --min-request-timeout of 1800 s. A negative duration ends the
 * watch at once (its context is already past its deadline).
 */
import { decodeListOptions } from "./list-options.ts";
import type { RequestInfo } from "./request-info.ts";

const LONG_RUNNING_VERBS: ReadonlySet<string> = new Set(["watch", "proxy"]);
const LONG_RUNNING_SUBRESOURCES: ReadonlySet<string> = new Set(["attach", "exec", "proxy", "log", "portforward"]);

/** `watch`: ends on the server's clock, resumable; `stream`: exec, attach, port-forward, logs, proxy; undefined: not long-running. */
export type StreamKind = "watch" | "stream";

export function streamKindOf(info: RequestInfo): StreamKind | undefined {
  if (!info.isResourceRequest) return undefined;
  if (info.verb === "watch") return "watch";
  return LONG_RUNNING_VERBS.has(info.verb) || LONG_RUNNING_SUBRESOURCES.has(info.subresource) ? "stream" : undefined;
}

/** kube-apiserver's default --min-request-timeout: a watch asked without a timeout lasts 1× to 2× this. */
export const DEFAULT_MIN_REQUEST_TIMEOUT_SECONDS = 1800;

/** What a watch's query asks of its duration, as kube-apiserver reads it. */
export type AskedWatchDuration =
  /** The ListOptions do not decode: kube-apiserver answers 400 and opens no watch. */
  | { readonly kind: "refused" }
  /** No timeoutSeconds, 0, or a product that wraps to 0: the server's default. */
  | { readonly kind: "server-default" }
  /** A negative duration once wrapped: the watch ends as it opens. */
  | { readonly kind: "ends-at-once" }
  | { readonly kind: "nanoseconds"; readonly nanoseconds: bigint };

const NS_PER_SECOND = 1_000_000_000n;

export function askedWatchDuration(query: URLSearchParams): AskedWatchDuration {
  if (!decodeListOptions(query).ok) return { kind: "refused" };
  // Decoded: absent, or a base-10 int64 (strconv.ParseInt, so "+5" and "007" too), the first value.
  const value = query.get("timeoutSeconds");
  if (value === null) return { kind: "server-default" };
  const nanoseconds = BigInt.asIntN(64, BigInt(value) * NS_PER_SECOND);
  if (nanoseconds === 0n) return { kind: "server-default" };
  return nanoseconds < 0n ? { kind: "ends-at-once" } : { kind: "nanoseconds", nanoseconds };
}

/**
 * The timeoutSeconds to set so the watch ends within `ceilingSeconds` (≥ 1), or undefined when what
 * was asked already does (or no watch opens). Never longer than what was asked: a watch asked without
 * a timeout gets at most the server default's shortest, 1800 s, and is left alone when even the
 * default's longest ends within the ceiling.
 */
export function watchTimeoutToSet(asked: AskedWatchDuration, ceilingSeconds: number): number | undefined {
  switch (asked.kind) {
    case "refused":
    case "ends-at-once":
      return undefined;
    case "server-default":
      return ceilingSeconds < 2 * DEFAULT_MIN_REQUEST_TIMEOUT_SECONDS ? Math.min(ceilingSeconds, DEFAULT_MIN_REQUEST_TIMEOUT_SECONDS) : undefined;
    case "nanoseconds":
      return asked.nanoseconds > BigInt(ceilingSeconds) * NS_PER_SECOND ? ceilingSeconds : undefined;
  }
}
