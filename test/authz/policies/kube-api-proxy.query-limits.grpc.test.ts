/**
 * Query beyond Go's limits, over real gRPC (issues 11 and 42 §6). kube-apiserver reads the query with
 * Go's url.ParseQuery, errors ignored: past 10,000 parameters it drops the whole query (an API server
 * built with an older Go reads all of it), and it drops a pair holding `;` or a bad %-escape and reads
 * the rest. Reviewing a request as if parsed otherwise reviews another request than the one the
 * plugin's token then runs (`list pods name=web-1` reviewed, every pod listed). Past the limit, or
 * with bytes that are not UTF-8, is a 400 bad-request and no SubjectAccessReview is asked; a pair Go
 * drops is dropped here too and the rest reviewed as kube-apiserver reads it. The controls show the
 * limit is Go's: 10,000 parameters are still read. The ports are recording fakes that say yes to
 * everything.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { AccessAttributes } from "../../../src/ports/policy-ports.ts";
import { FakeWorld } from "../../support/fakes.ts";
import { startTestServer, type TestServer } from "../../support/server.ts";
import { ids, pluginToken, userToken } from "../../support/tokens.ts";
import { type Oracle, startOracle } from "../../kube-reading/requestinfo-oracle.ts";

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
  // pairs Go drops while reading the rest: reviewed as kube-apiserver reads what is left
  { name: "issue 42: a %zz pair beside the fieldSelector is dropped", path: `${PODS}?${SELECTOR}&%zz=1`, expected: { sars: [pods("list", "web-1")] } },
  { name: "fieldSelector pair with ; is dropped: every pod", path: `${PODS}?${SELECTOR};`, expected: { sars: [pods("list")] } },
  { name: "fieldSelector with a bad escape is dropped: every pod", path: `${PODS}?${SELECTOR}%zz`, expected: { sars: [pods("list")] } },
  { name: "watch with a bad escape is dropped: a list", path: `${PODS}?watch=1%zz`, expected: { sars: [pods("list")] } },
  { name: "watch=1; is dropped: a list", path: `${PODS}?watch=1;`, expected: { sars: [pods("list")] } },
  { name: "a dropped first watch: the second is the one read", path: `${PODS}?watch=0%zz&watch=1`, expected: { sars: [pods("watch")] } },
  { name: "a dropped first fieldSelector: the second is the one read", path: `${PODS}?fieldSelector=metadata.name%3Ddb-0;&${SELECTOR}`, expected: { sars: [pods("list", "web-1")] } },
  { name: "a lone %, ;, = and == beside the fieldSelector", path: `${PODS}?%&;&=&==&${SELECTOR}`, expected: { sars: [pods("list", "web-1")] } },
  { name: "unsafe delete option dropped with its ;", method: "DELETE", path: `${PODS}/web-1?ignoreStoreReadErrorWithClusterBreakingPotential=true;`, expected: { sars: [pods("delete", "web-1")] } },
  { name: "unsafe delete option read past a dropped pair", method: "DELETE", path: `${PODS}/web-1?%zz&ignoreStoreReadErrorWithClusterBreakingPotential=true`, expected: { sars: [pods("delete", "web-1"), pods("unsafe-delete-ignore-read-errors", "web-1")] } },
  { name: "a bad ?timeout= behind a dropped pair is still refused", path: `${PODS}?timeout=1%zz&timeout=10`, expected: { reason: "bad-request" } },
  // cannot be read as kube-apiserver reads it
  { name: "fieldSelector not UTF-8 once unescaped", path: `${PODS}?${SELECTOR}%FF`, expected: { reason: "bad-request" } },
  { name: "a pair not UTF-8 beside the fieldSelector", path: `${PODS}?${SELECTOR}&a=%C0%AF`, expected: { reason: "bad-request" } },
  { name: "# in the query (Go's server keeps it: name web-1#, a watch)", path: `${PODS}?${SELECTOR}#&watch=1`, expected: { reason: "bad-request" } },
  // kube-apiserver answers a bad ?timeout= itself, before authorization
  { name: "timeout that is not a Go duration", path: `${PODS}?${SELECTOR}&timeout=10`, expected: { reason: "bad-request" } },
  { name: "control: timeout=10s", path: `${PODS}?${SELECTOR}&timeout=10s`, expected: { sars: [pods("list", "web-1")] } },
  // methods are case-sensitive: kube gives `delete` no verb (its authorizer then refuses it)
  { name: "lower-case delete is no verb, not deletecollection", method: "delete", path: PODS, expected: { sars: [pods("")] } },
  { name: "control: DELETE on the collection", method: "DELETE", path: PODS, expected: { sars: [pods("deletecollection")] } },
];

describe("kube-api-proxy reads a query as kube-apiserver does, and refuses one it cannot read so (real gRPC)", () => {
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

/**
 * A UserToken request acts as the user, so a request kube-apiserver will refuse is forwarded for it
 * to refuse. One whose query it reads otherwise is not: the pair not read here may be its `watch`,
 * which the API server then runs on its own clock (30–60 min), past the user's token. kube-apiserver's
 * own reading (the oracle) says which of these it serves as a watch.
 */
describe("a UserToken request whose query kube-apiserver reads otherwise is refused, not forwarded unbounded", () => {
  let oracle: Oracle;
  beforeAll(() => {
    oracle = startOracle();
  });
  afterAll(async () => oracle.stop());
  const userCheck = async (rawQuery: string) =>
    server.check({ method: "GET", path: `${PODS}?${rawQuery}`, headers: { authorization: `Bearer ${await userToken({}, { exp: Math.floor(Date.now() / 1000) + 600 })}` }, policy: "kube-api-proxy" });

  it.each(["watch=%FF", "watch=tru%C3", "watch=%C0%AF&resourceVersion=0"])("?%s: a watch to kube-apiserver, 400 here", async (rawQuery) => {
    const [read] = await oracle.ask([{ method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery }]);
    expect({ rejected: read!.rejected, verb: read!.requestInfo?.verb }).toEqual({ rejected: "", verb: "watch" });
    expect(await userCheck(rawQuery)).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
  });

  it("watch=1 past Go's parameter limit (an API server built with an older Go reads the watch)", async () => {
    expect(await userCheck(`watch=1${"&x=1".repeat(10_000)}`)).toMatchObject({ allowed: false, http: 400, reason: "bad-request" });
  });

  it("control: a request kube-apiserver itself refuses (a ?timeout= that is no Go duration) is still forwarded for it to refuse", async () => {
    const rawQuery = "timeout=10";
    const [read] = await oracle.ask([{ method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery }]);
    expect(read!.rejected).not.toBe("");
    expect(await userCheck(rawQuery)).toMatchObject({ allowed: true });
  });
});
