/**
 * The route table (src/config/route-table.ts): (authority, path) → (policy, service) for the hosts
 * and paths a request can carry, and the tables it refuses because first-match order would decide.
 * Envoy agreement over the generated bootstrap is route-table.envoy-oracle.test.ts's.
 */
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadConfig, parseConfig } from "../../src/config/load.ts";
import {
  buildRouteTable,
  hostOfAuthority,
  type PathMatch,
  type RouteTable,
  routeFinder,
  routeTableProblems,
  sharedPath,
  type TableHost,
  type TableRoute,
} from "../../src/config/route-table.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const example = () => loadConfig(resolve(ROOT, "deploy/examples/portcullis.yaml"));
const table = () => {
  const c = example();
  return buildRouteTable({ envoy: c.envoy!, platform: c.platform });
};
const answer = (t: RouteTable, authority: string, path: string) => {
  const { route } = routeFinder(t)(authority, path);
  return route?.policy === undefined ? "no-policy" : route.service === undefined ? route.policy : `${route.policy}/${route.service}`;
};

describe("hosts: lower-cased, port stripped, nothing else", () => {
  it.each([
    ["kube-api-proxy.fundament.io", "kube-api-proxy.fundament.io"],
    ["KUBE-API-PROXY.Fundament.IO", "kube-api-proxy.fundament.io"],
    ["kube-api-proxy.fundament.io:443", "kube-api-proxy.fundament.io"],
    ["kube-api-proxy.fundament.io:8443", "kube-api-proxy.fundament.io"],
    ["[::1]:8443", "[::1]"],
    ["[::1]", "[::1]"],
    ["10.0.0.1:80", "10.0.0.1"],
    // A trailing dot is another name to Envoy's virtual host matching: kept, so it matches no host.
    ["kube-api-proxy.fundament.io.", "kube-api-proxy.fundament.io."],
    ["kube-api-proxy.fundament.io.:443", "kube-api-proxy.fundament.io."],
  ])("%s → %s", (authority, host) => {
    expect(hostOfAuthority(authority)).toBe(host);
  });

  it.each(["", ":443", "kube-api-proxy.fundament.io:", "kube-api-proxy.fundament.io:https", "kube-api-proxy.fundament.io:443:443", "::1", "[::1", "[::1]x:443", "[::1]:"])(
    "%j is no host",
    (authority) => {
      expect(hostOfAuthority(authority)).toBeUndefined();
    },
  );
});

