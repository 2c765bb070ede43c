/**
 * CheckResponse → what a person wants to read: allowed or denied, the HTTP status the caller gets,
 * the header mutations (credentials redacted). Reads both the server's own message and the one a
 * gRPC client decodes (enum names instead of numbers).
 */
import { redactHeaders } from "../headers/redact.ts";
import { externalAuthRoot } from "../envoy/protos.ts";

interface HeaderOption {
  header?: { key?: string; value?: string };
}

/** A CheckResponse as the server builds it or as @grpc/proto-loader decodes it. */
export interface AnyCheckResponse {
  status?: { code?: number; message?: string };
  ok_response?: { headers?: HeaderOption[]; headers_to_remove?: readonly string[]; query_parameters_to_set?: Array<{ key?: string; value?: string }> };
  denied_response?: { status?: { code?: number | string }; headers?: HeaderOption[]; body?: string };
}

export type CheckOutcome =
  | {
      readonly decision: "allow";
      readonly status: 200;
      /** What Envoy does to the request before it goes upstream. */
      readonly mutations: {
        readonly set: Record<string, string>;
        readonly remove: readonly string[];
        /** Query parameters set (a bounded watch's timeoutSeconds); absent when none. */
        readonly query?: Record<string, string>;
      };
    }
  | {
      readonly decision: "deny";
      readonly status: number;
      readonly reason: string;
      /** The response the caller gets instead. */
      readonly headers: Record<string, string>;
      readonly body: string;
    };

export function describeCheckResponse(response: AnyCheckResponse): CheckOutcome {
  if ((response.status?.code ?? 0) === 0 && response.denied_response === undefined) {
    const set = redactHeaders(headerMap(response.ok_response?.headers));
    const remove = [...(response.ok_response?.headers_to_remove ?? [])];
    const query = response.ok_response?.query_parameters_to_set ?? [];
    return {
      decision: "allow",
      status: 200,
      mutations: query.length === 0 ? { set, remove } : { set, remove, query: Object.fromEntries(query.map((q) => [q.key ?? "", q.value ?? ""])) },
    };
  }
  const headers = redactHeaders(headerMap(response.denied_response?.headers));
  return {
    decision: "deny",
    // Envoy answers 403 when a denial names no status.
    status: httpStatus(response.denied_response?.status?.code) ?? 403,
    reason: headers["x-portcullis-reason"] ?? response.status?.message ?? "",
    headers,
    body: response.denied_response?.body ?? "",
  };
}

function headerMap(options: HeaderOption[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const o of options ?? []) if (o.header?.key !== undefined) out[o.header.key] = o.header.value ?? "";
  return out;
}

let statusNumbers: Map<string, number> | undefined;

/** envoy.type.v3.StatusCode, by name or number. */
function httpStatus(code: number | string | undefined): number | undefined {
  if (typeof code === "number") return code;
  if (code === undefined) return undefined;
  if (statusNumbers === undefined) {
    statusNumbers = new Map(Object.entries(externalAuthRoot().lookupEnum("envoy.type.v3.StatusCode").values));
  }
  return statusNumbers.get(code);
}
