/**
 * Request mode agrees with Envoy's routing. For the bootstrap `portcullis envoy-config` generates
 * (decoded with the project's own strict Envoy proto decoding, Anys unpacked, as Envoy would load
 * it), every route yields requests — hosts in every case, with ports, trailing dots, IPv6, unknown
 * names; paths at, inside, beside and just outside each matcher, in other case, with queries,
 * trailing slashes, encodings, `//` and dot segments; with and without the routing headers a client
 * could send — and for each, the policy and service Envoy's first match names (THE ORACLE below)
 * must be the one the route table chooses, CORS preflights must be answered exactly where Envoy's
 * CORS filter answers them, with the same policy, and every path Envoy would rewrite or reject is
 * refused by request mode.
 *
 * THE ORACLE: Envoy's matching semantics for exactly the matchers the generated configuration uses,
 * over the decoded protos (anything else it meets fails the test, so it cannot silently grow stale):
 *  - virtual host: the authority lower-cased, `:port` stripped (strip_any_host_port), equal to one
 *    of the domains (the generated domains are exact names: no wildcard, asserted);
 *  - route: the first whose path matcher and header matchers all match. `prefix` against the whole
 *    :path (query included), `path` (exact) and `path_separated_prefix` against the path without
 *    its query, `safe_regex` a full match of the path without its query (RE2; the generated regexes
 *    mean the same in JavaScript); case-sensitive (case_sensitive unset, asserted); header matchers
 *    `present_match` and `string_match.exact`;
 *  - the answer: the route's ExtAuthzPerRoute context_extensions (policy, service); a route with
 *    ext_authz disabled, or no route, or no host, is "no policy" (Envoy answers 404 without asking,
 *    portcullis asked anyway answers no-policy);
 *  - preflight: Envoy's CORS filter answers it iff a route matched and its virtual host has a CorsPolicy.
 */
