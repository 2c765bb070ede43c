/**
 * Builds a CheckRequest exactly as Envoy's ext_authz filter would for one HTTP request:
 * attributes.request.http with the method, the path (query included), lower-cased headers with the
 * HTTP/2-style pseudo-headers, x-request-id, and the route's context extensions.
 */
import { randomInt, randomUUID } from "node:crypto";
import type { CheckRequestMessage } from "./check-request.ts";

export interface CheckRequestSpec {
  readonly method: string;
  /** Path with query string, as the client sent it (Envoy normalises before this point). */
  readonly path: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** The route's `context_extensions.policy`; absent for a route that names none. */
  readonly policy?: string | undefined;
  readonly authority?: string;
}

export interface EnvoyCheckRequest extends CheckRequestMessage {
  attributes: {
    request: {
      http: {
        id: string;
        method: string;
        path: string;
        host: string;
        scheme: string;
        protocol: string;
        headers: Record<string, string>;
      };
    };
    context_extensions: Record<string, string>;
  };
}

export function buildCheckRequest(spec: CheckRequestSpec): EnvoyCheckRequest {
  const method = spec.method.toUpperCase();
  const supplied = Object.fromEntries(Object.entries(spec.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
  const authority = supplied[":authority"] ?? supplied["host"] ?? spec.authority ?? "localhost";
  const headers: Record<string, string> = {
    ":authority": authority,
    ":method": method,
    ":path": spec.path,
    ":scheme": "https",
    // Envoy (use_remote_address) always sets one; portcullis logs and audits it.
    "x-request-id": randomUUID(),
    ...supplied,
  };
  delete headers["host"];
  return {
    attributes: {
      request: {
        http: {
          id: String(randomInt(1, 2 ** 47)),
          method,
          path: spec.path,
          host: authority,
          scheme: "https",
          protocol: "HTTP/1.1",
          headers,
        },
      },
      context_extensions: spec.policy === undefined ? {} : { policy: spec.policy },
    },
  };
}
