/**
 * The route table: (authority, path) → (policy, service), built from portcullis's own configuration
 * (`envoy.origins`, `envoy.platform`, `platform.services`). `portcullis envoy-config` builds its
 * virtual hosts and routes from it (src/deploy/envoy-config.ts), and in request mode
 * (`check.policyFrom: request`, for gateways that cannot name the policy per route, such as Istio's
 * CUSTOM ext_authz provider) the checker chooses the policy from it: the two cannot disagree.
 * Pure: no I/O, the same configuration always gives the same table.
 *
 * Semantics, exactly Envoy's for the matchers used (test/config/route-table.envoy-oracle.test.ts
 * holds the table to Envoy's first-match over the generated routes):
 *  - a host is an exact, lower-case DNS name; the request's authority is lower-cased and its port
 *    stripped (Envoy's `strip_any_host_port`); anything else (a trailing dot, an IP literal, a
 *    malformed port) is no host of the table;
 *  - per host, routes are tried in order and the first that matches wins: exact paths first, then
 *    prefixes, then the host's catch-all if it has one. Paths are matched case-sensitively and
 *    without their query, as Envoy's `path`, `prefix` and `path_separated_prefix` do;
 *  - routeTableProblems refuses every table in which that order would decide between two answers:
 *    two hosts with one name, and two routes of one rank that both match some path (a duplicate or
 *    an overlap), so the first match is also the only match of its rank.
 */
import type { PolicyName } from "./policy-names.ts";
import type { EnvoyConfig } from "./envoy-schema.ts";
import type { PlatformService } from "./platform-schema.ts";

/** How a route matches the path (query aside): Envoy's `path`, `prefix` and `path_separated_prefix`. */
export type PathMatch =
  | { readonly kind: "exact"; readonly path: string }
  | { readonly kind: "prefix"; readonly prefix: string }
  /** The prefix itself, or the prefix then `/…`: `/login` matches `/login` and `/login/x`, never `/loginx`. */
  | { readonly kind: "segment-prefix"; readonly prefix: string };

/** Where a route's allowed requests go: what the front proxy builds behind it. */
export type RouteUpstream =
  /** `/clusters/{id}/…` → that cluster's API server, the prefix stripped. */
  | { readonly kind: "kube-api" }
  /** `/installations/{id}/{runtime|controller}/…` → the Service portcullis names in its headers. */
  | { readonly kind: "plugin-services" }
  | { readonly kind: "plugin-assets" }
  | { readonly kind: "konfidence" }
  | { readonly kind: "platform"; readonly service: string }
  /** Nothing serves it: the front proxy answers 404 without asking portcullis. */
  | { readonly kind: "none" };

/** A field of the configuration, as zod issues name it (`["platform", "services", 0, "routes", 1]`). */
export type ConfigPath = ReadonlyArray<string | number>;

export interface TableRoute {
  /** Unique per table; the Envoy route's name where the route is one Envoy route. */
  readonly name: string;
  readonly match: PathMatch;
  /** The policy portcullis applies; undefined where nothing is served (asked anyway, portcullis answers `no-policy`). */
  readonly policy: PolicyName | undefined;
  /** The platform service, for the platform-api and public policies (`context_extensions.service`). */
  readonly service: string | undefined;
  readonly upstream: RouteUpstream;
  /** The configuration field this route comes from, named in configuration errors. */
  readonly field: ConfigPath;
}

/** A browser's cross-origin calls to one host: the one origin admitted, what it may send, what it may read. */
export interface CorsPolicy {
  readonly allowOrigin: string;
  readonly allowMethods: string;
  readonly allowHeaders: string;
  readonly exposeHeaders: string;
  readonly maxAgeSeconds: number;
  readonly allowCredentials: boolean;
}

export interface TableHost {
  /** The Envoy virtual host's name. */
  readonly name: string;
  /** Lower-case DNS name, no port. */
  readonly host: string;
  /** The public origin it comes from (scheme, host, port as configured). */
  readonly origin: string;
  readonly field: ConfigPath;
  /** Preflights on this host's routes are answered with it, before any check; none: they go to the policy. */
  readonly cors: CorsPolicy | undefined;
  /** First match wins (see the module comment). */
  readonly routes: readonly TableRoute[];
}

