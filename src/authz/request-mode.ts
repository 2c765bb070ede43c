/**
 * Request mode (`check.policyFrom: request`): behind a gateway that cannot name the policy per
 * route (Istio's CUSTOM ext_authz provider sets no context extensions) or that calls portcullis
 * before its own CORS filter, the check does what the generated Envoy did before asking:
 *  - the policy and service come from the route table (route-table.ts), unless context_extensions
 *    name a policy: the gateway's word wins where it gives one;
 *  - a path Envoy would have refused or rewritten is refused (400 `bad-request`): an escaped `/` or
 *    `\` (path_with_escaped_slashes_action REJECT_REQUEST), an empty segment (merge_slashes), a
 *    `.`/`..` segment, raw or escaped, and a raw `\`, which normalize_path reads as `/`
 *    (`a\..\b` is a dot-segment path to Envoy); rewriting is not the check's to do, and the
 *    upstream would read such a path differently from the route that chose the policy;
 *  - a header that spells an identity header with underscores (`x_fundament_user_id`) is refused
 *    (headers_with_underscores_action REJECT_REQUEST): portcullis overwrites `x-fundament-*` and
 *    `x-konfidence-*` on allow, but an upstream that reads `_` as `-` (CGI, WSGI, Rack) would take
 *    the client's copy;
 *  - a CORS preflight on a host with a CORS policy is answered as Envoy's CORS filter answers it
 *    (200; the allowed origin echoed only when it is the configured one), before any token is read
 *    and without anything forwarded; and the answer to any other request from the allowed origin
 *    carries the headers that filter adds to responses (the origin, credentials, the exposed
 *    headers), on an allow for the upstream's response and on a denial, so browser code can read
 *    why it was denied.
 * In contextExtensions mode none of this runs: the generated Envoy has done it already, and the
 * policies' own answers to such requests stay what they are.
 */
import { hasDotSegment } from "./dot-segments.ts";
import { type CorsPolicy, type RouteTable, routeFinder } from "../config/route-table.ts";
import type { HttpRequest } from "../envoy/check-request.ts";

export type RoutedRequest =
  /** Decide `request`, whose context extensions now name the policy (none: `no-policy`); add `responseHeaders` to the answer. */
  | { readonly kind: "decide"; readonly request: HttpRequest; readonly responseHeaders?: Readonly<Record<string, string>> | undefined }
  /** Refuse with 400 `bad-request`; `request` names the policy whose body shape the denial takes. */
  | { readonly kind: "refuse"; readonly request: HttpRequest; readonly message: string }
  /** Answer a CORS preflight with these headers, status 200 and no body. */
  | { readonly kind: "preflight"; readonly headers: Readonly<Record<string, string>> };

/** Request mode over one table: CheckRequest's HttpRequest → what the check does with it. Pure. */
export function requestRouter(table: RouteTable): (request: HttpRequest) => RoutedRequest {
  const find = routeFinder(table);
  return (received) => {
    const { host, route } = find(received.authority, received.path);
    const named = received.contextExtensions["policy"] !== undefined;
    const fromTable: Record<string, string> = route?.policy === undefined ? {} : route.service === undefined ? { policy: route.policy } : { policy: route.policy, service: route.service };
    const request = named ? received : { ...received, contextExtensions: fromTable };
    const refusal = unsafePath(request.path) ?? smuggledIdentityHeader(request.headers);
    if (refusal !== undefined) return { kind: "refuse", request, message: refusal };
    // Envoy's CORS filter applies the policy of the host whose route matched: no route, no CORS.
    const cors = route === undefined ? undefined : host?.cors;
    if (cors !== undefined && isPreflight(request)) return { kind: "preflight", headers: preflightHeaders(cors, request.headers["origin"]!) };
    const origin = request.headers["origin"];
    return { kind: "decide", request, responseHeaders: cors !== undefined && origin === cors.allowOrigin ? responseHeaders(cors, origin) : undefined };
  };
}

/** Why Envoy, as generated, would not have passed this path on as it is; undefined when it would. */
export function unsafePath(path: string): string | undefined {
  if (/%(2f|5c)/i.test(path)) return "an escaped / or \\ in the path";
  // Envoy's normalize_path (Chromium's canonicalizer) treats \ as /: behind a gateway that did not
  // normalize, `projects/a/..\..\projects/b` would be decided as project a and served as b.
  if (path.includes("\\")) return "a \\ in the path";
  if (path.includes("//")) return "an empty segment (//) in the path";
  if (hasDotSegment(path)) return "a . or .. segment, or an undecodable escape, in the path";
  return undefined;
}

/** An identity header portcullis guards, spelt with underscores (any mix), as an upstream may read it. */
export function smuggledIdentityHeader(headers: Readonly<Record<string, string>>): string | undefined {
  const smuggled = Object.keys(headers).some((h) => h.includes("_") && /^x-(fundament|konfidence)-/.test(h.replaceAll("_", "-")));
  return smuggled ? "a header name spelling x-fundament-* or x-konfidence-* with underscores" : undefined;
}

/** What Envoy's CORS filter adds to the response to a request from the allowed origin. */
export function responseHeaders(cors: CorsPolicy, origin: string): Record<string, string> {
  return {
    "access-control-allow-origin": origin,
    ...(cors.allowCredentials ? { "access-control-allow-credentials": "true" } : {}),
    ...(cors.exposeHeaders === "" ? {} : { "access-control-expose-headers": cors.exposeHeaders }),
  };
}

/** Envoy's test: OPTIONS (case-sensitive), a non-empty Origin and a non-empty Access-Control-Request-Method. */
export function isPreflight(request: HttpRequest): boolean {
  return request.method === "OPTIONS" && (request.headers["origin"] ?? "") !== "" && (request.headers["access-control-request-method"] ?? "") !== "";
}

/**
 * What Envoy's CORS filter answers a preflight with (forward_not_matching_preflights false): the
 * origin echoed only when it is exactly the allowed one, everything else always (a browser fails
 * the preflight without the origin).
 */
export function preflightHeaders(cors: CorsPolicy, origin: string): Record<string, string> {
  return {
    ...(origin === cors.allowOrigin ? { "access-control-allow-origin": origin } : {}),
    ...(cors.allowCredentials ? { "access-control-allow-credentials": "true" } : {}),
    "access-control-allow-methods": cors.allowMethods,
    "access-control-allow-headers": cors.allowHeaders,
    "access-control-max-age": String(cors.maxAgeSeconds),
  };
}
