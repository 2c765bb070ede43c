/**
 * The spans portcullis makes: one per Check (continuing Envoy's W3C `traceparent`) and one per
 * call to a dependency under it. Off unless `tracing.enabled`: then `tracer` stays undefined and
 * every wrapper is one comparison before the work it wraps.
 *
 * A dependency span is made only under a recording Check span: a background refresh or probe
 * (no Check waiting) and a Check the sampler dropped add nothing.
 */
import { type Attributes, context, propagation, SpanKind, SpanStatusCode, type TextMapGetter, trace, type Tracer } from "@opentelemetry/api";
import { type CheckRequestMessage, headerEntryValue } from "../envoy/check-request.ts";

let tracer: Tracer | undefined;

export type SpanAttributes = Attributes;

/** Set by startTracing (src/tracing/setup.ts); undefined turns every span off. */
export function useTracer(next: Tracer | undefined): void {
  tracer = next;
}

export const CHECK_SPAN = "envoy.service.auth.v3.Authorization/Check";

/** Attribute names of the Check span. */
export const ATTRIBUTES = {
  policy: "portcullis.policy",
  /** `allowed`, or the denial's reason code. */
  outcome: "portcullis.outcome",
  /** Suffixed with the cache's name: `portcullis.cache.openfga_can_view` = hit, miss, … */
  cachePrefix: "portcullis.cache.",
} as const;

/** What the Check span reads of an answer: its gRPC status code (the CheckResponse is authz's). */
interface CheckAnswer {
  readonly status: { readonly code: number };
}

type Check<R extends CheckAnswer> = (message: CheckRequestMessage) => Promise<R>;

/** A gRPC call's metadata (grpc-js's Metadata has this shape). */
export interface CallMetadata {
  get(key: string): Array<string | Buffer>;
}

export type TracedCheck<R extends CheckAnswer> = (message: CheckRequestMessage, metadata?: CallMetadata) => Promise<R>;

/**
 * Wraps a checker so each Check is a server span; with tracing off, the checker itself.
 *
 * The parent is Envoy's: its ext_authz client puts the trace context of its span for this call in
 * the call's gRPC metadata, a child of Envoy's span for the HTTP request. Without one there (Envoy
 * not tracing), the `traceparent` of the request being authorized, from the CheckRequest's headers.
 */
export function tracedChecks<R extends CheckAnswer>(check: Check<R>): TracedCheck<R> {
  if (tracer === undefined) return check;
  return (message, metadata) => {
    if (tracer === undefined) return check(message);
    const parent =
      metadata !== undefined && metadata.get("traceparent").length > 0
        ? propagation.extract(context.active(), metadata, CALL_METADATA)
        : propagation.extract(context.active(), message, REQUEST_HEADERS);
    return tracer.startActiveSpan(
      CHECK_SPAN,
      { kind: SpanKind.SERVER, attributes: { "rpc.system": "grpc", "rpc.service": "envoy.service.auth.v3.Authorization", "rpc.method": "Check" } },
      parent,
      async (span) => {
        try {
          const response = await check(message);
          span.setAttribute("rpc.grpc.status_code", response.status.code);
          return response;
        } finally {
          span.end();
        }
      },
    );
  };
}

/** Runs one dependency call in a client span under the current Check span; an error ends it with status ERROR. */
export function inDependencySpan<T>(dependency: string, attributes: Attributes | undefined, run: () => Promise<T>): Promise<T> {
  if (tracer === undefined || trace.getActiveSpan()?.isRecording() !== true) return run();
  return tracer.startActiveSpan(dependency, { kind: SpanKind.CLIENT, ...(attributes === undefined ? {} : { attributes }) }, async (span) => {
    try {
      return await run();
    } catch (err) {
      // withDeadline's errors are DependencyUnavailable, whose messages never hold a credential.
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : "error" });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Adds an attribute to the current span, if one is recording (a decision's policy, a cache's outcome). */
export function annotateCurrentSpan(name: string, value: string): void {
  const span = trace.getActiveSpan();
  if (span?.isRecording() === true) span.setAttribute(name, value);
}

/** The request headers of a CheckRequest, as a propagator reads them: `headers`, or `header_map` (Envoy's `encode_raw_headers`). */
const REQUEST_HEADERS: TextMapGetter<CheckRequestMessage> = {
  keys: (message) => {
    const http = message.attributes?.request?.http;
    return [...Object.keys(http?.headers ?? {}), ...(http?.header_map?.headers ?? []).map((h) => h.key ?? "")];
  },
  get: (message, key) => {
    const http = message.attributes?.request?.http;
    const value = http?.headers?.[key];
    if (value !== undefined) return value;
    const entry = http?.header_map?.headers?.find((h) => h.key === key);
    return entry === undefined ? undefined : headerEntryValue(entry);
  },
};

const CALL_METADATA: TextMapGetter<CallMetadata> = {
  keys: () => ["traceparent", "tracestate"],
  get: (metadata, key) => {
    const value = metadata.get(key)[0];
    return value === undefined ? undefined : String(value);
  },
};
