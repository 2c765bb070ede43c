/**
 * Request mode (check.policyFrom: request) through the checker: which policy and service a Check
 * without context_extensions gets, which requests are refused before any policy (what the generated
 * Envoy refuses or rewrites), which preflights are answered and how — and that contextExtensions
 * mode, the default, does none of it. Then the configurations whose route table is ambiguous,
 * refused naming both routes (exit 2 from validate-config).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import fc from "fast-check";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { createChecker } from "../../src/authz/check.ts";
import { allow } from "../../src/authz/decision.ts";
import type { Policy } from "../../src/authz/policy.ts";
import { POLICY_NAMES } from "../../src/config/policy-names.ts";
import { unsafePath } from "../../src/authz/request-mode.ts";
import { buildRouteTable, routeFinder } from "../../src/config/route-table.ts";
import { ConfigError, loadConfig, parseConfig } from "../../src/config/load.ts";
import { envoyRoot } from "../../src/envoy/bootstrap.ts";
import { cli } from "../cli/run.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const example = loadConfig(resolve(ROOT, "deploy/examples/portcullis.yaml"));
const TABLE = buildRouteTable({ envoy: example.envoy!, platform: example.platform });

/** Every policy allows and says, in a header, the policy and service it was asked as. */
const policies: Policy[] = POLICY_NAMES.map((name) => ({
  name,
  bodyShape: name === "kube-api-proxy" ? "kube-status" : "json",
  decide: async (request) => allow({ set: { "x-decided-as": [name, request.contextExtensions["service"]].filter((x) => x !== undefined).join("/") }, remove: [] }),
}));
const logger = pino({ level: "silent" });
const requestMode = createChecker({ policies, audit: { pluginRequest: () => {}, pluginTokenReplay: () => {} }, timeoutMs: 5_000, retryAfterSeconds: 1, logger, routeTable: TABLE });
const extensionsMode = createChecker({ policies, audit: { pluginRequest: () => {}, pluginTokenReplay: () => {} }, timeoutMs: 5_000, retryAfterSeconds: 1, logger });

interface Spec {
  authority: string;
  path: string;
  method?: string;
  headers?: Record<string, string>;
  extensions?: Record<string, string>;
}

function message(spec: Spec) {
  return {
    attributes: {
      request: { http: { method: spec.method ?? "GET", path: spec.path, host: spec.authority, headers: { ":authority": spec.authority, ...spec.headers } } },
      context_extensions: spec.extensions ?? {},
    },
  };
}

/** `allowed as <policy>[/<service>]`, `<status> <reason>`, or `preflight <status>` with its headers. */
async function outcome(check: typeof requestMode, spec: Spec): Promise<string> {
  const res = await check(message(spec));
  const headers = Object.fromEntries((res.ok_response?.headers ?? res.denied_response?.headers ?? []).map((h) => [h.header.key, h.header.value]));
  if (res.status.code === 0) return `allowed as ${headers["x-decided-as"]}`;
  const status = res.denied_response!.status.code;
  if (headers["x-portcullis-reason"] === undefined) return `preflight ${status}`;
  return `${status} ${headers["x-portcullis-reason"]}`;
}

const KUBE = "kube-api-proxy.fundament.io";
const PLUGINS = "plugin-proxy.fundament.io";
const API = "api.fundament.io";
const AUTHN = "authn.fundament.io";
const KONFIDENCE = "konfidence.fundament.io";
const POD = `/clusters/${C1}/api/v1/namespaces/team-a/pods/web-0`;

