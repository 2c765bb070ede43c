/**
 * The bound an allowed kube-api-proxy stream gets (src/authz/stream-bound.ts, src/kube-reading/long-running.ts):
 * one request per row, read as the check reads it (fromCheckRequest), bounded at a frozen clock.
 * The watch's query is what Envoy rewrites: a row that sets timeoutSeconds is also checked against
 * Envoy's rewrite (src/envoy/query-parameters.ts) read back as Go reads it.
 */
import { describe, expect, it } from "vitest";
import { streamBound } from "../../src/authz/stream-bound.ts";
import { fromCheckRequest } from "../../src/envoy/check-request.ts";
import { withQueryParametersSet } from "../../src/envoy/query-parameters.ts";
import { requestInfoFor } from "../../src/kube-reading/request-info.ts";

const NOW_MS = 1_800_000_000_000;
/** A PluginToken with 15 minutes left. */
const FRESH = NOW_MS / 1000 + 900;
const MAX = 60;

function bound(target: string, { exp = FRESH, user = false, nowMs = NOW_MS, method = "GET" }: { exp?: number | undefined; user?: boolean | undefined; nowMs?: number | undefined; method?: string | undefined } = {}) {
  const max = user ? undefined : MAX;
  const request = fromCheckRequest({ attributes: { request: { http: { method, path: target, headers: {} } } } });
  const info = requestInfoFor({ method, path: request.path, query: request.query });
  return streamBound(request, info, { tokenExp: exp, nowMs, watchMaxSeconds: max });
}

const PODS = "/api/v1/namespaces/team-a/pods";
const watch = (seconds: number) => ({ kind: "watch-timeout", seconds });
const refused = (reason: string) => expect.objectContaining({ kind: "deny", reason });

describe("watches: timeoutSeconds = min(asked, token's remaining lifetime, streams.pluginWatchMaxSeconds)", () => {
  const rows: Array<{ name: string; target: string; exp?: number; user?: true; nowMs?: number; expected: unknown }> = [
    // What the client asked
    { name: "none asked: the bound", target: `${PODS}?watch=true`, expected: watch(60) },
    { name: "watch=1", target: `${PODS}?watch=1&resourceVersion=10`, expected: watch(60) },
    { name: "the legacy /watch/ path", target: "/api/v1/watch/namespaces/team-a/pods", expected: watch(60) },
    { name: "one object by fieldSelector", target: `${PODS}?watch=true&fieldSelector=metadata.name%3Dweb`, expected: watch(60) },
    { name: "timeoutSeconds=0 is the server's default (30–60 min): the bound", target: `${PODS}?watch=1&timeoutSeconds=0`, expected: watch(60) },
    { name: "asked less: left as asked", target: `${PODS}?watch=1&timeoutSeconds=5`, expected: undefined },
    { name: "asked exactly the bound: left", target: `${PODS}?watch=1&timeoutSeconds=60`, expected: undefined },
    { name: "asked more: the bound", target: `${PODS}?watch=1&timeoutSeconds=3600`, expected: watch(60) },
    { name: "+30 (strconv.ParseInt): left", target: `${PODS}?watch=1&timeoutSeconds=%2B30`, expected: undefined },
    { name: "0061 is 61: the bound", target: `${PODS}?watch=1&timeoutSeconds=0061`, expected: watch(60) },
    // Go's int64 arithmetic: time.Duration(n) * time.Second wraps
    { name: "huge: wraps to a negative duration, the watch ends at once: left", target: `${PODS}?watch=1&timeoutSeconds=9223372036854775807`, expected: undefined },
    { name: "huge: wraps to a positive duration past the bound", target: `${PODS}?watch=1&timeoutSeconds=9223372036`, expected: watch(60) },
    { name: "2^55 wraps to exactly 0: the server's default, bounded", target: `${PODS}?watch=1&timeoutSeconds=36028797018963968`, expected: watch(60) },
    { name: "negative: the watch ends at once: left", target: `${PODS}?watch=1&timeoutSeconds=-5`, expected: undefined },
    // What kube-apiserver refuses itself (400 on decoding the ListOptions): nothing rewritten, so nothing repaired
    { name: "non-numeric", target: `${PODS}?watch=1&timeoutSeconds=abc`, expected: undefined },
    { name: "past int64", target: `${PODS}?watch=1&timeoutSeconds=9223372036854775808`, expected: undefined },
    { name: "a decimal", target: `${PODS}?watch=1&timeoutSeconds=1.5`, expected: undefined },
    { name: "empty", target: `${PODS}?watch=1&timeoutSeconds=`, expected: undefined },
    { name: "a bad labelSelector beside none asked", target: `${PODS}?watch=1&labelSelector=((`, expected: undefined },
    // Duplicates: Go reads the first value; Envoy's overwrite replaces them all
    { name: "duplicates, the first short: left (Go reads 5)", target: `${PODS}?watch=1&timeoutSeconds=5&timeoutSeconds=3600`, expected: undefined },
    { name: "duplicates, the first long: the bound replaces both", target: `${PODS}?watch=1&timeoutSeconds=3600&timeoutSeconds=5`, expected: watch(60) },
    { name: "a non-numeric duplicate after a number: kube decodes the first only", target: `${PODS}?watch=1&timeoutSeconds=3600&timeoutSeconds=x`, expected: watch(60) },
    // A key spelled twice: Envoy sorts the spellings apart and Go would read another first value
    { name: "timeoutSeconds spelled twice, Go reads 1: left, nothing rewritten", target: `${PODS}?watch=1&timeoutSeconds=1&timeout%53econds=3600`, expected: undefined },
    { name: "timeoutSeconds spelled twice, Go reads 3600: refused (Envoy would put 3600 first again)", target: `${PODS}?watch=1&timeout%53econds=3600&timeoutSeconds=1`, expected: refused("bad-request") },
    { name: "timeoutSeconds %-escaped only: refused (Envoy adds a second spelling)", target: `${PODS}?watch=1&timeout%53econds=3600`, expected: refused("bad-request") },
    { name: "watch spelled twice (reviewed as a watch, would run as a list): refused", target: `${PODS}?watch=true&w%61tch=false`, expected: refused("bad-request") },
    { name: "fieldSelector spelled twice (reviewed for one name, would watch all): refused", target: `${PODS}?watch=1&fieldSelector=metadata.name%3Dweb&fieldS%65lector=`, expected: refused("bad-request") },
    { name: "an empty piece (&&) is written back as =: read by no API server, bounded", target: `${PODS}?watch=1&&resourceVersion=5`, expected: watch(60) },
    { name: "a piece Go drops (;) stays dropped: bounded", target: `${PODS}?watch=1&a;b=1`, expected: watch(60) },
    { name: "+ and %20 in a value: unchanged, bounded", target: `${PODS}?watch=1&labelSelector=app+in+%28web%29`, expected: watch(60) },
    // The token's lifetime
    { name: "token with 30 s left: 30", target: `${PODS}?watch=1`, exp: NOW_MS / 1000 + 30, expected: watch(30) },
    { name: "token with 30.9 s left: 30 (never past the expiry)", target: `${PODS}?watch=1`, nowMs: NOW_MS - 900, exp: NOW_MS / 1000 + 30, expected: watch(30) },
    { name: "token with 0.5 s left: 401, mint a fresh one", target: `${PODS}?watch=1`, nowMs: NOW_MS - 500, exp: NOW_MS / 1000, expected: refused("invalid-token") },
    { name: "token past exp within the clock tolerance: 401", target: `${PODS}?watch=1`, exp: NOW_MS / 1000 - 10, expected: refused("invalid-token") },
    { name: "about to expire, asked less than what is left: left", target: `${PODS}?watch=1&timeoutSeconds=3`, exp: NOW_MS / 1000 + 10, expected: undefined },
    // A UserToken: its lifetime only
    { name: "UserToken, 24 h left, none asked: the server's default is left", target: `${PODS}?watch=1`, exp: NOW_MS / 1000 + 86_400, user: true, expected: undefined },
    { name: "UserToken, 24 h left, asked a day and a half: its lifetime", target: `${PODS}?watch=1&timeoutSeconds=129600`, exp: NOW_MS / 1000 + 86_400, user: true, expected: watch(86_400) },
    { name: "UserToken, 50 min left, none asked: the default's shortest (1800), never longer", target: `${PODS}?watch=1`, exp: NOW_MS / 1000 + 3000, user: true, expected: watch(1800) },
    { name: "UserToken, 10 min left, none asked: 600", target: `${PODS}?watch=1`, exp: NOW_MS / 1000 + 600, user: true, expected: watch(600) },
  ];
  it.each(rows)("$name: $target", ({ target, exp, user, nowMs, expected }) => {
    expect(bound(target, { exp, user, nowMs })).toEqual(expected);
  });

  it("a set timeoutSeconds reaches the API server as the only timeoutSeconds, every other parameter as asked", () => {
    const target = `${PODS}?watch=1&timeoutSeconds=3600&resourceVersion=7&timeoutSeconds=9&allowWatchBookmarks=true`;
    expect(bound(target)).toEqual(watch(60));
    expect(withQueryParametersSet(target, { timeoutSeconds: "60" })).toBe(`${PODS}?allowWatchBookmarks=true&resourceVersion=7&timeoutSeconds=60&watch=1`);
  });
});