export interface RouteTable {
  readonly hosts: readonly TableHost[];
}

/** The section of the configuration the table is built from. */
export interface RouteTableSource {
  readonly envoy: EnvoyConfig;
  readonly platform: { readonly services: readonly PlatformService[] };
}

/** Denials are readable by browser code: why, and when to retry. */
const CORS_EXPOSE = "www-authenticate, retry-after, x-portcullis-reason";
const CORS_MAX_AGE_SECONDS = 600;

/**
 * Plugin pages call kube-api-proxy and plugin-proxy from plugin-proxy's origin with the PluginToken
 * in Authorization; cookies never cross origins (FUN-17 §7). kubectl-style clients also send
 * content-type (JSON, merge, strategic-merge and apply patches are not CORS-safelisted), accept and
 * x-request-id.
 */
function pluginPageCors(envoy: EnvoyConfig): CorsPolicy {
  return {
    allowOrigin: envoy.origins.pluginProxy,
    allowMethods: "GET, POST, PUT, PATCH, DELETE",
    allowHeaders: "authorization, content-type, accept, x-request-id",
    exposeHeaders: CORS_EXPOSE,
    maxAgeSeconds: CORS_MAX_AGE_SECONDS,
    allowCredentials: false,
  };
}

/** The Console calls the platform's APIs (Connect: GET and POST, Connect's own headers) with its session cookie. */
function consoleCors(envoy: EnvoyConfig): CorsPolicy {
  return {
    allowOrigin: envoy.origins.console,
    allowMethods: "GET, POST",
    allowHeaders: "authorization, content-type, connect-protocol-version, connect-timeout-ms, x-user-agent, x-request-id",
    exposeHeaders: CORS_EXPOSE,
    maxAgeSeconds: CORS_MAX_AGE_SECONDS,
    allowCredentials: true,
  };
}

/** `https://Host:8443` → `host`. */
export function hostOfOrigin(origin: string): string {
  return new URL(origin).hostname;
}

/**
 * The table for a configuration. Hosts in this order: kube-api-proxy, plugin-proxy, Konfidence,
 * then one per distinct origin of the platform services, in the order `envoy.platform` lists them.
 */
export function buildRouteTable({ envoy, platform }: RouteTableSource): RouteTable {
  const origins = ["envoy", "origins"];
  const hosts: TableHost[] = [
    {
      name: "kube-api-proxy",
      host: hostOfOrigin(envoy.origins.kubeApiProxy),
      origin: envoy.origins.kubeApiProxy,
      field: [...origins, "kubeApiProxy"],
      cors: pluginPageCors(envoy),
      routes: [route("kube-api-proxy", { kind: "prefix", prefix: "/clusters/" }, "kube-api-proxy", { kind: "kube-api" }, [...origins, "kubeApiProxy"])],
    },
    {
      name: "plugin-proxy",
      host: hostOfOrigin(envoy.origins.pluginProxy),
      origin: envoy.origins.pluginProxy,
      field: [...origins, "pluginProxy"],
      cors: pluginPageCors(envoy),
      routes: [
        route("plugin-proxy", { kind: "prefix", prefix: "/installations/" }, "plugin-proxy", { kind: "plugin-services" }, [...origins, "pluginProxy"]),
        route("plugin-assets", { kind: "prefix", prefix: "/plugins/" }, "plugin-assets", { kind: "plugin-assets" }, [...origins, "pluginProxy"]),
      ],
    },
  ];
  if (envoy.origins.konfidence !== undefined) {
    hosts.push({
      name: "konfidence-api",
      host: hostOfOrigin(envoy.origins.konfidence),
      origin: envoy.origins.konfidence,
      field: [...origins, "konfidence"],
      // The Konfidence API is called by workloads and its own UI's origin: preflights reach the policy.
      cors: undefined,
      routes: [route("konfidence-api", { kind: "prefix", prefix: "/api/v1/" }, "konfidence-api", { kind: "konfidence" }, [...origins, "konfidence"])],
    });
  }
  hosts.push(...platformHosts(envoy, platform.services));
  return { hosts };
}

