/**
 * CheckRequest → HttpRequest: the only place that reads Envoy's AttributeContext. Everything after
 * this works on the plain, normalised HttpRequest.
 */

export interface HttpRequest {
  readonly method: string;
  /** The path without query string or fragment, exactly as Envoy saw it (after its normalisation). */
  readonly path: string;
  readonly query: URLSearchParams;
  /** Lower-case header names. Repeated headers arrive merged by Envoy with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  /** Envoy's `x-request-id` (or the attribute id), for logs and the audit line. */
  readonly requestId: string;
  readonly contextExtensions: Readonly<Record<string, string>>;
}

/** The parts of envoy.service.auth.v3.CheckRequest we read, as @grpc/proto-loader decodes them. */
export interface CheckRequestMessage {
  attributes?: {
    request?: {
      http?: {
        id?: string;
        method?: string;
        path?: string;
        headers?: Record<string, string>;
        header_map?: { headers?: Array<{ key?: string; value?: string; raw_value?: Buffer | Uint8Array }> };
      };
    };
    context_extensions?: Record<string, string>;
  };
}

/** Thrown for a CheckRequest that does not describe an HTTP request; the caller denies it. */
export class MalformedCheckRequest extends Error {
  readonly code = "malformed-check-request";
}

export function fromCheckRequest(message: CheckRequestMessage): HttpRequest {
  const http = message.attributes?.request?.http;
  if (http === undefined || typeof http.method !== "string" || typeof http.path !== "string" || http.method === "") {
    throw new MalformedCheckRequest("CheckRequest carries no HTTP request");
  }
  const headers = readHeaders(http);
  const { path, query } = splitPath(http.path);
  return {
    method: http.method.toUpperCase(),
    path,
    query,
    headers,
    requestId: headers["x-request-id"] ?? http.id ?? "",
    contextExtensions: { ...(message.attributes?.context_extensions ?? {}) },
  };
}

/** Envoy sends `headers`, or `header_map` when `encode_raw_headers` is on; repeated entries are merged as Envoy does. */
function readHeaders(http: NonNullable<NonNullable<NonNullable<CheckRequestMessage["attributes"]>["request"]>["http"]>): Record<string, string> {
  const out: Record<string, string> = Object.create(null);
  const entries = http.header_map?.headers;
  if (entries !== undefined && entries.length > 0) {
    for (const e of entries) {
      if (typeof e.key !== "string") continue;
      const value = e.raw_value !== undefined && e.raw_value.length > 0 ? Buffer.from(e.raw_value).toString("latin1") : (e.value ?? "");
      const name = e.key.toLowerCase();
      out[name] = name in out ? `${out[name]}, ${value}` : value;
    }
    return out;
  }
  for (const [k, v] of Object.entries(http.headers ?? {})) {
    // Envoy sends lower-case keys; a sender that does not must not get one of two values dropped.
    const name = k.toLowerCase();
    out[name] = name in out ? `${out[name]}, ${String(v)}` : String(v);
  }
  return out;
}

function splitPath(raw: string): { path: string; query: URLSearchParams } {
  const hash = raw.indexOf("#");
  const noFragment = hash === -1 ? raw : raw.slice(0, hash);
  const q = noFragment.indexOf("?");
  if (q === -1) return { path: noFragment, query: new URLSearchParams() };
  return { path: noFragment.slice(0, q), query: goQuery(noFragment.slice(q + 1)) };
}

/**
 * The query as Go's url.ParseQuery reads it, since the upstreams (kube-apiserver above all) are Go:
 * a pair holding `;` or a malformed %-escape is dropped, where URLSearchParams would keep it. Kept,
 * `?watch=1;` reads as a watch here while kube-apiserver runs a list: a verb the user was never
 * authorized for.
 */
function goQuery(raw: string): URLSearchParams {
  return new URLSearchParams(
    raw
      .split("&")
      .filter((pair) => !pair.includes(";") && !/%(?![0-9A-Fa-f]{2})/.test(pair))
      .join("&"),
  );
}
