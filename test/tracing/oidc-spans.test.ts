/**
 * OIDC fetches as spans: discovery and JWKS fetches made while a Check span records are its
 * children, naming the document fetched; with no Check recording, a fetch makes no span.
 */
import { SpanKind, trace } from "@opentelemetry/api";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace";
import pino from "pino";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import { OidcProviders } from "../../src/konfidence/oidc.ts";
import { OIDC_PROVIDER, ProviderHttp } from "../../src/konfidence/provider-http.ts";
import { startTracing, type Tracing } from "../../src/tracing/setup.ts";
import { startLocalProvider, type LocalProvider } from "../konfidence/oidc-provider.ts";
import { TEST_OIDC_OPTIONS } from "../support/oidc-providers.ts";

const AUD = "https://konfidence.example/api";
let exporter: InMemorySpanExporter;
let tracing: Tracing;
let provider: LocalProvider;
let http: ProviderHttp;

beforeAll(async () => {
  exporter = new InMemorySpanExporter();
  tracing = await startTracing(configSchema.shape.tracing.parse({ enabled: true }), pino({ level: "silent" }), { processor: new SimpleSpanProcessor({ exporter }) });
  provider = await startLocalProvider();
});
afterAll(async () => {
  await provider.stop();
  await tracing.shutdown();
});
afterEach(async () => {
  exporter.reset();
  await http.close();
});

function providers(): OidcProviders {
  http = new ProviderHttp({ ca: provider.ca, timeoutMs: 1_000, maxResponseBytes: 65_536 });
  return new OidcProviders({ http, ...TEST_OIDC_OPTIONS });
}

it("discovery and JWKS fetches under a recording span are its children, each naming its URL (no query)", async () => {
  const key = provider.addKey();
  const token = await provider.sign(key, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD });
  const verifier = providers();
  const parentId = await trace.getTracer("test").startActiveSpan("check", async (span) => {
    expect(await verifier.verify(provider.endpoint, token)).toMatchObject({ ok: true });
    span.end();
    return span.spanContext().spanId;
  });
  const fetches = exporter.getFinishedSpans().filter((s) => s.name === OIDC_PROVIDER);
  expect(fetches.map((s) => s.parentSpanContext?.spanId)).toEqual([parentId, parentId]);
  expect(fetches.every((s) => s.kind === SpanKind.CLIENT)).toBe(true);
  const urls = fetches.map((s) => s.attributes["url.full"]);
  expect(urls[0]).toBe(provider.endpoint);
  expect(urls[1]).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/\S+$/);
  expect(fetches.map((s) => s.attributes["http.request.method"])).toEqual(["GET", "GET"]);
  expect(JSON.stringify(fetches.map((s) => s.attributes))).not.toContain(token);
});

it("a fetch with no recording span makes no span (no orphan traces from background fetches)", async () => {
  const key = provider.addKey();
  const token = await provider.sign(key, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD });
  expect(await providers().verify(provider.endpoint, token)).toMatchObject({ ok: true });
  expect(exporter.getFinishedSpans()).toEqual([]);
});