describe("the example configuration's table", () => {
  const KUBE = "kube-api-proxy.fundament.io";
  const PLUGINS = "plugin-proxy.fundament.io";
  const API = "api.fundament.io";
  const AUTHN = "authn.fundament.io";
  const rows: Array<[authority: string, path: string, expected: string]> = [
    // kube-api-proxy: every path under /clusters/, whatever cluster (the policy answers unknown-cluster).
    [KUBE, `/clusters/${C1}/api/v1/pods`, "kube-api-proxy"],
    [KUBE, "/clusters/not-a-cluster/version", "kube-api-proxy"],
    [`${KUBE}:443`, `/clusters/${C1}/apis`, "kube-api-proxy"],
    [KUBE.toUpperCase(), `/clusters/${C1}/api`, "kube-api-proxy"],
    [KUBE, "/clusters/", "kube-api-proxy"],
    [KUBE, "/clusters", "no-policy"],
    [KUBE, "/Clusters/x/api", "no-policy"],
    [KUBE, "/CLUSTERS/x/api", "no-policy"],
    [KUBE, "//clusters/x/api", "no-policy"],
    [KUBE, "/%63lusters/x/api", "no-policy"],
    [KUBE, "/api/v1/pods", "no-policy"],
    // The table reads paths literally, as Envoy's matchers do after its normalisation: a dot
    // segment or an escaped slash that reaches it is request mode's to refuse (request-mode.ts).
    [KUBE, `/clusters/${C1}/../../plugins/x`, "kube-api-proxy"],
    [KUBE, `/clusters/${C1}%2F..%2Fx/api`, "kube-api-proxy"],
    [PLUGINS, "/plugins/../installations/x/runtime/", "plugin-assets"],
    [KUBE, "/./clusters/x/api", "no-policy"],
    [KUBE, "/", "no-policy"],
    [KUBE, "/installations/x/runtime/", "no-policy"],
    [`${KUBE}.`, `/clusters/${C1}/api`, "no-policy"],
    ["[::1]:443", `/clusters/${C1}/api`, "no-policy"],
    ["evil.example", `/clusters/${C1}/api`, "no-policy"],
    [`evil.example.${KUBE}`, `/clusters/${C1}/api`, "no-policy"],
    [`${KUBE}.evil.example`, `/clusters/${C1}/api`, "no-policy"],
    ["", `/clusters/${C1}/api`, "no-policy"],
    // plugin-proxy and the assets on its host.
    [PLUGINS, "/installations/abc/runtime/x", "plugin-proxy"],
    [PLUGINS, "/installations/abc/controller", "plugin-proxy"],
    [PLUGINS, "/installations/", "plugin-proxy"],
    [PLUGINS, "/installations", "no-policy"],
    [PLUGINS, "/plugins/p/1.0.0/console/index.js", "plugin-assets"],
    [PLUGINS, "/plugins/", "plugin-assets"],
    [PLUGINS, "/plugins", "no-policy"],
    [PLUGINS, `/clusters/${C1}/api`, "no-policy"],
    ["konfidence.fundament.io", "/api/v1/projects/p/stages", "konfidence-api"],
    ["konfidence.fundament.io", "/api/v2/projects", "no-policy"],
    ["konfidence.fundament.io", "/api/v1", "no-policy"],
    // Platform services: exact public paths before the prefixes that contain them.
    [AUTHN, "/authn.v1.TokenService/ExchangeToken", "public/authn-api"],
    [AUTHN, "/authn.v1.TokenService/ExchangeToken/", "platform-api/authn-api"],
    [AUTHN, "/authn.v1.TokenService/exchangetoken", "platform-api/authn-api"],
    [AUTHN, "/authn.v1.TokenService/MintPluginToken", "platform-api/authn-api"],
    [AUTHN, "/authn.v1.", "platform-api/authn-api"],
    [AUTHN, "/authn.v1", "no-policy"],
    [AUTHN, "/AUTHN.v1.TokenService/ExchangeToken", "no-policy"],
    [AUTHN, "/login", "public/authn-api"],
    [AUTHN, "/login/password", "public/authn-api"],
    [AUTHN, "/login/", "platform-api/authn-api"],
    [AUTHN, "/login/other", "platform-api/authn-api"],
    [AUTHN, "/loginx", "no-policy"],
    [AUTHN, "/logout", "platform-api/authn-api"],
    [AUTHN, "/logout/", "platform-api/authn-api"],
    [AUTHN, "/callback", "public/authn-api"],
    [AUTHN, "/", "no-policy"],
    [AUTHN, "/organization.v1.PluginService/GetPluginDefinition", "no-policy"],
    [API, "/organization.v1.PluginService/GetPluginDefinition", "public/organization-api"],
    [API, "/organization.v1.OrganizationService/List", "platform-api/organization-api"],
    [API, "/dcim.v1.RackService/List", "platform-api/dcim-api"],
    [API, "/dcim.v2.RackService/List", "no-policy"],
    [API, "/authn.v1.TokenService/ExchangeToken", "no-policy"],
    [`${API}:8443`, "/dcim.v1.X/Y", "platform-api/dcim-api"],
    ["console.fundament.io", "/", "no-policy"],
  ];
  it.each(rows)("%s %s → %s", (authority, path, expected) => {
    expect(answer(table(), authority, path)).toBe(expected);
  });

  it("has no problems, and one host per origin", () => {
    expect(routeTableProblems(table())).toEqual([]);
    expect(table().hosts.map((h) => h.host)).toEqual([
      "kube-api-proxy.fundament.io",
      "plugin-proxy.fundament.io",
      "konfidence.fundament.io",
      "authn.fundament.io",
      "api.fundament.io",
    ]);
  });
});