describe("request mode: the policy from the route table", () => {
  const rows: Array<[name: string, spec: Spec, expected: string]> = [
    ["kube-api-proxy", { authority: KUBE, path: POD }, "allowed as kube-api-proxy"],
    ["kube-api-proxy, query aside", { authority: KUBE, path: `${POD}?watch=1&fieldSelector=a%3Db` }, "allowed as kube-api-proxy"],
    ["kube-api-proxy, host case and port", { authority: "Kube-API-Proxy.Fundament.IO:443", path: POD }, "allowed as kube-api-proxy"],
    ["plugin-proxy", { authority: PLUGINS, path: "/installations/abc/runtime/x" }, "allowed as plugin-proxy"],
    ["plugin-assets", { authority: PLUGINS, path: "/plugins/p/1.0.0/console/index.html" }, "allowed as plugin-assets"],
    ["konfidence-api", { authority: KONFIDENCE, path: "/api/v1/projects/p/stages" }, "allowed as konfidence-api"],
    ["public, exact path", { authority: API, path: "/organization.v1.PluginService/GetPluginDefinition" }, "allowed as public/organization-api"],
    ["public, exact path with a query", { authority: API, path: "/organization.v1.PluginService/GetPluginDefinition?connect=v1" }, "allowed as public/organization-api"],
    ["platform-api, under the prefix", { authority: API, path: "/organization.v1.PluginService/DeletePlugin" }, "allowed as platform-api/organization-api"],
    ["platform-api, the other service on the host", { authority: API, path: "/dcim.v1.RackService/List" }, "allowed as platform-api/dcim-api"],
    ["platform-api, a segment prefix", { authority: AUTHN, path: "/logout" }, "allowed as platform-api/authn-api"],
    ["platform-api, MintPluginToken is never public", { authority: AUTHN, path: "/authn.v1.TokenService/MintPluginToken" }, "allowed as platform-api/authn-api"],
    // Unknown hosts and paths: no policy, whatever the path would be elsewhere.
    ["unknown host", { authority: "evil.example", path: POD }, "403 no-policy"],
    ["no authority", { authority: "", path: POD }, "403 no-policy"],
    ["a trailing dot", { authority: `${KUBE}.`, path: POD }, "403 no-policy"],
    ["an IPv6 literal", { authority: "[::1]:443", path: POD }, "403 no-policy"],
    ["a non-numeric port", { authority: `${KUBE}:https`, path: POD }, "403 no-policy"],
    ["kube path on the plugin host", { authority: PLUGINS, path: POD }, "403 no-policy"],
    ["platform path on another platform host", { authority: AUTHN, path: "/dcim.v1.RackService/List" }, "403 no-policy"],
    ["an unrouted path on a platform host", { authority: API, path: "/" }, "403 no-policy"],
    ["case of the path", { authority: KUBE, path: POD.replace("/clusters/", "/Clusters/") }, "403 no-policy"],
    ["the prefix without its slash", { authority: KUBE, path: "/clusters" }, "403 no-policy"],
    ["an escaped letter (Envoy would have decoded it; no route here)", { authority: KUBE, path: POD.replace("/clusters/", "/%63lusters/") }, "403 no-policy"],
    // The gateway's word wins where it gives one.
    ["context_extensions name the policy", { authority: "evil.example", path: POD, extensions: { policy: "kube-api-proxy" } }, "allowed as kube-api-proxy"],
    ["context_extensions name another policy than the table", { authority: API, path: "/dcim.v1.RackService/List", extensions: { policy: "public", service: "dcim-api" } }, "allowed as public/dcim-api"],
    ["context_extensions with a service only: the table decides", { authority: API, path: "/dcim.v1.RackService/List", extensions: { service: "organization-api" } }, "allowed as platform-api/dcim-api"],
  ];
  it.each(rows)("%s → %s", async (_name, spec, expected) => {
    expect(await outcome(requestMode, spec)).toBe(expected);
  });
});