describe("streams nothing can resume: Envoy ends them at the token's expiry", () => {
  const stream = (seconds: number) => ({ kind: "stream-duration", seconds });
  const rows: Array<{ name: string; target: string; method?: string; expected: unknown }> = [
    { name: "exec (WebSocket GET)", target: `${PODS}/web/exec?command=sh&stdin=true&tty=true`, expected: stream(900) },
    { name: "exec (SPDY POST)", target: `${PODS}/web/exec?command=sh`, method: "POST", expected: stream(900) },
    { name: "attach", target: `${PODS}/web/attach?stdout=true`, expected: stream(900) },
    { name: "port-forward", target: `${PODS}/web/portforward?ports=8080`, expected: stream(900) },
    { name: "log follow", target: `${PODS}/web/log?follow=true`, expected: stream(900) },
    { name: "log", target: `${PODS}/web/log`, expected: stream(900) },
    { name: "pods/proxy", target: `${PODS}/web/proxy/metrics`, expected: stream(900) },
    { name: "services/proxy", target: "/api/v1/namespaces/team-a/services/web:80/proxy/", expected: stream(900) },
    { name: "the legacy /proxy/ path", target: "/api/v1/proxy/namespaces/team-a/pods/web/metrics", expected: stream(900) },
    { name: "not a stream: a get", target: `${PODS}/web`, expected: undefined },
    { name: "not a stream: a list", target: PODS, expected: undefined },
    { name: "not a stream: a named get that says watch (kube serves a get)", target: `${PODS}/web?watch=true`, expected: undefined },
    { name: "not a stream: /version", target: "/version", expected: undefined },
  ];
  it.each(rows)("$name: $target", ({ target, method, expected }) => {
    expect(bound(target, { method })).toEqual(expected);
  });

  it("a token within a second of expiry opens no stream", () => {
    expect(bound(`${PODS}/web/exec?command=sh`, { exp: NOW_MS / 1000, nowMs: NOW_MS - 999 })).toEqual(refused("invalid-token"));
  });
});