describe("overlap of two matchers (the witness named in errors)", () => {
  const exact = (path: string): PathMatch => ({ kind: "exact", path });
  const prefix = (p: string): PathMatch => ({ kind: "prefix", prefix: p });
  const segment = (p: string): PathMatch => ({ kind: "segment-prefix", prefix: p });
  it.each([
    { a: exact("/a"), b: exact("/a"), shared: "/a" },
    { a: exact("/a"), b: exact("/a/"), shared: undefined },
    { a: prefix("/a."), b: prefix("/a.B/"), shared: "/a.B/" },
    { a: prefix("/a.B/"), b: prefix("/a."), shared: "/a.B/" },
    { a: prefix("/a."), b: prefix("/b."), shared: undefined },
    { a: segment("/login"), b: segment("/login/password"), shared: "/login/password" },
    { a: segment("/login"), b: segment("/loginx"), shared: undefined },
    { a: segment("/login"), b: prefix("/login/"), shared: "/login/" },
    { a: segment("/login"), b: prefix("/log"), shared: "/login" },
    { a: segment("/login"), b: prefix("/loginx"), shared: undefined },
    { a: segment("/a"), b: exact("/a/b"), shared: "/a/b" },
    { a: segment("/a"), b: exact("/ab"), shared: undefined },
    { a: prefix("/"), b: segment("/x"), shared: "/x" },
  ])("$a.kind $a vs $b.kind $b", ({ a, b, shared }) => {
    expect(sharedPath(a, b)).toBe(shared);
  });
});