describe("request mode refuses what Envoy would not have passed on (400 bad-request, before any policy)", () => {
  const paths: Array<[name: string, path: string]> = [
    ["%2F", `/clusters/${C1}/api/v1/namespaces/team-a%2Fkube-system/pods`],
    ["%2f", `/clusters/${C1}%2fapi/v1/pods`],
    ["%5C", `/clusters/${C1}/api/v1/namespaces/a%5Cb/pods`],
    ["%5c", `/clusters/${C1}/api/v1/namespaces/a%5cb/pods`],
    ["//", `/clusters/${C1}//api/v1/pods`],
    ["a leading //", `//clusters/${C1}/api/v1/pods`],
    ["..", `/clusters/${C1}/api/v1/../../other/api`],
    [".", `/clusters/${C1}/./api/v1/pods`],
    ["%2e%2e", `/clusters/${C1}/api/v1/%2e%2e/pods`],
    ["%2E.", `/clusters/${C1}/api/%2E./v1/pods`],
    ["an undecodable escape", `/clusters/${C1}/api/v1/namespaces/%zz/pods`],
    ["a trailing ..", `/clusters/${C1}/api/..`],
  ];
  it.each(paths)("a path with %s", async (_name, path) => {
    expect(await outcome(requestMode, { authority: KUBE, path })).toBe("400 bad-request");
    // Even where the gateway names the policy, and on an unknown host.
    expect(await outcome(requestMode, { authority: KUBE, path, extensions: { policy: "kube-api-proxy" } })).toBe("400 bad-request");
    expect(await outcome(requestMode, { authority: "evil.example", path })).toBe("400 bad-request");
  });

  it("answers with the chosen policy's body shape (a Kubernetes Status on kube-api-proxy)", async () => {
    const res = await requestMode(message({ authority: KUBE, path: `/clusters/${C1}%2Fapi` }));
    expect(JSON.parse(res.denied_response!.body)).toMatchObject({ kind: "Status", code: 400, details: { causes: [{ reason: "bad-request" }] } });
    const platform = await requestMode(message({ authority: API, path: "/dcim.v1.X%2FY/Z" }));
    expect(JSON.parse(platform.denied_response!.body)).toEqual({ error: { code: "bad-request", message: "an escaped / or \\ in the path" } });
  });

  const headers: Array<[name: string, header: string]> = [
    ["x_fundament_user_id", "x_fundament_user_id"],
    ["x-fundament_user-id", "x-fundament_user-id"],
    ["x_fundament-organization-ids", "x_fundament-organization-ids"],
    ["x_konfidence_project", "x_konfidence_project"],
    ["x-konfidence_roles", "x-konfidence_roles"],
    ["x_fundament_kube_api_cluster", "x_fundament_kube_api_cluster"],
  ];
  it.each(headers)("a header %s", async (_name, header) => {
    expect(await outcome(requestMode, { authority: API, path: "/dcim.v1.X/Y", headers: { [header]: "u" } })).toBe("400 bad-request");
  });

  it.each(["x_request_id", "x-fundamental-thing", "my_header", "x_fundamentx_user", "x-fundament-user-id"])("passes %s on to the policy", async (header) => {
    expect(await outcome(requestMode, { authority: API, path: "/dcim.v1.X/Y", headers: { [header]: "u" } })).toBe("allowed as platform-api/dcim-api");
  });
});

