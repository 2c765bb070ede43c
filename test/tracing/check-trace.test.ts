/**
 * OpenTelemetry spans of a kube-api-proxy PluginToken Check, with portcullis's REAL adapters
 * (OpenFGA SDK, client-node SubjectAccessReview and TokenRequest) against the wire fakes, over real
 * gRPC, recorded by an in-memory exporter: the Check span continues Envoy's traceparent and the
 * dependency calls are its children, with the decision's policy, outcome and cache lookups.
 */
import * as grpc from "@grpc/grpc-js";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { startTracing, type Tracing } from "../../src/tracing/setup.ts";
import { ATTRIBUTES, CHECK_SPAN, inDependencySpan, tracedChecks } from "../../src/tracing/spans.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { startWired, type Wired } from "../support/wire-fakes/wired.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const PATH = `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`;
const ENVOY_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const ENVOY_SPAN_ID = "00f067aa0ba902b7";
const traceparent = (flags: "01" | "00") => `00-${ENVOY_TRACE_ID}-${ENVOY_SPAN_ID}-${flags}`;

/** Tracing on; sampleRatio 0, so only Envoy's sampled flag makes a trace. */
const TRACING = configSchema.shape.tracing.parse({ enabled: true, sampleRatio: 0 });

let exporter: InMemorySpanExporter;
let tracing: Tracing;
let w: Wired;

beforeAll(async () => {
  exporter = new InMemorySpanExporter();
  tracing = await startTracing(TRACING, pino({ level: "silent" }), { processor: new SimpleSpanProcessor({ exporter }) });
  w = await startWired();
});
afterAll(async () => {
  await w?.stop();
  await tracing?.shutdown();
});
beforeEach(() => {
  exporter.reset();
  w.openfga.fault = "healthy";
});

const check = async (headers: Record<string, string>) =>
  w.server.check({ path: PATH, policy: "kube-api-proxy", headers: { authorization: `Bearer ${await pluginToken()}`, ...headers } });

const spans = () => exporter.getFinishedSpans();
const checkSpan = (): ReadableSpan => {
  const found = spans().filter((s) => s.name === CHECK_SPAN);
  expect(found).toHaveLength(1);
  return found[0]!;
};
const childrenOf = (parent: ReadableSpan) => spans().filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);

