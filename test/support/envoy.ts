/** Builds CheckRequests the way Envoy's ext_authz filter sends them, and reads CheckResponses. */
import { randomUUID } from "node:crypto";

export interface RequestSpec {
  method?: string;
  /** Path with query string, as Envoy puts it in attributes.request.http.path. */
  path: string;
  headers?: Record<string, string>;
  policy?: string | undefined;
}

export function envoyCheckRequest(spec: RequestSpec): Record<string, unknown> {
  const headers: Record<string, string> = {
    ":authority": "gateway.fundament.test",
    ":method": spec.method ?? "GET",
    ":path": spec.path,
    "x-request-id": randomUUID(),
    ...Object.fromEntries(Object.entries(spec.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
  };
  return {
    attributes: {
      request: {
        http: {
          id: "12345",
          method: spec.method ?? "GET",
          path: spec.path,
          host: "gateway.fundament.test",
          scheme: "https",
          protocol: "HTTP/1.1",
          headers,
        },
      },
      context_extensions: spec.policy === undefined ? {} : { policy: spec.policy },
    },
  };
}

export interface HeaderOption {
  header: { key: string; value: string };
  append_action?: string;
}

export interface CheckResponse {
  status: { code: number; message?: string };
  ok_response?: { headers?: HeaderOption[]; headers_to_remove?: string[]; query_parameters_to_set?: Array<{ key: string; value: string }> };
  denied_response?: { status: { code: string | number }; headers?: HeaderOption[]; body?: string };
  http_response?: string;
}

/** envoy.type.v3.StatusCode names, as the client decodes them (enums: String). */
const HTTP_STATUS: Record<string, number> = {
  BadRequest: 400,
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  MethodNotAllowed: 405,
  InternalServerError: 500,
  ServiceUnavailable: 503,
};

/** The response as a flat record tests can compare exactly. */
export function summarize(response: CheckResponse): Allowed | Denied {
  const toMap = (hs: HeaderOption[] | undefined) => Object.fromEntries((hs ?? []).map((h) => [h.header.key, h.header.value]));
  if (response.ok_response !== undefined || response.status.code === 0) {
    const headers = response.ok_response?.headers ?? [];
    const query = response.ok_response?.query_parameters_to_set ?? [];
    const allowed: Allowed = {
      allowed: true,
      grpc: response.status.code,
      set: toMap(headers),
      appendActions: [...new Set(headers.map((h) => h.append_action))],
      removed: [...(response.ok_response?.headers_to_remove ?? [])].sort(),
    };
    // Shown only when set: the query Envoy rewrites (query_parameters_to_set).
    if (query.length > 0) allowed.query = query.map((q) => [q.key, q.value]);
    return allowed;
  }
  const headers = toMap(response.denied_response?.headers);
  const denied: Denied = {
    allowed: false,
    grpc: response.status.code,
    http: HTTP_STATUS[String(response.denied_response?.status.code)] ?? Number(response.denied_response?.status.code),
    reason: headers["x-portcullis-reason"],
    headers,
    body: JSON.parse(response.denied_response?.body ?? "null") as unknown,
  };
  return denied;
}

type Allowed = {
  allowed: true;
  grpc: number;
  set: Record<string, string>;
  appendActions: Array<string | undefined>;
  removed: string[];
  query?: Array<[string, string]>;
  http?: undefined;
  reason?: undefined;
  headers?: undefined;
  body?: undefined;
};

type Denied = {
  allowed: false;
  grpc: number;
  http: number;
  reason: string | undefined;
  headers: Record<string, string>;
  body: unknown;
  set?: undefined;
  appendActions?: undefined;
  removed?: undefined;
  query?: undefined;
};