describe("request mode answers CORS preflights as Envoy's CORS filter does", () => {
  const preflight = (authority: string, path: string, origin: string, extra: Record<string, string> = {}): Spec => ({
    authority,
    path,
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization", ...extra },
  });
  const headersOf = async (spec: Spec) => {
    const res = await requestMode(message(spec));
    return { grpc: res.status.code, status: res.denied_response?.status.code, body: res.denied_response?.body, headers: Object.fromEntries((res.denied_response?.headers ?? []).map((h) => [h.header.key, h.header.value])) };
  };
  const PLUGIN_ORIGIN = "https://plugin-proxy.fundament.io";
  const CONSOLE = "https://console.fundament.io";
  const pluginPage = {
    "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
    "access-control-allow-headers": "authorization, content-type, accept, x-request-id",
    "access-control-max-age": "600",
  };
  const console = {
    "access-control-allow-credentials": "true",
    "access-control-allow-methods": "GET, POST",
    "access-control-allow-headers": "authorization, content-type, connect-protocol-version, connect-timeout-ms, x-user-agent, x-request-id",
    "access-control-max-age": "600",
  };

  it.each([
    { name: "kube-api-proxy from a plugin page", spec: preflight(KUBE, POD, PLUGIN_ORIGIN), headers: { "access-control-allow-origin": PLUGIN_ORIGIN, ...pluginPage } },
    { name: "plugin-proxy from a plugin page", spec: preflight(PLUGINS, "/installations/x/runtime/y", PLUGIN_ORIGIN), headers: { "access-control-allow-origin": PLUGIN_ORIGIN, ...pluginPage } },
    { name: "the assets' route too", spec: preflight(PLUGINS, "/plugins/p/1/console/x.js", PLUGIN_ORIGIN), headers: { "access-control-allow-origin": PLUGIN_ORIGIN, ...pluginPage } },
    { name: "kube-api-proxy from another origin: no allow-origin", spec: preflight(KUBE, POD, "https://evil.example"), headers: pluginPage },
    { name: "an origin differing in case only", spec: preflight(KUBE, POD, "https://Plugin-Proxy.fundament.io"), headers: pluginPage },
    { name: "the Console's origin on kube-api-proxy", spec: preflight(KUBE, POD, CONSOLE), headers: pluginPage },
    { name: "a platform service from the Console", spec: preflight(API, "/dcim.v1.X/Y", CONSOLE), headers: { "access-control-allow-origin": CONSOLE, ...console } },
    { name: "a public path from the Console", spec: preflight(API, "/organization.v1.PluginService/GetPluginDefinition", CONSOLE), headers: { "access-control-allow-origin": CONSOLE, ...console } },
    { name: "an unrouted platform path (Envoy's catch-all route has the policy)", spec: preflight(API, "/nothing", CONSOLE), headers: { "access-control-allow-origin": CONSOLE, ...console } },
    { name: "a platform service from a plugin page", spec: preflight(API, "/dcim.v1.X/Y", PLUGIN_ORIGIN), headers: console },
    { name: "even where the gateway names a policy", spec: { ...preflight(KUBE, POD, PLUGIN_ORIGIN), extensions: { policy: "kube-api-proxy" } }, headers: { "access-control-allow-origin": PLUGIN_ORIGIN, ...pluginPage } },
  ])("$name", async ({ spec, headers }) => {
    // A denied_response of 200 with exactly these headers and no body: nothing forwarded, no credential read.
    expect(await headersOf(spec)).toEqual({ grpc: 7, status: 200, body: "", headers });
  });

  it.each([
    { name: "Konfidence (no CORS policy on its host): its policy decides", spec: preflight(KONFIDENCE, "/api/v1/projects", "https://konfidence-ui.example"), expected: "allowed as konfidence-api" },
    { name: "a kube-api-proxy host path no route takes", spec: preflight(KUBE, "/other", PLUGIN_ORIGIN), expected: "403 no-policy" },
    { name: "an unknown host", spec: preflight("evil.example", POD, PLUGIN_ORIGIN), expected: "403 no-policy" },
    { name: "no Access-Control-Request-Method", spec: preflight(KUBE, POD, PLUGIN_ORIGIN, { "access-control-request-method": "" }), expected: "allowed as kube-api-proxy" },
    { name: "no Origin", spec: preflight(KUBE, POD, ""), expected: "allowed as kube-api-proxy" },
    { name: "method `options` (methods are case-sensitive)", spec: { ...preflight(KUBE, POD, PLUGIN_ORIGIN), method: "options" }, expected: "allowed as kube-api-proxy" },
    { name: "a refused path first", spec: preflight(KUBE, `/clusters/${C1}%2Fapi`, PLUGIN_ORIGIN), expected: "400 bad-request" },
  ])("not answered: $name", async ({ spec, expected }) => {
    expect(await outcome(requestMode, spec)).toBe(expected);
  });
});