function route(name: string, match: PathMatch, policy: PolicyName | undefined, upstream: RouteUpstream, field: ConfigPath, service?: string): TableRoute {
  return { name, match, policy, service, upstream, field };
}

/**
 * One host per distinct origin of the platform services: per service, its exact public paths
 * (policy `public`) before its prefixes (policy `platform-api`), which would match them too; then
 * the catch-all, which nothing serves. A prefix ending in `.` or `/` is a plain prefix (a Connect
 * package or service), any other a whole path segment (platform-schema.ts routeCovers).
 */
function platformHosts(envoy: EnvoyConfig, services: readonly PlatformService[]): TableHost[] {
  const index = new Map(services.map((s, i) => [s.name, i]));
  const byHost = new Map<string, { origin: string; field: ConfigPath; served: Array<{ service: PlatformService; at: number }> }>();
  envoy.platform.forEach((entry, k) => {
    const at = index.get(entry.name);
    const host = hostOfOrigin(entry.origin);
    const group = byHost.get(host) ?? { origin: entry.origin, field: ["envoy", "platform", k, "origin"], served: [] };
    // An entry for no service is a configuration error of its own (checkEnvoySection).
    if (at !== undefined) group.served.push({ service: services[at]!, at });
    byHost.set(host, group);
  });
  return [...byHost].map(([host, { origin, field, served }]) => ({
    name: `platform-${host}`,
    host,
    origin,
    field,
    cors: consoleCors(envoy),
    routes: [
      ...served.flatMap(({ service: s, at }) =>
        s.public.map((path, j) =>
          route(`${s.name} public ${path}`, { kind: "exact", path }, "public", { kind: "platform", service: s.name }, ["platform", "services", at, "public", j], s.name),
        ),
      ),
      ...served.flatMap(({ service: s, at }) =>
        s.routes.map((prefix, j) =>
          route(`${s.name} ${prefix}`, prefixMatch(prefix), "platform-api", { kind: "platform", service: s.name }, ["platform", "services", at, "routes", j], s.name),
        ),
      ),
      route(`platform-${host}-unrouted`, { kind: "prefix", prefix: "/" }, undefined, { kind: "none" }, field),
    ],
  }));
}

function prefixMatch(prefix: string): PathMatch {
  return prefix.endsWith("/") || prefix.endsWith(".") ? { kind: "prefix", prefix } : { kind: "segment-prefix", prefix };
}

/** Whether `match` matches `path` (no query), as Envoy's matcher of that kind does. */
export function pathMatches(match: PathMatch, path: string): boolean {
  switch (match.kind) {
    case "exact":
      return path === match.path;
    case "prefix":
      return path.startsWith(match.prefix);
    case "segment-prefix":
      return path === match.prefix || path.startsWith(`${match.prefix}/`);
  }
}

/**
 * The authority's host as Envoy matches virtual hosts: lower-cased, a `:port` of digits stripped
 * (IPv6 literals keep their brackets). Undefined for an authority no configured host can be: empty,
 * a malformed port, an unbracketed IPv6 address.
 */
export function hostOfAuthority(authority: string): string | undefined {
  const lower = authority.toLowerCase();
  const bracket = lower.startsWith("[") ? lower.indexOf("]") : -1;
  const colon = lower.indexOf(":", bracket + 1);
  if (bracket === -1 && lower.startsWith("[")) return undefined;
  if (colon === -1) return lower === "" ? undefined : lower;
  if (bracket === -1 && lower.indexOf(":", colon + 1) !== -1) return undefined;
  if (bracket !== -1 && colon !== bracket + 1) return undefined;
  const host = lower.slice(0, colon);
  return host !== "" && /^\d{1,5}$/.test(lower.slice(colon + 1)) ? host : undefined;
}

