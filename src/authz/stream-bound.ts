/**
 * No stream outlives its token (issue 54; FUN-17 §8 names the weakness, §10 the lever). An allowed
 * long-running kube-api-proxy request is bounded where the data plane can end it:
 *  - a watch, on the API server's own clock: its `timeoutSeconds` set (Envoy's
 *    `query_parameters_to_set`) to what the client asked, the token's remaining lifetime and, for a
 *    PluginToken, `streams.pluginWatchMaxSeconds`, whichever is least. The API server ends it cleanly;
 *    the client resumes from its last resourceVersion through a fresh check, so a revocation or a
 *    lost RoleBinding reaches it within the bound. It is reviewed as asked: only its duration changes.
 *  - exec, attach, port-forward, logs, proxy (nothing to resume from): Envoy ends the upstream stream
 *    at the token's expiry (`x-envoy-upstream-stream-duration-ms`, see src/authz/check-response.ts).
 * Pure: the clock is the caller's.
 */
import { type Deny, deny, type StreamBound } from "./decision.ts";
import { goQuery, type HttpRequest } from "../envoy/check-request.ts";
import { withQueryParametersSet } from "../envoy/query-parameters.ts";
import { askedWatchDuration, streamKindOf, watchTimeoutToSet } from "../kube-reading/long-running.ts";
import type { RequestInfo } from "../kube-reading/request-info.ts";

export interface StreamLimits {
  /** The token's `exp`, in seconds since the epoch. */
  readonly tokenExp: number;
  readonly nowMs: number;
  /** A PluginToken's watches end within this; undefined for a UserToken (its lifetime bounds them). */
  readonly watchMaxSeconds: number | undefined;
}

/** The bound for an allowed request; undefined when it opens no stream or what it asked ends in time; a denial when it cannot be bounded. */
export function streamBound(request: Pick<HttpRequest, "query" | "rawQuery">, info: RequestInfo, limits: StreamLimits): StreamBound | Deny | undefined {
  const kind = streamKindOf(info);
  if (kind === undefined) return undefined;
  const untilExpiry = endsByTokenExpiry(limits.tokenExp, limits.nowMs);
  if (kind === "stream" || untilExpiry.kind === "deny") return untilExpiry;
  const remaining = untilExpiry.seconds;
  const ceiling = limits.watchMaxSeconds === undefined ? remaining : Math.min(remaining, limits.watchMaxSeconds);
  const seconds = watchTimeoutToSet(askedWatchDuration(request.query), ceiling);
  if (seconds === undefined) return undefined;
  if (!rewrittenAsReviewed(request, String(seconds))) return deny("bad-request", "the watch's query cannot be bounded as sent");
  return { kind: "watch-timeout", seconds };
}

/**
 * A stream Envoy ends at the token's expiry (`x-envoy-upstream-stream-duration-ms`): its remaining
 * lifetime in whole seconds, rounded down so the bound never passes it. Accepted within the clock
 * tolerance, or a second from expiry, a token opens no stream: 401, the client mints a fresh one.
 */
export function endsByTokenExpiry(tokenExp: number, nowMs: number): StreamBound | Deny {
  const remaining = Math.floor((tokenExp * 1000 - nowMs) / 1000);
  if (remaining < 1) return deny("invalid-token", "the token expires before a stream could start");
  return { kind: "stream-duration", seconds: remaining };
}

/**
 * Envoy's rewrite of the query, read as the API server reads it, is the query reviewed with only
 * timeoutSeconds changed, to `timeoutSeconds` alone. It is not when a key is spelled two ways
 * (`timeoutSeconds` and `timeout%53econds`, `watch` and `w%61tch`): Envoy groups and sorts the
 * spellings apart, and Go then reads another first value. The key "" is left out: Envoy writes an
 * empty piece (`&&`) back as `=`, which Go reads as that key, and no API server reads it.
 */
function rewrittenAsReviewed(request: Pick<HttpRequest, "query" | "rawQuery">, timeoutSeconds: string): boolean {
  const target = withQueryParametersSet(`?${request.rawQuery}`, { timeoutSeconds });
  const { query: rewritten, error } = goQuery(target.slice(1));
  if (error !== undefined) return false;
  if (!sameValues(rewritten.getAll("timeoutSeconds"), [timeoutSeconds])) return false;
  for (const key of new Set([...request.query.keys(), ...rewritten.keys()])) {
    if (key === "" || key === "timeoutSeconds") continue;
    if (!sameValues(request.query.getAll(key), rewritten.getAll(key))) return false;
  }
  return true;
}

function sameValues(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