describe("request mode adds Envoy's CORS response headers for the allowed origin", () => {
  const PLUGIN_ORIGIN = "https://plugin-proxy.fundament.io";
  const CONSOLE = "https://console.fundament.io";
  const EXPOSE = "www-authenticate, retry-after, x-portcullis-reason";
  const cors = async (check: typeof requestMode, spec: Spec) => {
    const res = await check(message(spec));
    const options = res.ok_response?.response_headers_to_add ?? res.denied_response?.headers ?? [];
    return Object.fromEntries(options.filter((h) => h.header.key.startsWith("access-control-")).map((h) => [h.header.key, h.header.value]));
  };
  it.each([
    { name: "an allow on kube-api-proxy, for the upstream's response", spec: { authority: KUBE, path: POD, headers: { origin: PLUGIN_ORIGIN } }, expected: { "access-control-allow-origin": PLUGIN_ORIGIN, "access-control-expose-headers": EXPOSE } },
    {
      name: "an allow on a platform service, with credentials",
      spec: { authority: API, path: "/dcim.v1.X/Y", headers: { origin: CONSOLE } },
      expected: { "access-control-allow-origin": CONSOLE, "access-control-allow-credentials": "true", "access-control-expose-headers": EXPOSE },
    },
    {
      name: "a denial (the platform catch-all), so browser code reads why",
      spec: { authority: API, path: "/nothing", headers: { origin: CONSOLE } },
      expected: { "access-control-allow-origin": CONSOLE, "access-control-allow-credentials": "true", "access-control-expose-headers": EXPOSE },
    },
    { name: "another origin: none", spec: { authority: KUBE, path: POD, headers: { origin: "https://evil.example" } }, expected: {} },
    { name: "no origin: none", spec: { authority: KUBE, path: POD }, expected: {} },
    { name: "Konfidence (no CORS policy): none", spec: { authority: KONFIDENCE, path: "/api/v1/projects", headers: { origin: PLUGIN_ORIGIN } }, expected: {} },
    { name: "a path no route takes: none", spec: { authority: KUBE, path: "/other", headers: { origin: PLUGIN_ORIGIN } }, expected: {} },
    { name: "a refused path (Envoy rejects it before CORS): none", spec: { authority: KUBE, path: `/clusters/${C1}%2Fapi`, headers: { origin: PLUGIN_ORIGIN } }, expected: {} },
  ])("$name", async ({ spec, expected }) => {
    expect(await cors(requestMode, spec)).toEqual(expected);
  });

  it("none in contextExtensions mode (Envoy's CORS filter adds them)", async () => {
    expect(await cors(extensionsMode, { authority: KUBE, path: POD, headers: { origin: PLUGIN_ORIGIN }, extensions: { policy: "kube-api-proxy" } })).toEqual({});
  });

  it("encodes as Envoy's CheckResponse (response_headers_to_add on OkHttpResponse)", async () => {
    const type = envoyRoot().lookupType("envoy.service.auth.v3.CheckResponse");
    const res = await requestMode(message({ authority: KUBE, path: POD, headers: { origin: PLUGIN_ORIGIN } }));
    expect(type.verify(res)).toBeNull();
    const decoded = type.toObject(type.decode(type.encode(type.fromObject(res)).finish())) as typeof res;
    expect(decoded.ok_response?.response_headers_to_add?.map((h) => h.header.key)).toEqual(["access-control-allow-origin", "access-control-expose-headers"]);
  });
});

