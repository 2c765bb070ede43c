/**
 * OpenTelemetry tracing, when `tracing.enabled`: W3C trace context, a parent-based ratio sampler
 * (Envoy's sampled flag is followed; `sampleRatio` decides for Checks that arrive without one), and
 * spans batched to an OTLP/HTTP (JSON) collector. The decision's policy and outcome and each cache lookup
 * reach the Check span through the same diagnostics channels the metrics read, so the gates and
 * adapters know nothing of tracing.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { context, diag, DiagLogLevel, propagation, trace } from "@opentelemetry/api";
import type { SpanProcessor } from "@opentelemetry/sdk-trace";
import type { Logger } from "pino";
import { errorSummary } from "../redaction/error-cause.ts";
import type { Config } from "../config/schema.ts";
import { type CacheLookup, cacheLookups, type CheckDecision, checkDecisions } from "../metrics/events.ts";
import { BUILD } from "../metrics/build-info.ts";
import { annotateCurrentSpan, ATTRIBUTES, useTracer } from "./spans.ts";

export interface Tracing {
  /** Ends the channels' subscriptions and flushes the spans not yet exported (bounded by the exporter's timeout). */
  shutdown(): Promise<void>;
}

const OFF: Tracing = { shutdown: async () => {} };

/**
 * `processor` replaces the OTLP exporter (tests give an in-memory one). The SDK is loaded only
 * when tracing is on: its packages are ~4 MiB of a replica's RSS (bench/module-memory.ts) that a
 * replica without tracing never uses.
 */
export async function startTracing(config: Config["tracing"], logger: Logger, options: { processor?: SpanProcessor } = {}): Promise<Tracing> {
  if (!config.enabled) return OFF;
  const [{ AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, { OTLPTraceExporter }, { resourceFromAttributes }, sdk] = await Promise.all([
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/sdk-trace"),
  ]);
  const { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider } = sdk;
  // The SDK reports a failed export through its diagnostic logger, silent unless given one.
  diag.setLogger(
    {
      error: (message) => logger.warn({ dependency: "otlp" }, `tracing: ${message}`),
      warn: (message) => logger.warn({ dependency: "otlp" }, `tracing: ${message}`),
      info: () => {},
      debug: () => {},
      verbose: () => {},
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const processor =
    options.processor ?? new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: config.otlp.endpoint, timeoutMillis: config.otlp.timeoutMs }) });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": config.serviceName, "service.version": BUILD.version }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }),
    spanProcessors: [processor],
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  useTracer(provider.getTracer("portcullis", BUILD.version));

  const onDecision = (message: unknown) => {
    const { policy, outcome } = message as CheckDecision;
    annotateCurrentSpan(ATTRIBUTES.policy, policy);
    annotateCurrentSpan(ATTRIBUTES.outcome, outcome);
  };
  const onCacheLookup = (message: unknown) => {
    const { cache, outcome } = message as CacheLookup;
    annotateCurrentSpan(`${ATTRIBUTES.cachePrefix}${cache}`, outcome);
  };
  subscribe(checkDecisions.name, onDecision);
  subscribe(cacheLookups.name, onCacheLookup);

  return {
    async shutdown() {
      unsubscribe(checkDecisions.name, onDecision);
      unsubscribe(cacheLookups.name, onCacheLookup);
      useTracer(undefined);
      // The last export failing (a collector gone) must not fail the process's shutdown.
      await provider.shutdown().catch((err: unknown) => logger.warn({ dependency: "otlp", error: errorSummary(err) }, "tracing: spans not exported at shutdown"));
      // The API's globals may be set once per process; disabling lets a later start (tests) set them again.
      contextManager.disable();
      context.disable();
      propagation.disable();
      trace.disable();
      diag.disable();
    },
  };
}
