/**
 * The lengths Kubernetes allows for what a request names (src/kube-reading/object-names.ts): the pure
 * rule, table by table, and the gate in kube-api-proxy that applies it (gate 4, never reviewed or forwarded).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { oversizedField } from "../../src/kube-reading/object-names.ts";
import { requestInfoFor } from "../../src/kube-reading/request-info.ts";
import { describeRequestInfoTable, group, podsList } from "./support/request-info-table.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const x = (n: number) => "a".repeat(n);

const cases: Array<{ name: string; path: string; query?: string; expected: string | undefined }> = [
  // namespace: a DNS label
  { name: "namespace of 63", path: `/api/v1/namespaces/${x(63)}/pods`, expected: undefined },
  { name: "namespace of 64", path: `/api/v1/namespaces/${x(64)}/pods`, expected: "namespace longer than 63 characters" },
  { name: "namespace object itself, 64", path: `/api/v1/namespaces/${x(64)}`, expected: "namespace longer than 63 characters" },
  // name: at most a DNS subdomain
  { name: "name of 253", path: `/api/v1/namespaces/team-a/pods/${x(253)}`, expected: undefined },
  { name: "name of 254", path: `/api/v1/namespaces/team-a/pods/${x(254)}`, expected: "name longer than 253 characters" },
  { name: "name of 50 KB", path: `/api/v1/namespaces/team-a/pods/${x(50_000)}`, expected: "name longer than 253 characters" },
  { name: "name from a fieldSelector, 254", path: "/api/v1/namespaces/team-a/pods", query: `fieldSelector=metadata.name%3D${x(254)}`, expected: "name longer than 253 characters" },
  { name: "name of a subresource request, 254", path: `/api/v1/namespaces/team-a/pods/${x(254)}/log`, expected: "name longer than 253 characters" },
  { name: "proxy tail is not the name", path: `/api/v1/namespaces/team-a/pods/web-1/proxy/${x(5_000)}`, expected: undefined },
  // group, version, resource, subresource
  { name: "group of 253", path: `/apis/${x(253)}/v1/widgets`, expected: undefined },
  { name: "group of 254", path: `/apis/${x(254)}/v1/widgets`, expected: "apiGroup longer than 253 characters" },
  { name: "version of 64", path: `/apis/example.com/${x(64)}/widgets`, expected: "apiVersion longer than 63 characters" },
  { name: "resource of 63", path: `/apis/example.com/v1/${x(63)}`, expected: undefined },
  { name: "resource of 64", path: `/apis/example.com/v1/${x(64)}`, expected: "resource longer than 63 characters" },
  { name: "subresource of 64", path: `/api/v1/namespaces/team-a/pods/web-1/${x(64)}`, expected: "subresource longer than 63 characters" },
  // non-resource requests name nothing
  { name: "discovery of a long group", path: `/apis/${x(300)}`, expected: undefined },
];

describe("oversizedField", () => {
  it.each(cases)("$name", ({ path, query, expected }) => {
    const info = requestInfoFor({ method: "GET", path, query: new URLSearchParams(query ?? "") });
    expect(oversizedField(info), `GET ${path.slice(0, 120)}`).toBe(expected);
  });
});

describe("kube-api-proxy refuses an oversized name at gate 4, without a SubjectAccessReview or TokenRequest", () => {
  let world: FakeWorld;
  let server: TestServer;
  beforeAll(async () => {
    world = new FakeWorld();
    server = await startTestServer(world);
  });
  afterAll(async () => server.stop());
  beforeEach(() => {
    world.calls.length = 0;
    world.sarRequests.length = 0;
  });

  it.each(cases.filter((c) => c.expected !== undefined))("$name: 400 bad-request, no SAR or TokenRequest call", async ({ path, query }) => {
    const audited = () => server.logs.filter((l) => l["audit"] === "plugin_request" && l["decision"] === "denied:bad-request").length;
    const before = audited();
    const res = await server.check({
      path: `/clusters/${ids.cluster}${path}${query === undefined ? "" : `?${query}`}`,
      headers: { authorization: `Bearer ${await pluginToken()}` },
      policy: "kube-api-proxy",
    });
    expect(res).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
    expect(world.calls.filter((c) => /^(sar|token) /.test(c))).toEqual([]);
    expect(audited()).toBe(before + 1);
  });

  // FUN-17 §11's order: can_view (gate 3) is reported before the parse (gate 4), as for an unreadable query.
  it("reports can-view-denied, not bad-request, when the user cannot view the cluster", async () => {
    world.canViewAnswer = false;
    try {
      const res = await server.check({
        path: `/clusters/${ids.cluster}/api/v1/namespaces/${x(64)}/pods`,
        headers: { authorization: `Bearer ${await pluginToken()}` },
        policy: "kube-api-proxy",
      });
      expect(res).toMatchObject({ allowed: false, http: 403, reason: "can-view-denied" });
      expect(world.calls.filter((c) => /^(sar|token) /.test(c))).toEqual([]);
    } finally {
      world.canViewAnswer = true;
    }
  });

  it("the longest names Kubernetes allows still pass the gate and are reviewed", async () => {
    const res = await server.check({
      path: `/clusters/${ids.cluster}/api/v1/namespaces/${x(63)}/pods/${x(253)}`,
      headers: { authorization: `Bearer ${await pluginToken()}` },
      policy: "kube-api-proxy",
    });
    expect(res).toMatchObject({ allowed: true });
    expect(world.sarRequests).toMatchObject([{ namespace: x(63), name: x(253) }]);
  });
});

// path.IsValidPathSegmentName: the name a fieldSelector gives a list is taken only when it could be a
// path segment (rows moved from request-info.test.ts).
describeRequestInfoTable("requestInfoFor: table (path segment names)", [
  ...group("fieldSelector", [
    // a value that cannot be a path segment is not taken as the name
    podsList("fieldSelector=metadata.name%3D..", "list", ""),
    podsList("fieldSelector=metadata.name%3D.", "list", ""),
    podsList("fieldSelector=metadata.name%3Da%2Fb", "list", ""),
    podsList("fieldSelector=metadata.name%3Da%25b", "list", ""),
    podsList("fieldSelector=metadata.name%3D...", "list", "..."),
  ]),
]);
