/**
 * Query beyond Go's limits, over real gRPC (issue 11). kube-apiserver reads the query with Go's
 * url.ParseQuery, errors ignored: past 10,000 parameters it drops the whole query, and it drops a
 * pair holding `;` or a bad %-escape. Reviewing such a request as if parsed reviewed another request
 * than the one the plugin's token then runs (`list pods name=web-1` reviewed, every pod listed).
 * Each is a 400 bad-request now, and no SubjectAccessReview is asked. The controls show the limit is
 * Go's: 10,000 parameters are still read. The ports are recording fakes that say yes to everything.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { AccessAttributes } from "../../src/authz/ports.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-b/pods`;
const SELECTOR = "fieldSelector=metadata.name%3Dweb-1";

let world: FakeWorld;
let server: TestServer;
let token: string;

beforeAll(async () => {
  world = new FakeWorld();
  server = await startTestServer(world);
  token = await pluginToken();
});
afterAll(async () => server.stop());
beforeEach(() => {
  Object.assign(world, new FakeWorld());
});

const pods = (verb: string, name = ""): AccessAttributes => ({ kind: "resource", verb, group: "", version: "v1", resource: "pods", subresource: "", namespace: "team-b", name });

const rows: Array<{ name: string; method?: string; path: string; expected: { reason: string } | { sars: AccessAttributes[] } }> = [
  // net/url's limit: more than 10,000 parameters (counted as `&` + 1) and Go reads no query at all
  { name: "the issue's request: fieldSelector + 10,000 &", path: `${PODS}?${SELECTOR}${"&".repeat(10_000)}`, expected: { reason: "bad-request" } },
  { name: "the watch variant: watch=1 + 10,000 &", path: `${PODS}?watch=1${"&".repeat(10_000)}`, expected: { reason: "bad-request" } },
  { name: "10,001 real parameters", path: `${PODS}?${SELECTOR}${"&a=1".repeat(10_000)}`, expected: { reason: "bad-request" } },
  { name: "control: fieldSelector + 9,999 & (10,000 parameters)", path: `${PODS}?${SELECTOR}${"&".repeat(9_999)}`, expected: { sars: [pods("list", "web-1")] } },
  { name: "control: watch=1 + 9,999 &", path: `${PODS}?watch=1${"&".repeat(9_999)}`, expected: { sars: [pods("watch")] } },
  { name: "control: 10,000 %26 are not separators", path: `${PODS}?watch=1&x=${"%26".repeat(10_000)}`, expected: { sars: [pods("watch")] } },
  // pairs Go drops while reading the rest
  { name: "fieldSelector pair with ;", path: `${PODS}?${SELECTOR};`, expected: { reason: "bad-request" } },
  { name: "watch with a bad escape", path: `${PODS}?watch=1%zz`, expected: { reason: "bad-request" } },
  { name: "fieldSelector not UTF-8 once unescaped", path: `${PODS}?${SELECTOR}%FF`, expected: { reason: "bad-request" } },
  { name: "# in the query (Go's server keeps it: name web-1#, a watch)", path: `${PODS}?${SELECTOR}#&watch=1`, expected: { reason: "bad-request" } },
  // kube-apiserver answers a bad ?timeout= itself, before authorization
  { name: "timeout that is not a Go duration", path: `${PODS}?${SELECTOR}&timeout=10`, expected: { reason: "bad-request" } },
  { name: "control: timeout=10s", path: `${PODS}?${SELECTOR}&timeout=10s`, expected: { sars: [pods("list", "web-1")] } },
  // methods are case-sensitive: kube gives `delete` no verb (its authorizer then refuses it)
  { name: "lower-case delete is no verb, not deletecollection", method: "delete", path: PODS, expected: { sars: [pods("")] } },
  { name: "control: DELETE on the collection", method: "DELETE", path: PODS, expected: { sars: [pods("deletecollection")] } },
];

describe("kube-api-proxy refuses a query Go would read otherwise (real gRPC)", () => {
  it.each(rows)("$name", async ({ method, path, expected }) => {
    const res = await server.check({ method: method ?? "GET", path, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" });
    if ("reason" in expected) {
      expect(res.allowed).toBe(false);
      if (res.allowed) return;
      expect({ http: res.http, grpc: res.grpc, reason: res.reason }).toEqual({ http: 400, grpc: 3, reason: expected.reason });
      expect(world.sarRequests).toEqual([]);
    } else {
      expect(res.allowed).toBe(true);
      expect(world.sarRequests).toEqual(expected.sars);
    }
  });
});
