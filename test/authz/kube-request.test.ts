/**
 * readKubeRequest: the one reading of the Kubernetes request behind a kube-api-proxy path, row by
 * row — not-found, bad-request in the path or past it (with what was asked, for the audit line), and
 * ok with the attributes the user's SubjectAccessReview asks. The RequestInfo rules themselves are
 * test/kube-reading/request-info.test.ts's (and its differential test against Go's).
 */
import { describe, expect, it } from "vitest";
import { askedOf, readKubeRequest, reviewAttributes } from "../../src/authz/kube-request.ts";

interface Row {
  name: string;
  method?: string;
  rest: string;
  query?: string;
  headers?: Record<string, string>;
  targetError?: string;
  expected: unknown;
}

const pods = { kind: "resource", group: "", version: "v1", resource: "pods", subresource: "", namespace: "a" } as const;

const ROWS: Row[] = [
  // ok: what the review asks.
  { name: "a list", rest: "/api/v1/namespaces/a/pods", expected: { kind: "ok", attributes: [{ ...pods, verb: "list", name: "" }] } },
  { name: "a get", rest: "/api/v1/namespaces/a/pods/web", expected: { kind: "ok", attributes: [{ ...pods, verb: "get", name: "web" }] } },
  {
    name: "a watch of a group's resource",
    rest: "/apis/apps/v1/namespaces/a/deployments",
    query: "watch=1",
    expected: { kind: "ok", attributes: [{ kind: "resource", verb: "watch", group: "apps", version: "v1", resource: "deployments", subresource: "", namespace: "a", name: "" }] },
  },
  { name: "a non-resource path", rest: "/version", expected: { kind: "ok", attributes: [{ kind: "non-resource", verb: "get", path: "/version" }] } },
  {
    name: "a WebSocket exec needs get and create",
    rest: "/api/v1/namespaces/a/pods/web/exec",
    query: "command=ls",
    headers: { connection: "upgrade", upgrade: "websocket" },
    expected: {
      kind: "ok",
      attributes: [
        { ...pods, verb: "get", subresource: "exec", name: "web" },
        { ...pods, verb: "create", subresource: "exec", name: "web" },
      ],
    },
  },
  // not-found: not under a root an API server serves.
  { name: "a root the gateway does not forward", rest: "/healthz", expected: { kind: "not-found" } },
  // bad-request in the path: nothing is read from it.
  { name: "an invalid %-escape", rest: "/api/v1/namespaces/a/pods/%zz", expected: { kind: "bad-request", inPath: true, asked: undefined } },
  { name: "a dot segment", rest: "/api/v1/namespaces/a/../b/pods", expected: { kind: "bad-request", inPath: true, asked: undefined } },
  // bad-request past the path: refused as kube-apiserver would, with what was asked.
  { name: "a path kube-apiserver answers itself", rest: "/api/v1/watch", expected: { kind: "bad-request", inPath: false, verb: "get" } },
  { name: "a bad ?timeout=", rest: "/api/v1/namespaces/a/pods", query: "timeout=abc", expected: { kind: "bad-request", inPath: false, verb: "list" } },
  { name: "a target Go reads otherwise", rest: "/api/v1/namespaces/a/pods", targetError: "too many query parameters", expected: { kind: "bad-request", inPath: false, verb: "list" } },
  { name: "a name Kubernetes cannot store", rest: `/api/v1/namespaces/a/pods/${"x".repeat(300)}`, expected: { kind: "bad-request", inPath: false, verb: "get" } },
];

describe("readKubeRequest", () => {
  it.each(ROWS)("$name: $rest", ({ method = "GET", rest, query = "", headers = {}, targetError, expected }) => {
    const request = { method, query: new URLSearchParams(query), headers, targetError };
    const read = readKubeRequest(request, rest);
    const shown =
      read.kind === "ok"
        ? { kind: read.kind, attributes: reviewAttributes(read.info, request) }
        : read.kind === "bad-request"
          ? read.inPath
            ? { kind: read.kind, inPath: true, asked: read.asked }
            : { kind: read.kind, inPath: false, verb: read.asked?.verb }
          : read;
    expect(shown, `${method} ${rest}?${query}`).toEqual(expected);
    if (read.kind === "bad-request") expect(read.detail).not.toBe("");
  });

  it("what was asked is the ok request's info, a refused request's reading, and nothing for a path that is not Kubernetes'", () => {
    const ok = readKubeRequest({ method: "GET", query: new URLSearchParams(), headers: {} }, "/api/v1/namespaces/a/pods");
    expect(askedOf(ok)).toMatchObject({ verb: "list", resource: "pods" });
    const refused = readKubeRequest({ method: "GET", query: new URLSearchParams("timeout=abc"), headers: {} }, "/api/v1/namespaces/a/pods");
    expect(askedOf(refused)).toMatchObject({ verb: "list", resource: "pods" });
    expect(askedOf(readKubeRequest({ method: "GET", query: new URLSearchParams(), headers: {} }, "/healthz"))).toBeUndefined();
  });
});