import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import type protobuf from "protobufjs";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { requestRouter, unsafePath } from "../../src/authz/request-mode.ts";
import { buildRouteTable, type CorsPolicy, type RouteTable, routeFinder } from "../../src/config/route-table.ts";
import { loadConfig, parseConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/schema.ts";
import { renderEnvoyYaml } from "../../src/deploy/envoy-config.ts";
import { decodeBootstrap, envoyRoot } from "../../src/envoy/bootstrap.ts";
import type { HttpRequest } from "../../src/envoy/check-request.ts";

const ROOT = resolve(import.meta.dirname, "../..");
type Json = Record<string, any>;

/** An Any, unpacked with its own type, as plain JSON-ish data (proto field names, enums as strings). */
function unpack(any: Json): Json {
  const type = envoyRoot().lookupType(String(any["type_url"]).replace(/^type\.googleapis\.com\//, ""));
  return type.toObject(type.decode(any["value"] as Uint8Array), { enums: String, longs: String, defaults: false }) as Json;
}

interface DecodedRoute {
  readonly name: string;
  readonly match: Json;
  /** undefined: ext_authz disabled on the route, or no per-route config. */
  readonly answer: { policy: string; service: string | undefined } | undefined;
}
interface DecodedHost {
  readonly domains: string[];
  readonly cors: Json | undefined;
  readonly routes: DecodedRoute[];
}
interface DecodedEnvoy {
  readonly stripAnyHostPort: boolean;
  readonly hcm: Json;
  readonly hosts: DecodedHost[];
}

const EXT_AUTHZ = "envoy.filters.http.ext_authz";
const CORS = "envoy.filters.http.cors";

/** The generated bootstrap, decoded strictly (as Envoy would load it) and read back. */
function decodedEnvoy(config: Config): DecodedEnvoy {
  const result = decodeBootstrap(renderEnvoyYaml(config));
  if (!result.ok) throw new Error(result.errors.join("\n"));
  const bootstrap = (result.message as protobuf.Message & Json).toJSON() as Json;
  expect(bootstrap["static_resources"].listeners).toHaveLength(1);
  const raw = (result.message as unknown as Json)["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config;
  const hcm = unpack(raw);
  return {
    stripAnyHostPort: hcm["strip_any_host_port"] === true,
    hcm,
    hosts: (hcm["route_config"].virtual_hosts as Json[]).map((v) => ({
      domains: v["domains"] as string[],
      cors: v["typed_per_filter_config"]?.[CORS] === undefined ? undefined : unpack(v["typed_per_filter_config"][CORS]),
      routes: (v["routes"] as Json[]).map((r) => {
        const authz = r["typed_per_filter_config"]?.[EXT_AUTHZ] === undefined ? undefined : unpack(r["typed_per_filter_config"][EXT_AUTHZ]);
        const extensions = authz?.["check_settings"]?.context_extensions as Record<string, string> | undefined;
        return {
          name: r["name"] as string,
          match: r["match"] as Json,
          answer: authz === undefined || authz["disabled"] === true || extensions?.["policy"] === undefined ? undefined : { policy: extensions["policy"], service: extensions["service"] },
        };
      }),
    })),
  };
}

interface Probe {
  readonly authority: string;
  /** :path, query included. */
  readonly target: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** Envoy's host for virtual host matching (see THE ORACLE). */
function envoyHost(envoy: DecodedEnvoy, authority: string): string {
  const lower = authority.toLowerCase();
  if (!envoy.stripAnyHostPort) return lower;
  // Envoy strips the part after the last colon, but leaves an IPv6 literal's inner colons alone.
  const colon = lower.lastIndexOf(":");
  if (colon === -1 || (lower.startsWith("[") && lower.lastIndexOf("]") > colon)) return lower;
  if (!lower.startsWith("[") && lower.indexOf(":") !== colon) return lower;
  return lower.slice(0, colon);
}

function pathMatches(match: Json, target: string): boolean {
  const path = target.split("?")[0]!;
  expect(match["case_sensitive"]).toBeUndefined();
  if (match["prefix"] !== undefined) return target.startsWith(match["prefix"]);
  if (match["path"] !== undefined) return path === match["path"];
  if (match["path_separated_prefix"] !== undefined) return path === match["path_separated_prefix"] || path.startsWith(`${match["path_separated_prefix"]}/`);
  if (match["safe_regex"] !== undefined) return new RegExp(`^(?:${match["safe_regex"].regex})$`).test(path);
  throw new Error(`the oracle does not know this matcher: ${JSON.stringify(match)}`);
}

function headersMatch(match: Json, headers: Readonly<Record<string, string>>): boolean {
  return ((match["headers"] ?? []) as Json[]).every((h) => {
    const value = headers[h["name"]];
    if (h["present_match"] === true) return value !== undefined;
    if (h["string_match"]?.exact !== undefined) return value === h["string_match"].exact;
    throw new Error(`the oracle does not know this header matcher: ${JSON.stringify(h)}`);
  });
}

/** Envoy's first match: the virtual host, the route (or none), and the answer it names. */
function envoyRoutes(envoy: DecodedEnvoy, probe: Probe): { host: DecodedHost | undefined; route: DecodedRoute | undefined } {
  const name = envoyHost(envoy, probe.authority);
  const host = envoy.hosts.find((h) => h.domains.includes(name));
  return { host, route: host?.routes.find((r) => pathMatches(r.match, probe.target) && headersMatch(r.match, probe.headers)) };
}

const show = (a: { policy: string | undefined; service: string | undefined } | undefined) =>
  a?.policy === undefined ? "no-policy" : a.service === undefined ? a.policy : `${a.policy}/${a.service}`;

/** Paths around one matcher: at it, inside, beside, just outside, in other case, with a query, encoded. */
function pathsAround(match: Json, clusterIds: readonly string[]): string[] {
  const variants = (p: string) => [p, `${p}x`, `${p}/`, `${p}/a/b`, p.slice(0, -1), p.toUpperCase(), p.toLowerCase(), `${p}?a=b`, `${p}/?a=b`, `${p}%41`];
  if (match["prefix"] !== undefined) return variants(match["prefix"]);
  if (match["path"] !== undefined) return variants(match["path"]);
  if (match["path_separated_prefix"] !== undefined) return variants(match["path_separated_prefix"]);
  if (match["safe_regex"] !== undefined) {
    // The generated regexes are under /clusters/ and /installations/: paths that exercise them.
    const ids = [...clusterIds, randomUUID(), "x"];
    return ids.flatMap((id) => [
      `/clusters/${id}/api/v1/pods`,
      `/clusters/${id}/`,
      `/clusters/${id}`,
      `/installations/${id}/runtime`,
      `/installations/${id}/runtime/`,
      `/installations/${id}/runtime/a?b=c`,
      `/installations/${id}/controller/x`,
      `/installations/${id}/controllers/x`,
      `/installations/${id}/other`,
      `/installations/${id}`,
    ]);
  }
  throw new Error(`the oracle does not know this matcher: ${JSON.stringify(match)}`);
}

/** Authorities around one virtual host's domain. */
function authoritiesAround(domain: string): string[] {
  return [domain, domain.toUpperCase(), `${domain}:443`, `${domain}:8443`, `${domain}.`, `${domain}.:443`, `evil.${domain}`, `${domain}.evil.example`, `${domain.slice(1)}`];
}

/** Headers a client may send before the check (matched by routes that read what portcullis sets). */
function headerSets(clusterIds: readonly string[]): Array<Record<string, string>> {
  return [
    {},
    ...clusterIds.map((id) => ({ "x-fundament-kube-api-cluster": `kube-api-${id}`, "x-fundament-cluster-id": id })),
    { "x-fundament-kube-api-cluster": "anything", "x-fundament-cluster-id": randomUUID() },
    // A registered cluster's Services' domain (plugin-proxy's shared route).
    { "x-fundament-upstream-domain": "svc.registered.example", "x-fundament-cluster-id": randomUUID() },
  ];
}

function probesFor(envoy: DecodedEnvoy, clusterIds: readonly string[]): Probe[] {
  const authorities = ["unknown.example", "[::1]", "[::1]:443", "10.0.0.1", "", ...envoy.hosts.flatMap((h) => h.domains.flatMap(authoritiesAround))];
  const targets = [...new Set(["/", "/x", ...envoy.hosts.flatMap((h) => h.routes.flatMap((r) => pathsAround(r.match, clusterIds)))])];
  const probes: Probe[] = [];
  for (const authority of authorities) for (const target of targets) for (const headers of headerSets(clusterIds)) probes.push({ authority, target, headers });
  return probes;
}

function httpRequest(probe: Probe, method = "GET", extra: Record<string, string> = {}): HttpRequest {
  const path = probe.target.split("?")[0]!;
  return { method, path, query: new URLSearchParams(), rawQuery: "", headers: { ...probe.headers, ...extra }, authority: probe.authority, requestId: "r", contextExtensions: {} };
}

function corsOf(decoded: Json): CorsPolicy {
  return {
    allowOrigin: decoded["allow_origin_string_match"][0].exact,
    allowMethods: decoded["allow_methods"],
    allowHeaders: decoded["allow_headers"],
    exposeHeaders: decoded["expose_headers"],
    maxAgeSeconds: Number(decoded["max_age"]),
    allowCredentials: decoded["allow_credentials"]?.value === true,
  };
}

const example = () => loadConfig(resolve(ROOT, "deploy/examples/portcullis.yaml"));
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const C2 = "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c";
/** A second shape: no Konfidence, ports in origins, upper case, services sharing and not sharing origins, segment prefixes. */
const variant = () =>
  parseConfig(
    stringify({
      tokens: { secrets: [{ env: "S" }] },
      openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
      clusters: [{ id: C1 }, { id: C2 }],
      platform: {
        services: [
          { name: "a-api", routes: ["/a.v1.", "/login", "/oauth/"], public: ["/a.v1.S/Public", "/login"] },
          { name: "b-api", routes: ["/b.v1.Svc/", "/logout"], public: ["/b.v1.Svc/Open"] },
          { name: "c-api", routes: ["/login", "/c"] },
        ],
      },
      envoy: {
        origins: { console: "https://Console.example", kubeApiProxy: "https://Kube.Example:8443", pluginProxy: "https://plugins.example:8443" },
        clusters: [
          { id: C1, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" },
          { id: C2, apiServer: "https://api.c2.example:6443", caFile: "/c2.crt", serviceDomain: "svc.c2.internal" },
        ],
        upstreams: { assets: { url: "http://assets:8080" } },
        platform: [
          { name: "a-api", origin: "https://api.example", upstream: { url: "http://a:8080" } },
          { name: "b-api", origin: "https://API.example:443", upstream: { url: "http://b:8080" } },
          { name: "c-api", origin: "https://c.example", upstream: { url: "http://c:8080" } },
        ],
      },
    }),
  );

describe.each([
  { name: "deploy/examples/portcullis.yaml", config: example },
  { name: "a variant (no Konfidence, ports, upper case, shared and separate platform origins)", config: variant },
])("the route table agrees with Envoy's routing over the generated bootstrap: $name", ({ config }) => {
  const c = config();
  const envoy = decodedEnvoy(c);
  const table: RouteTable = buildRouteTable({ envoy: c.envoy!, platform: c.platform });
  const find = routeFinder(table);
  const route = requestRouter(table);
  const clusterIds = c.envoy!.clusters.map((x) => x.id);
  const probes = probesFor(envoy, clusterIds);

  it("is what the oracle knows: exact lower-case domains, one per virtual host; the connection manager as the oracle assumes", () => {
    for (const h of envoy.hosts) {
      expect(h.domains).toHaveLength(1);
      expect(h.domains[0]).toMatch(/^[a-z0-9.-]+$/);
    }
    expect(envoy.hcm).toMatchObject({ strip_any_host_port: true, normalize_path: { value: true }, merge_slashes: true, path_with_escaped_slashes_action: "REJECT_REQUEST" });
    expect(envoy.hosts.map((h) => h.domains[0])).toEqual(table.hosts.map((h) => h.host));
  });

  it("names the same policy and service for every probe", () => {
    expect(probes.length).toBeGreaterThan(1000);
    const disagreements: string[] = [];
    let routed = 0;
    for (const probe of probes) {
      if (unsafePath(probe.target.split("?")[0]!) !== undefined) continue;
      const byEnvoy = envoyRoutes(envoy, probe).route?.answer;
      const byTable = find(probe.authority, probe.target.split("?")[0]!).route;
      if (byEnvoy !== undefined) routed++;
      if (show(byEnvoy) !== show(byTable)) disagreements.push(`${probe.authority} ${probe.target} ${JSON.stringify(probe.headers)}: Envoy ${show(byEnvoy)}, table ${show(byTable)}`);
    }
    expect(disagreements.slice(0, 20)).toEqual([]);
    // Every route that names a policy was reached by some probe, so none went unchecked.
    const reached = new Set(probes.map((p) => envoyRoutes(envoy, p).route?.name));
    for (const h of envoy.hosts) for (const r of h.routes) expect(reached, r.name).toContain(r.name);
    expect(routed).toBeGreaterThan(100);
  });

  it("answers a CORS preflight exactly where Envoy's CORS filter does, with the same policy", () => {
    for (const h of envoy.hosts) {
      const ours = table.hosts.find((t) => t.host === h.domains[0])!;
      expect(ours.cors).toEqual(h.cors === undefined ? undefined : corsOf(h.cors));
    }
    const disagreements: string[] = [];
    for (const probe of probes) {
      if (unsafePath(probe.target.split("?")[0]!) !== undefined) continue;
      const { host, route: envoyRoute } = envoyRoutes(envoy, probe);
      const envoyAnswers = envoyRoute !== undefined && host?.cors !== undefined;
      const ours = route(httpRequest(probe, "OPTIONS", { origin: "https://somewhere.example", "access-control-request-method": "PUT" }));
      if (envoyAnswers !== (ours.kind === "preflight")) disagreements.push(`${probe.authority} ${probe.target}: Envoy ${envoyAnswers}, portcullis ${ours.kind}`);
    }
    expect(disagreements.slice(0, 20)).toEqual([]);
  });

  it("refuses every path Envoy would rewrite or reject (escaped slashes, //, dot segments), on every host", () => {
    const unsafe = ["/a%2Fb", "/a%2fb", "/a%5Cb", "/a%5cb", "//a", "/a//b", "/a/./b", "/a/../b", "/a/%2e%2e/b", "/a/%2E/b", "/a/.."];
    for (const h of envoy.hosts) {
      for (const r of h.routes) {
        const base = pathsAround(r.match, clusterIds)[0]!.split("?")[0]!;
        for (const u of unsafe) {
          const probe = { authority: h.domains[0]!, target: `${base}${u}`, headers: {} };
          expect(route(httpRequest(probe)).kind, probe.target).toBe("refuse");
        }
      }
    }
  });
});
