/**
 * Request mode and the raw backslash. Envoy's normalize_path (its snapshot of Chromium's path
 * canonicalizer: "We treat slashes and backslashes the same", source/common/chromium_url) reads `\`
 * as `/`, so to the generated Envoy `/a/..\b` is a dot-segment path it rewrites before routing and
 * before the check. Behind a gateway that does not normalize (Istio with
 * `pathNormalization: NONE`, an Envoy without normalize_path) the raw path reaches portcullis, and
 * an upstream that reads `\` as `/` as Envoy does (Node's WHATWG URL parser, for one) serves
 * another object than the one the policy decided on: `projects/team-a/..\..\projects/team-b`. Request
 * mode refuses it, as it refuses `%5C` and dot segments (400 bad-request, before any policy).
 */
import { resolve } from "node:path";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { createChecker } from "../../src/authz/check.ts";
import { allow } from "../../src/authz/decision.ts";
import type { Policy } from "../../src/authz/policy.ts";
import { POLICY_NAMES } from "../../src/config/policy-names.ts";
import { unsafePath } from "../../src/authz/request-mode.ts";
import { buildRouteTable } from "../../src/config/route-table.ts";
import { loadConfig } from "../../src/config/load.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const A = "2a8b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
const B = "3b9c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e";
const example = loadConfig(resolve(ROOT, "deploy/examples/portcullis.yaml"));
const TABLE = buildRouteTable({ envoy: example.envoy!, platform: example.platform });
const policies: Policy[] = POLICY_NAMES.map((name) => ({ name, bodyShape: "json", decide: async () => allow({ set: {}, remove: [] }) }));
const requestMode = createChecker({ policies, audit: { pluginRequest: () => {}, pluginTokenReplay: () => {} }, timeoutMs: 5_000, retryAfterSeconds: 1, logger: pino({ level: "silent" }), routeTable: TABLE });

async function outcome(authority: string, path: string): Promise<string> {
  const res = await requestMode({ attributes: { request: { http: { method: "GET", path, host: authority, headers: { ":authority": authority } } }, context_extensions: {} } });
  if (res.status.code === 0) return "allowed";
  const reason = res.denied_response!.headers.find((h) => h.header.key === "x-portcullis-reason")?.header.value;
  return `${res.denied_response!.status.code} ${reason}`;
}

describe("request mode refuses a raw backslash, which Envoy's normalize_path reads as a slash", () => {
  const rows: Array<[name: string, authority: string, path: string]> = [
    ["Konfidence: one project's route, another project's stages", "konfidence.fundament.io", "/api/v1/projects/team-a/..\\..\\projects/team-b/stages"],
    ["kube-api-proxy: a namespace climbed out of", "kube-api-proxy.fundament.io", `/clusters/${C1}/api/v1/namespaces/team-a\\..\\kube-system/secrets`],
    ["plugin-proxy: one installation's controller route, another's", "plugin-proxy.fundament.io", `/installations/${A}/controller\\..\\..\\${B}\\controller/status`],
    ["a platform API", "api.fundament.io", "/dcim.v1.RackService/List\\..\\..\\organization.v1.X/Y"],
    ["a lone backslash", "kube-api-proxy.fundament.io", `/clusters/${C1}/api/v1/namespaces/a\\b/pods`],
  ];
  it.each(rows)("%s", async (_name, authority, path) => {
    expect(unsafePath(path)).toBeDefined();
    expect(await outcome(authority, path)).toBe("400 bad-request");
  });

  it("the same paths with their backslashes percent-encoded were refused already; without any, they pass", async () => {
    for (const [, authority, path] of rows) expect(await outcome(authority, path.replaceAll("\\", "%5C"))).toBe("400 bad-request");
    expect(await outcome("konfidence.fundament.io", "/api/v1/projects/team-a/stages")).toBe("allowed");
    expect(await outcome("kube-api-proxy.fundament.io", `/clusters/${C1}/api/v1/namespaces/team-a/secrets`)).toBe("allowed");
  });
});