describe("the trace of one kube-api-proxy PluginToken check", () => {
  it("is a Check span under Envoy's span, with OpenFGA, SubjectAccessReview and TokenRequest as its children", async () => {
    const res = await check({ traceparent: traceparent("01") });
    expect(res).toMatchObject({ allowed: true, grpc: 0 });

    const root = checkSpan();
    expect(root.spanContext().traceId).toBe(ENVOY_TRACE_ID);
    expect(root.parentSpanContext?.spanId).toBe(ENVOY_SPAN_ID);
    expect(root.kind).toBe(SpanKind.SERVER);
    expect(root.attributes).toMatchObject({
      "rpc.system": "grpc",
      "rpc.method": "Check",
      "rpc.grpc.status_code": 0,
      [ATTRIBUTES.policy]: "kube-api-proxy",
      [ATTRIBUTES.outcome]: "allowed",
      [`${ATTRIBUTES.cachePrefix}openfga_can_view`]: "miss",
      [`${ATTRIBUTES.cachePrefix}subject_access_review`]: "miss",
    });

    const children = childrenOf(root);
    expect(children.map((s) => s.name).sort()).toEqual(["kube-subjectaccessreview", "kube-tokenrequest", "openfga"]);
    for (const child of children) {
      expect(child.kind, child.name).toBe(SpanKind.CLIENT);
      expect(child.spanContext().traceId, child.name).toBe(ENVOY_TRACE_ID);
      expect(child.status.code, child.name).not.toBe(SpanStatusCode.ERROR);
    }
    const byName = Object.fromEntries(children.map((s) => [s.name, s.attributes]));
    expect(byName["openfga"]).toEqual({ "openfga.store_id": w.openfga.storeId, "openfga.relation": "can_view", "openfga.object": `cluster:${ids.cluster}` });
    expect(byName["kube-subjectaccessreview"]).toEqual({
      "portcullis.cluster_id": ids.cluster,
      "kube.sar.verb": "get",
      "kube.sar.resource": "certificates",
      "kube.sar.group": "cert-manager.io",
      "kube.sar.namespace": "team-a",
    });
    expect(byName["kube-tokenrequest"]).toEqual({
      "portcullis.cluster_id": ids.cluster,
      "kube.namespace": "plugin-cert-manager",
      "kube.serviceaccount": "plugin-cert-manager",
    });
    // Nothing else was recorded: no orphan spans from the same check.
    expect(spans()).toHaveLength(4);
  });

  it("holds no credential: neither the PluginToken nor the minted ServiceAccount token appears in any span", async () => {
    const token = await pluginToken();
    await w.server.check({ path: PATH, policy: "kube-api-proxy", headers: { authorization: `Bearer ${token}`, traceparent: traceparent("01") } });
    const recorded = JSON.stringify(spans().map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events })));
    expect(recorded).not.toContain(token);
    expect(recorded).not.toContain("sa-token");
    expect(recorded.toLowerCase()).not.toContain("bearer");
  });

  it("marks a failing dependency's span as an error and the Check's outcome with the denial's reason", async () => {
    w.openfga.fault = "status-500";
    const res = await check({ traceparent: traceparent("01") });
    expect(res).toMatchObject({ allowed: false, grpc: 14 });
    const root = checkSpan();
    expect(root.attributes).toMatchObject({ [ATTRIBUTES.policy]: "kube-api-proxy", [ATTRIBUTES.outcome]: "dependency-unavailable", "rpc.grpc.status_code": 14 });
    const openfga = childrenOf(root).find((s) => s.name === "openfga");
    expect(openfga?.status.code).toBe(SpanStatusCode.ERROR);
    expect(openfga?.status.message).toMatch(/^openfga: /);
  });

  it("takes its parent from the call's gRPC metadata when Envoy's ext_authz client put one there (its span for the call)", async () => {
    const callSpanId = "b7ad6b7169203331";
    const metadata = new grpc.Metadata();
    metadata.set("traceparent", `00-${ENVOY_TRACE_ID}-${callSpanId}-01`);
    const client = authorizationClient(`127.0.0.1:${w.server.server.grpcPort}`);
    try {
      // The request's own traceparent (the client's, as the request arrived) is not the parent then.
      const request = envoyCheckRequest({
        path: PATH,
        policy: "kube-api-proxy",
        headers: { authorization: `Bearer ${await pluginToken()}`, traceparent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01" },
      });
      const response = await new Promise<CheckResponse>((resolveCheck, reject) => {
        const unary = (client as unknown as Record<string, Function>)["Check"]!.bind(client);
        unary(request, metadata, (err: Error | null, res: CheckResponse) => (err ? reject(err) : resolveCheck(res)));
      });
      expect(summarize(response)).toMatchObject({ allowed: true });
    } finally {
      client.close();
    }
    const root = checkSpan();
    expect(root.spanContext().traceId).toBe(ENVOY_TRACE_ID);
    expect(root.parentSpanContext?.spanId).toBe(callSpanId);
    // The plugin's ServiceAccount token is cached from the first test: no TokenRequest this time.
    expect(childrenOf(root).map((s) => s.name).sort()).toEqual(["kube-subjectaccessreview", "openfga"]);
    expect(root.attributes[`${ATTRIBUTES.cachePrefix}service_account_token`]).toBe("hit");
  });

  it("follows Envoy's decision not to sample: no span at all", async () => {
    expect(await check({ traceparent: traceparent("00") })).toMatchObject({ allowed: true });
    expect(spans()).toEqual([]);
  });

  it("without a traceparent, samples by sampleRatio (0 here): no span at all", async () => {
    expect(await check({})).toMatchObject({ allowed: true });
    expect(spans()).toEqual([]);
  });

  it("an unparseable traceparent starts a new trace, sampled by sampleRatio", async () => {
    expect(await check({ traceparent: "00-not-a-trace-01" })).toMatchObject({ allowed: true });
    expect(spans()).toEqual([]);
  });
});

describe("tracing off (the default)", () => {
  it("is off unless enabled in the configuration", () => {
    expect(configSchema.shape.tracing.parse(undefined).enabled).toBe(false);
  });

  it("leaves the checker as it is and runs dependency calls without a span", async () => {
    await tracing.shutdown();
    try {
      const checker = async () => ({ status: { code: 0, message: "" } });
      expect(tracedChecks(checker)).toBe(checker);
      expect(await inDependencySpan("openfga", { a: "b" }, async () => "answered")).toBe("answered");
      expect(await check({ traceparent: traceparent("01") })).toMatchObject({ allowed: true });
      expect(spans()).toEqual([]);
    } finally {
      tracing = await startTracing(TRACING, pino({ level: "silent" }), { processor: new SimpleSpanProcessor({ exporter }) });
    }
  });
});