/** The route a request lands on: its host's first matching route; none for an unknown host or path. */
export interface RouteChoice {
  readonly host: TableHost | undefined;
  readonly route: TableRoute | undefined;
}

/** A lookup over one table, built once (a map of hosts): (authority, path without query) → RouteChoice. */
export function routeFinder(table: RouteTable): (authority: string, path: string) => RouteChoice {
  const hosts = new Map(table.hosts.map((h) => [h.host, h]));
  return (authority, path) => {
    const name = hostOfAuthority(authority);
    const host = name === undefined ? undefined : hosts.get(name);
    return { host, route: host?.routes.find((r) => pathMatches(r.match, path)) };
  };
}

/** A table that order would have to decide: the field of the later of two clashing entries, and both named. */
export interface RouteTableProblem {
  readonly path: ConfigPath;
  readonly message: string;
}

/** 0: exact paths; 1: prefixes; 2: the catch-all. A route is tried only after every route of a lower rank. */
function rank(r: TableRoute): number {
  if (r.match.kind === "exact") return 0;
  return r.upstream.kind === "none" && r.match.prefix === "/" ? 2 : 1;
}

/**
 * Why the table is ambiguous, or []: an empty host, two hosts of one name (Envoy refuses the
 * configuration; a gateway would pick one), routes out of rank order, and two routes of one rank
 * on one host that both match some path (a duplicate, or an overlap such as `/login` and
 * `/login/password`), so that first-match order, not the configuration, would choose the answer.
 */
export function routeTableProblems(table: RouteTable): RouteTableProblem[] {
  const problems: RouteTableProblem[] = [];
  const seen = new Map<string, TableHost>();
  for (const h of table.hosts) {
    if (h.host === "") problems.push({ path: h.field, message: `virtual host ${h.name} has an empty host name` });
    const other = seen.get(h.host);
    if (other !== undefined) {
      problems.push({ path: h.field, message: `${h.origin} (${fieldName(h.field)}) has the host of ${other.origin} (${fieldName(other.field)}): ${h.host} would be served twice` });
    }
    seen.set(h.host, h);
    problems.push(...hostProblems(h));
  }
  return problems;
}

function hostProblems(h: TableHost): RouteTableProblem[] {
  const problems: RouteTableProblem[] = [];
  h.routes.forEach((b, j) => {
    for (const a of h.routes.slice(0, j)) {
      if (rank(a) > rank(b)) {
        problems.push({ path: b.field, message: `route "${b.name}" (${fieldName(b.field)}) comes after "${a.name}" (${fieldName(a.field)}), which would match first on ${h.host}` });
      } else if (rank(a) === rank(b)) {
        const path = sharedPath(a.match, b.match);
        if (path !== undefined) {
          problems.push({ path: b.field, message: `route "${b.name}" (${fieldName(b.field)}) and route "${a.name}" (${fieldName(a.field)}) both match ${path} on ${h.host}` });
        }
      }
    }
  });
  return problems;
}

/** A path both matchers match, or undefined when they are disjoint (a witness, named in the error). */
export function sharedPath(a: PathMatch, b: PathMatch): string | undefined {
  const candidates = [...witnesses(a), ...witnesses(b)];
  return candidates.find((p) => pathMatches(a, p) && pathMatches(b, p));
}

/**
 * Paths that decide whether another matcher overlaps this one: if any path matches both, one of
 * the two matchers' witnesses does (each matched set is all paths that extend a string, or that
 * string alone, or that string and its `/`-extensions).
 */
function witnesses(m: PathMatch): string[] {
  switch (m.kind) {
    case "exact":
      return [m.path];
    case "prefix":
      return [m.prefix];
    case "segment-prefix":
      return [m.prefix, `${m.prefix}/`];
  }
}

/** `["platform", "services", 0, "routes", 1]` → `platform.services[0].routes[1]`, as configuration errors print it. */
export function fieldName(path: ConfigPath): string {
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : `${i === 0 ? "" : "."}${p}`)).join("");
}
