/**
 * Runs a suite written for contextExtensions mode once more in request mode (`check.policyFrom:
 * request`), the way Istio's gateway calls portcullis: no context_extensions, the policy chosen by
 * the route table from the authority and path. A `*.request-mode.test.ts` file imports
 * `./request-mode-on.ts` and then the suite; test/support/server.ts then starts every server with
 * an envoy section and request mode, and sends every CheckRequest through toRequestMode.
 *
 * The hosts: one per policy's origin, one per platform service. A request whose context extension
 * the table would not choose for its path (a suite feeding a policy a path no route sends it, to
 * test the policy alone) keeps its context extension, as a gateway that names the policy would
 * send it; `counts` says how many went each way, and the run asserts the table chose for at least
 * 95% of them.
 *
 * Answers are compared without the `access-control-*` response headers request mode adds for the
 * allowed origin: in contextExtensions mode Envoy's CORS filter adds the same ones on the way back
 * (test/authz/request-mode.test.ts holds them).
 */
import { afterAll, expect } from "vitest";
import { buildRouteTable, routeFinder, routeTableProblems } from "../../src/config/route-table.ts";
import { envoySchema } from "../../src/config/envoy-schema.ts";
import type { Config } from "../../src/config/schema.ts";
import type { CheckResponse } from "./envoy.ts";

let enabled = false;
export const counts = { viaTable: 0, viaContextExtensions: 0 };

export const REQUEST_MODE_ORIGINS = {
  console: "https://console.fundament.test",
  kubeApiProxy: "https://kube-api-proxy.fundament.test",
  pluginProxy: "https://plugin-proxy.fundament.test",
  konfidence: "https://konfidence.fundament.test",
} as const;
const platformOrigin = (service: string) => `https://${service}.platform.fundament.test`;

/** Called once, before the suite is imported. */
export function enableRequestMode(): void {
  enabled = true;
  afterAll(() => {
    // Nearly all of a suite's requests must have been routed by the table, or the run proves little
    // (at the time of writing 1 of 118, 1 of 38, 7 of 684, 0 of 69 and 0 of 40 kept theirs).
    expect(counts.viaTable).toBeGreaterThan(0);
    expect(counts.viaContextExtensions).toBeLessThanOrEqual(counts.viaTable / 20);
  });
}

export function requestModeEnabled(): boolean {
  return enabled;
}

/** The configuration in request mode: an envoy section naming these hosts (its upstreams unused by the server). */
export function requestModeConfig(config: Config): Config {
  if (!enabled) return config;
  const envoy = envoySchema.parse({
    origins: { ...REQUEST_MODE_ORIGINS, ...(config.konfidence === undefined ? { konfidence: undefined } : {}) },
    clusters: config.clusters.map((c) => ({ id: c.id, apiServer: "https://127.0.0.1:6443", caFile: "/ca.crt" })),
    upstreams: { assets: { url: "http://assets:8080" }, ...(config.konfidence === undefined ? {} : { konfidence: { url: "http://konfidence:8080" } }) },
    platform: config.platform.services.map((s) => ({ name: s.name, origin: platformOrigin(s.name), upstream: { url: `http://${s.name}:8080` } })),
  });
  const table = buildRouteTable({ envoy, platform: config.platform });
  const problems = routeTableProblems(table);
  if (problems.length > 0) throw new Error(`request-mode table: ${problems.map((p) => p.message).join("; ")}`);
  const result = { ...config, check: { ...config.check, policyFrom: "request" as const }, envoy };
  tables.set(result, table);
  return result;
}

const tables = new WeakMap<Config, ReturnType<typeof buildRouteTable>>();

/** The host a gateway would have received the request on, for the policy (and service) the suite names. */
function hostFor(policy: string | undefined, service: string | undefined): string {
  switch (policy) {
    case "kube-api-proxy":
      return new URL(REQUEST_MODE_ORIGINS.kubeApiProxy).host;
    case "plugin-proxy":
    case "plugin-assets":
      return new URL(REQUEST_MODE_ORIGINS.pluginProxy).host;
    case "konfidence-api":
      return new URL(REQUEST_MODE_ORIGINS.konfidence).host;
    case "platform-api":
    case "public":
      return new URL(platformOrigin(service ?? "none")).host;
    default:
      return "unrouted.fundament.test";
  }
}

type Json = Record<string, any>;

/** A CheckRequest as a gateway without context extensions sends it (see the module comment). */
export function toRequestMode(config: Config, request: object): object {
  const table = tables.get(config);
  if (!enabled || table === undefined) return request;
  const copy = structuredClone(request) as Json;
  const http: Json | undefined = copy["attributes"]?.request?.http;
  if (http === undefined) return request;
  const extensions: Record<string, string> = copy["attributes"].context_extensions ?? {};
  const host = hostFor(extensions["policy"], extensions["service"]);
  http["host"] = host;
  if (http["headers"] !== undefined) http["headers"][":authority"] = host;
  const target = String(http["path"] ?? "");
  const split = target.search(/[?#]/);
  const path = split === -1 ? target : target.slice(0, split);
  const { route } = routeFinder(table)(host, path);
  if (route?.policy === extensions["policy"] && route?.service === extensions["service"]) {
    copy["attributes"].context_extensions = {};
    counts.viaTable++;
  } else {
    counts.viaContextExtensions++;
  }
  return copy;
}


/** The answer without the CORS response headers request mode adds (see the module comment). */
export function withoutCorsHeaders(response: CheckResponse): CheckResponse {
  if (!enabled) return response;
  const copy = structuredClone(response) as CheckResponse & { ok_response?: { response_headers_to_add?: unknown[] } };
  if (copy.ok_response !== undefined) delete copy.ok_response.response_headers_to_add;
  if (copy.denied_response?.headers !== undefined) copy.denied_response.headers = copy.denied_response.headers.filter((h) => !h.header.key.startsWith("access-control-"));
  return copy;
}