describe("request mode, adversarially: what it lets through is what the table routes", () => {
  const find = routeFinder(TABLE);
  const segment = fc.constantFrom("clusters", C1, "api", "v1", "installations", "runtime", "plugins", "dcim.v1.X", "login", "authn.v1.TokenService", "ExchangeToken", "", ".", "..", "%2e%2e", "%2F", "%5c", "%41", "%zz", "Clusters", "a b", "x;y", "?", "#");
  const authority = fc.oneof(
    fc.constantFrom(...TABLE.hosts.map((h) => h.host)).chain((h) => fc.constantFrom(h, h.toUpperCase(), `${h}:443`, `${h}.`, `${h}:x`, `[${h}]`, ` ${h}`)),
    fc.string({ maxLength: 30 }),
  );
  const header = fc.constantFrom("x_fundament_user_id", "x-fundament_cluster-id", "X_KONFIDENCE_ROLES", "x_request_id", "origin", "access-control-request-method", "authorization");
  it("never throws, allows only routed safe requests as the table's policy, answers preflights only with a bodiless 200", async () => {
    await fc.assert(
      fc.asyncProperty(
        authority,
        fc.array(segment, { maxLength: 6 }),
        fc.dictionary(header, fc.constantFrom("", "u", "https://plugin-proxy.fundament.io", "GET")),
        fc.constantFrom("GET", "OPTIONS", "options", "POST"),
        async (host, segments, headers, method) => {
          const path = `/${segments.join("/")}`;
          const res = await requestMode(message({ authority: host, path, method, headers }));
          const plain = path.split(/[?#]/)[0]!;
          if (res.status.code === 0) {
            const route = find(host, plain).route;
            expect(route?.policy).toBeDefined();
            expect(unsafePath(plain)).toBeUndefined();
            expect(Object.keys(headers).some((h) => h.includes("_") && /^x-(fundament|konfidence)-/i.test(h.replaceAll("_", "-")))).toBe(false);
            const decidedAs = res.ok_response!.headers.find((h) => h.header.key === "x-decided-as")!.header.value;
            expect(decidedAs).toBe([route!.policy, route!.service].filter((x) => x !== undefined).join("/"));
          } else if (res.denied_response!.headers.every((h) => h.header.key !== "x-portcullis-reason")) {
            expect(method).toBe("OPTIONS");
            expect(res.denied_response).toMatchObject({ status: { code: 200 }, body: "" });
            expect(find(host, plain).host?.cors).toBeDefined();
          }
        },
      ),
      { numRuns: 3000 },
    );
  });
});

describe("contextExtensions mode (the default) is as before", () => {
  it.each([
    ["no context extension, a routed host and path", { authority: KUBE, path: POD }, "403 no-policy"],
    ["an escaped slash goes to the policy (the generated Envoy refused it already)", { authority: KUBE, path: `/clusters/${C1}%2Fapi`, extensions: { policy: "kube-api-proxy" } }, "allowed as kube-api-proxy"],
    ["a dot segment goes to the policy", { authority: KUBE, path: `/clusters/${C1}/api/../x`, extensions: { policy: "kube-api-proxy" } }, "allowed as kube-api-proxy"],
    ["an underscore header goes to the policy", { authority: API, path: "/dcim.v1.X/Y", headers: { x_fundament_user_id: "u" }, extensions: { policy: "platform-api", service: "dcim-api" } }, "allowed as platform-api/dcim-api"],
    [
      "a preflight goes to the policy",
      { authority: KUBE, path: POD, method: "OPTIONS", headers: { origin: "https://plugin-proxy.fundament.io", "access-control-request-method": "GET" }, extensions: { policy: "kube-api-proxy" } },
      "allowed as kube-api-proxy",
    ],
  ] satisfies Array<[string, Spec, string]>)("%s", async (_name, spec, expected) => {
    expect(await outcome(extensionsMode, spec)).toBe(expected);
  });
});

describe("configurations whose route table is ambiguous are refused, naming both routes", () => {
  const base = (envoy: Record<string, unknown> = {}, rest: Record<string, unknown> = {}) => ({
    tokens: { secrets: [{ env: "S" }] },
    openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
    clusters: [{ id: C1 }],
    ...rest,
    envoy: {
      origins: { console: "https://console.example", kubeApiProxy: "https://kube.example", pluginProxy: "https://plugins.example" },
      clusters: [{ id: C1, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" }],
      upstreams: { assets: { url: "http://assets:8080" } },
      ...envoy,
    },
  });
  const entry = (name: string, origin = "https://api.example") => ({ name, origin, upstream: { url: `http://${name}:8080` } });
  const problems = (config: unknown): string[] => {
    try {
      parseConfig(stringify(config), "test.yaml");
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return err.message.split("\n").slice(1).map((l) => l.trim());
    }
    return [];
  };

  it.each([
    {
      name: "kube-api-proxy and plugin-proxy on one host",
      config: base({ origins: { console: "https://console.example", kubeApiProxy: "https://edge.example", pluginProxy: "https://EDGE.example:8443" } }),
      expected: ["envoy.origins.pluginProxy: https://EDGE.example:8443 (envoy.origins.pluginProxy) has the host of https://edge.example (envoy.origins.kubeApiProxy): edge.example would be served twice"],
    },
    {
      name: "Konfidence on plugin-proxy's host",
      config: base(
        { origins: { console: "https://console.example", kubeApiProxy: "https://kube.example", pluginProxy: "https://plugins.example", konfidence: "https://plugins.example" }, upstreams: { assets: { url: "http://assets:8080" }, konfidence: { url: "http://k:8080" } } },
      ),
      expected: [/^envoy\.origins\.konfidence: https:\/\/plugins\.example \(envoy\.origins\.konfidence\) has the host of https:\/\/plugins\.example \(envoy\.origins\.pluginProxy\)/],
    },
    {
      name: "a route listed twice by one service",
      config: base({ platform: [entry("a-api")] }, { platform: { services: [{ name: "a-api", routes: ["/a.v1.", "/a.v1."] }] } }),
      expected: ['platform.services[0].routes[1]: route "a-api /a.v1." (platform.services[0].routes[1]) and route "a-api /a.v1." (platform.services[0].routes[0]) both match /a.v1. on api.example'],
    },
    {
      name: "a service's routes overlapping each other",
      config: base({ platform: [entry("a-api")] }, { platform: { services: [{ name: "a-api", routes: ["/login", "/login/password"] }] } }),
      expected: ['platform.services[0].routes[1]: route "a-api /login/password" (platform.services[0].routes[1]) and route "a-api /login" (platform.services[0].routes[0]) both match /login/password on api.example'],
    },
    {
      name: "request mode without an envoy section",
      config: { tokens: { secrets: [{ env: "S" }] }, openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" }, check: { policyFrom: "request" } },
      expected: ["check.policyFrom: request mode chooses policies from the route table built from the envoy section (origins, platform): add it"],
    },
    {
      name: "an unknown mode",
      config: base({}, { check: { policyFrom: "host" } }),
      expected: ['check.policyFrom: Invalid option: expected one of "contextExtensions"|"request"'],
    },
  ])("$name", ({ config, expected }) => {
    const lines = problems(config);
    expect(lines).toHaveLength(expected.length);
    expected.forEach((e, i) => (typeof e === "string" ? expect(lines[i]).toBe(e) : expect(lines[i]).toMatch(e)));
  });

  it("accepts the shipped example in request mode", () => {
    expect(problems({ ...parseYamlExample(), check: { policyFrom: "request" } })).toEqual([]);
  });

  const dir = mkdtempSync(join(tmpdir(), "portcullis-request-mode-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  it("validate-config exits 2 for an ambiguous table, naming both routes", async () => {
    const path = join(dir, "ambiguous.yaml");
    writeFileSync(path, stringify(base({ platform: [entry("a-api"), entry("b-api")] }, { platform: { services: [{ name: "a-api", routes: ["/x.v1."] }, { name: "b-api", routes: ["/x.v1.S/"] }] } })));
    const res = await cli(["validate-config", "--file-only", path]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("  envoy.platform[1].origin: b-api's route /x.v1.S/ overlaps a-api's /x.v1. on api.example");
  });
});

/** The example as written (the parsed Config holds defaults a file may not repeat, such as port-0 listeners). */
function parseYamlExample(): Record<string, unknown> {
  return parse(readFileSync(resolve(ROOT, "deploy/examples/portcullis.yaml"), "utf8")) as Record<string, unknown>;
}
