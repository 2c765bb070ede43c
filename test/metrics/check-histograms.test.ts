/**
 * The per-check histograms (portcullis_check_duration_seconds by policy,
 * portcullis_grpc_server_handling_seconds by method) are counted into plain arrays per check and
 * handed to prom-client at scrape time (src/server/prometheus.ts ObservationCounts): a scrape must
 * read exactly what prom-client's own observe() would have recorded, bucket by bucket, across scrapes.
 */
import { Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { grpcCallsHandled } from "../../src/metrics/grpc-server.ts";
import { publishDecision } from "../../src/metrics/events.ts";
import { createMetrics } from "../../src/server/prometheus.ts";

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
// Sums of these are exact in binary floating point, so the order of additions cannot move a digit.
// On a bound (0.5, 1), between bounds, below the first and past the last (+Inf only).
const FIRST = [0.5, 2 ** -15, 0.0078125, 1, 0.25, 4];
const SECOND = [2 ** -7, 0.5, 8, 2 ** -14];
const METHOD = "envoy.service.auth.v3.Authorization/Check";

/** The metric's series as prom-client writes them when it observed `values` itself. */
async function reference(name: string, label: string, series: Record<string, number[]>): Promise<string[]> {
  const registry = new Registry();
  const histogram = new Histogram({ name, help: "reference", labelNames: [label], buckets: BUCKETS, registers: [registry] });
  for (const [value, observations] of Object.entries(series)) for (const v of observations) histogram.observe({ [label]: value }, v);
  return lines(await registry.metrics(), name);
}

function lines(text: string, name: string): string[] {
  return text.split("\n").filter((l) => l.startsWith(`${name}_`));
}

describe("per-check histograms counted apart from prom-client", () => {
  it("scrape as prom-client's own observe() would have recorded them, bucket by bucket, across scrapes", async () => {
    const metrics = createMetrics({ indexSizes: () => [] });
    const scrape = async (name: string) => lines(await metrics.metrics(), name);
    const publishAll = (values: number[]) => {
      for (const [i, v] of values.entries()) {
        publishDecision(i % 2 === 0 ? "kube-api-proxy" : "plugin-assets", "allowed", v);
        grpcCallsHandled.publish({ method: METHOD, code: "OK", seconds: v });
      }
    };
    const byPolicy = (values: number[]) => ({
      "kube-api-proxy": values.filter((_, i) => i % 2 === 0),
      "plugin-assets": values.filter((_, i) => i % 2 === 1),
    });
    const merged = (a: Record<string, number[]>, b: Record<string, number[]>) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, [...v, ...(b[k] ?? [])]]));

    publishAll(FIRST);
    expect(await scrape("portcullis_check_duration_seconds")).toEqual(await reference("portcullis_check_duration_seconds", "policy", byPolicy(FIRST)));
    expect(await scrape("portcullis_grpc_server_handling_seconds")).toEqual(await reference("portcullis_grpc_server_handling_seconds", "method", { [METHOD]: FIRST }));

    // A scrape with nothing new changes nothing; what arrives later adds to what was there.
    expect(await scrape("portcullis_check_duration_seconds")).toEqual(await reference("portcullis_check_duration_seconds", "policy", byPolicy(FIRST)));
    publishAll(SECOND);
    expect(await scrape("portcullis_check_duration_seconds")).toEqual(
      await reference("portcullis_check_duration_seconds", "policy", merged(byPolicy(FIRST), byPolicy(SECOND))),
    );
    expect(await scrape("portcullis_grpc_server_handling_seconds")).toEqual(
      await reference("portcullis_grpc_server_handling_seconds", "method", { [METHOD]: [...FIRST, ...SECOND] }),
    );
  });

  it("hand the same series to the workers' aggregation (getMetricsAsJSON) as prom-client's own", async () => {
    const metrics = createMetrics({ indexSizes: () => [] });
    publishDecision("public", "allowed", 0.25);
    publishDecision("public", "allowed", 2);
    const json = (await metrics.getMetricsAsJSON()).find((m) => m.name === "portcullis_check_duration_seconds")!;
    const registry = new Registry();
    const histogram = new Histogram({ name: "portcullis_check_duration_seconds", help: "x", labelNames: ["policy"], buckets: BUCKETS, registers: [registry] });
    histogram.observe({ policy: "public" }, 0.25);
    histogram.observe({ policy: "public" }, 2);
    const expected = (await registry.getMetricsAsJSON())[0]!;
    const of = (m: typeof json) => m.values.filter((v) => v.labels["policy"] === "public");
    expect(of(json)).toEqual(of(expected));
  });
});
