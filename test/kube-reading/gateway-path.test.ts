/** The kube-api-proxy URL: cluster binding and the path the API server will see. Pure tables. */
import { describe, expect, it } from "vitest";
import { kubePathOf, parseGatewayPath } from "../../src/kube-reading/gateway-path.ts";

const C = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";

describe("parseGatewayPath", () => {
  it.each([
    { path: `/clusters/${C}/api/v1/pods`, expected: { kind: "ok", clusterId: C, rest: "/api/v1/pods" } },
    { path: `/clusters/${C}/`, expected: { kind: "ok", clusterId: C, rest: "/" } },
    { path: `/clusters/${C}`, expected: { kind: "ok", clusterId: C, rest: "/" } },
    { path: `/clusters/${C.toUpperCase()}/api`, expected: { kind: "malformed" } },
    { path: "/clusters/prod/api", expected: { kind: "malformed" } },
    { path: "/clusters//api", expected: { kind: "malformed" } },
    { path: `/cluster/${C}/api`, expected: { kind: "malformed" } },
    { path: `/clusters/${C}x/api`, expected: { kind: "malformed" } },
    { path: "/", expected: { kind: "malformed" } },
  ])("$path → $expected.kind", ({ path, expected }) => {
    expect(parseGatewayPath(path)).toMatchObject(expected);
  });
});

describe("kubePathOf", () => {
  it.each([
    { rest: "/api/v1/pods", expected: { kind: "ok", path: "/api/v1/pods" } },
    { rest: "/apis/apps/v1/deployments/", expected: { kind: "ok", path: "/apis/apps/v1/deployments/" } },
    { rest: "/version", expected: { kind: "ok", path: "/version" } },
    { rest: "/openapi/v3/apis/apps/v1", expected: { kind: "ok", path: "/openapi/v3/apis/apps/v1" } },
    // Percent-decoded as Go's net/http decodes URL.Path, which kube-apiserver's RequestInfo reads.
    { rest: "/api/v1/namespaces/a%2Fb/pods", expected: { kind: "ok", path: "/api/v1/namespaces/a/b/pods" } },
    { rest: "/api/v1/namespaces/%61/pods", expected: { kind: "ok", path: "/api/v1/namespaces/a/pods" } },
    { rest: "/api/v1/namespaces/%2e%2e/pods", expected: { kind: "malformed" } },
    { rest: "/api/v1/namespaces/../pods", expected: { kind: "malformed" } },
    { rest: "/api/./v1/pods", expected: { kind: "malformed" } },
    { rest: "/api//v1/pods", expected: { kind: "malformed" } },
    { rest: "//api/v1/pods", expected: { kind: "malformed" } },
    { rest: "/api/v1/pods%zz", expected: { kind: "malformed" } },
    { rest: "/api/v1/pods%0a", expected: { kind: "malformed" } },
    { rest: "/api/v1/pods%00", expected: { kind: "malformed" } },
    { rest: "/", expected: { kind: "not-found" } },
    { rest: "/healthz", expected: { kind: "not-found" } },
    { rest: "/metrics", expected: { kind: "not-found" } },
    { rest: "/logs/kube-apiserver.log", expected: { kind: "not-found" } },
    { rest: "/apix/v1", expected: { kind: "not-found" } },
    { rest: "/API/v1/pods", expected: { kind: "not-found" } },
  ])("$rest → $expected.kind", ({ rest, expected }) => {
    expect(kubePathOf(rest)).toMatchObject(expected);
  });
});