describe("bad tables are refused, naming both routes", () => {
  const r = (name: string, match: PathMatch, policy: TableRoute["policy"], field: Array<string | number>, service?: string): TableRoute => ({
    name,
    match,
    policy,
    service,
    upstream: service === undefined ? { kind: "none" } : { kind: "platform", service },
    field,
  });
  const host = (h: string, routes: TableRoute[], field: Array<string | number> = ["envoy", "platform", 0, "origin"]): TableHost => ({
    name: `platform-${h}`,
    host: h,
    origin: `https://${h}`,
    field,
    cors: undefined,
    routes,
  });
  const rows: Array<{ name: string; table: RouteTable; expected: RegExp[] }> = [
    {
      name: "an empty host",
      table: { hosts: [host("", [])] },
      expected: [/^envoy\.platform\[0\]\.origin: virtual host platform- has an empty host name$/],
    },
    {
      name: "two hosts of one name",
      table: { hosts: [host("a.example", [], ["envoy", "origins", "kubeApiProxy"]), host("a.example", [], ["envoy", "origins", "pluginProxy"])] },
      expected: [/^envoy\.origins\.pluginProxy: .*\(envoy\.origins\.pluginProxy\) has the host of .*\(envoy\.origins\.kubeApiProxy\)/],
    },
    {
      name: "a duplicate prefix, same answer",
      table: {
        hosts: [host("a.example", [r("a /x.", { kind: "prefix", prefix: "/x." }, "platform-api", ["p", 0], "a"), r("a /x. again", { kind: "prefix", prefix: "/x." }, "platform-api", ["p", 1], "a")])],
      },
      expected: [/^p\[1\]: route "a \/x\. again" \(p\[1\]\) and route "a \/x\." \(p\[0\]\) both match \/x\. on a\.example$/],
    },
    {
      name: "overlapping prefixes of two services",
      table: {
        hosts: [
          host("a.example", [r("a /login", { kind: "segment-prefix", prefix: "/login" }, "platform-api", ["s", 0], "a"), r("b /login/password", { kind: "segment-prefix", prefix: "/login/password" }, "platform-api", ["s", 1], "b")]),
        ],
      },
      expected: [/both match \/login\/password on a\.example/],
    },
    {
      name: "a duplicate exact path of two services",
      table: { hosts: [host("a.example", [r("a public /p", { kind: "exact", path: "/p" }, "public", ["x"], "a"), r("b public /p", { kind: "exact", path: "/p" }, "public", ["y"], "b")])] },
      expected: [/^y: route "b public \/p" \(y\) and route "a public \/p" \(x\) both match \/p/],
    },
    {
      name: "an exact path after a prefix that takes it",
      table: { hosts: [host("a.example", [r("a /x.", { kind: "prefix", prefix: "/x." }, "platform-api", ["x"], "a"), r("a public /x.Y/Z", { kind: "exact", path: "/x.Y/Z" }, "public", ["y"], "a")])] },
      expected: [/^y: route "a public \/x\.Y\/Z" \(y\) comes after "a \/x\." \(x\)/],
    },
    {
      name: "a route after the catch-all",
      table: { hosts: [host("a.example", [r("catch-all", { kind: "prefix", prefix: "/" }, undefined, ["c"]), r("a /x.", { kind: "prefix", prefix: "/x." }, "platform-api", ["x"], "a")])] },
      expected: [/^x: route "a \/x\." \(x\) comes after "catch-all" \(c\)/],
    },
  ];
  it.each(rows)("$name", ({ table, expected }) => {
    const lines = routeTableProblems(table).map((p) => `${p.path.map((s, i) => (typeof s === "number" ? `[${s}]` : `${i === 0 ? "" : "."}${s}`)).join("")}: ${p.message}`);
    expect(lines).toHaveLength(expected.length);
    expected.forEach((e, i) => expect(lines[i]).toMatch(e));
  });

  it("accepts disjoint routes and the same routes on two hosts", () => {
    const t: RouteTable = {
      hosts: [
        host("a.example", [r("a /login", { kind: "segment-prefix", prefix: "/login" }, "platform-api", ["x"], "a"), r("b /loginx", { kind: "segment-prefix", prefix: "/loginx" }, "platform-api", ["y"], "b")]),
        host("b.example", [r("a /login", { kind: "segment-prefix", prefix: "/login" }, "platform-api", ["z"], "a")], ["envoy", "platform", 1, "origin"]),
      ],
    };
    expect(routeTableProblems(t)).toEqual([]);
  });
});

describe("built from a minimal configuration", () => {
  it("has no Konfidence host without envoy.origins.konfidence, and one platform host per origin", () => {
    const c = parseConfig(
      stringify({
        tokens: { secrets: [{ env: "S" }] },
        openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
        clusters: [{ id: C1 }],
        platform: { services: [{ name: "a-api", routes: ["/a."] }, { name: "b-api", routes: ["/b."] }] },
        envoy: {
          origins: { console: "https://console.example", kubeApiProxy: "https://Kube.Example:8443", pluginProxy: "https://plugins.example" },
          clusters: [{ id: C1, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" }],
          upstreams: { assets: { url: "http://assets:8080" } },
          platform: [
            { name: "a-api", origin: "https://a.example", upstream: { url: "http://a:8080" } },
            { name: "b-api", origin: "https://a.example", upstream: { url: "http://b:8080" } },
          ],
        },
      }),
    );
    const t = buildRouteTable({ envoy: c.envoy!, platform: c.platform });
    expect(t.hosts.map((h) => [h.name, h.host, h.routes.length])).toEqual([
      ["kube-api-proxy", "kube.example", 1],
      ["plugin-proxy", "plugins.example", 2],
      ["platform-a.example", "a.example", 3],
    ]);
    expect(answer(t, "KUBE.example:8443", "/clusters/x/")).toBe("kube-api-proxy");
    expect(answer(t, "a.example", "/b.S/M")).toBe("platform-api/b-api");
  });
});
