/**
 * portcullis installed beside Fundament under Envoy Gateway, proved on Envoy Gateway's own translator
 * (`egctl experimental translate`, v1.9.1, built from the Go module proxy by scripts/deps/install.sh;
 * offline, about a second). Its input: Fundament's HTTPRoutes as Fundament's chart renders them (the
 * fixture, test/deploy/fixtures/fundament-httproutes.yaml), every object portcullis's chart renders
 * for `gateway.mode: envoyGateway` from values alone, the Gateway, and the Services the routes name.
 * From its xDS, decoded strictly against the vendored Envoy protos:
 *   - every object of both charts is Accepted, its references resolved;
 *   - the ext_authz filters fail closed, run before the router, and call portcullis-ext-authz within
 *     the deadline;
 *   - every route of every protected host (the platform services' and Konfidence's origins) turns
 *     ext_authz on with no context extensions, so portcullis's route table chooses the policy from
 *     the request; every route of the kube-api-proxy and plugin-proxy hosts goes to the data-plane
 *     Envoy's Service, with no check at the gateway (that Envoy checks it, per route);
 *   - the same reading names the routes left uncovered when one of Fundament's HTTPRoutes has no
 *     SecurityPolicy, or Fundament is installed under another release name.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { buildRouteTable, routeFinder } from "../../src/config/route-table.ts";
import { extAuthzTimeoutMs } from "../../src/deploy/envoy-config.ts";
import { decodeMessage } from "../../src/envoy/bootstrap.ts";
import { resolveBinary } from "../harness/binaries.ts";
import {
  backendServices,
  chartServices,
  dataPlaneHosts,
  dataPlaneServices,
  fundamentRoutes,
  GATEWAY,
  gatewayConfig as config,
  gatewayObjects,
  type Json,
  modeValues,
  protectedHosts,
  RELEASE_NAMESPACE,
  serviceKey,
} from "../support/gateway.ts";
import { helmTemplate } from "../support/helm.ts";
import type { Manifest } from "../support/kustomize.ts";

const EXT_AUTHZ = "envoy.filters.http.ext_authz";
const PROTECTED = protectedHosts(config);
const DATA_PLANE = dataPlaneHosts(config);

/** One translation: its output, the objects both charts contributed, and the data-plane Services. */
interface Translation {
  readonly output: Json;
  readonly mine: Manifest[];
  readonly routes: Manifest[];
  readonly dataPlane: Set<string>;
}

let dir: string;
let base: Translation;

/** egctl's translation of Fundament's `routes` beside portcullis's chart rendered with `values`. */
function translate(name: string, routes: Manifest[], values: Json): Translation {
  // The NetworkPolicy and the workloads are Kubernetes', not Envoy Gateway's.
  const chart = helmTemplate(values).filter((o) => ["SecurityPolicy", "ReferenceGrant", "BackendTLSPolicy", "Service"].includes(o["kind"]));
  const services = chartServices(chart).map((s, i) => (s["spec"].clusterIP === "None" ? s : { ...s, spec: { ...s["spec"], clusterIP: `10.96.0.${10 + i}` } }));
  const policies = chart.filter((o) => o["kind"] !== "Service").map((o) => ({ ...o, metadata: { ...o["metadata"], namespace: o["metadata"].namespace ?? RELEASE_NAMESPACE } }));
  const world = [...gatewayObjects({ name: "envoy-gateway", controllerName: "gateway.envoyproxy.io/gatewayclass-controller" }, ["fundament"]), ...services, ...backendServices(routes, services, (i) => `10.96.1.${10 + i}`)];
  writeFileSync(join(dir, `${name}.yaml`), [...world, ...routes, ...policies].map((o) => stringify(o)).join("---\n"));
  const out = execFileSync(resolveBinary("egctl"), ["experimental", "translate", "--from", "gateway-api", "--to", "gateway-api,xds", "--file", join(dir, `${name}.yaml`), "--output", "json"], {
    encoding: "utf8",
    maxBuffer: 64 << 20,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return { output: JSON.parse(out) as Json, mine: [...routes, ...policies], routes, dataPlane: dataPlaneServices(chart) };
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-egctl-"));
  base = translate("both-charts", fundamentRoutes(), modeValues("envoyGateway"));
}, 60_000);

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The config dump of the one Gateway. */
function configDump(t: Translation): Json[] {
  const xds = t.output["xds"] as Json;
  expect(Object.keys(xds)).toEqual([`${GATEWAY.namespace}/${GATEWAY.name}`]);
  return xds[`${GATEWAY.namespace}/${GATEWAY.name}`].configs as Json[];
}
const dumpOf = (t: Translation, type: string) => configDump(t).find((c) => c["@type"] === `type.googleapis.com/envoy.admin.v3.${type}`)!;

/**
 * Strict decode against the vendored protos; the decoded message as plain JSON with proto field
 * names. The dump's entries are Anys: their `@type` must be the type decoded.
 */
function decoded(typeName: string, value: Json): Json {
  const { "@type": type, ...fields } = value;
  expect(type).toBe(`type.googleapis.com/${typeName}`);
  const result = decodeMessage(typeName, fields);
  if (!result.ok) throw new Error(`${typeName} does not decode: ${result.errors.slice(0, 5).join("; ")}`);
  return result.message.toJSON() as Json;
}

/** The Gateway's listeners, decoded; Envoy Gateway's own readiness listener (a fixed 500 for its probe) aside. */
const gatewayListeners = (t: Translation): Json[] =>
  (dumpOf(t, "ListenersConfigDump")["dynamicListeners"] as Json[])
    .map((l) => decoded("envoy.config.listener.v3.Listener", l["activeState"]["listener"]))
    .filter((l) => l["name"].startsWith(`${GATEWAY.namespace}/${GATEWAY.name}/`));

/** The HTTP filters of every filter chain of the Gateway's listeners. */
const httpFilterLists = (t: Translation): Json[][] =>
  gatewayListeners(t).flatMap((listener) =>
    [...(listener["filter_chains"] ?? []), ...(listener["default_filter_chain"] === undefined ? [] : [listener["default_filter_chain"]])].map(
      (chain: Json) => chain["filters"].find((f: Json) => f.name === "envoy.filters.network.http_connection_manager").typed_config.http_filters as Json[],
    ),
  );

/** Every route, decoded, with its virtual host and the HTTPRoute rule Envoy Gateway records in its metadata. */
function routesOf(t: Translation): { vh: Json; route: Json; origin: Json | undefined }[] {
  return (dumpOf(t, "RoutesConfigDump")["dynamicRouteConfigs"] as Json[]).flatMap((c) => {
    const rc = decoded("envoy.config.route.v3.RouteConfiguration", c["routeConfig"]);
    return (rc["virtual_hosts"] as Json[]).flatMap((vh, i) =>
      (vh["routes"] as Json[]).map((route, j) => {
        const raw = c["routeConfig"]["virtualHosts"][i]["routes"][j] as Json;
        return { vh, route, origin: raw["metadata"]?.filterMetadata?.["envoy-gateway"]?.resources?.[0] as Json | undefined };
      }),
    );
  });
}

/** The route's ext_authz: "off" when no per-route config turns the (disabled) filter on; else its ExtAuthzPerRoute. */
function extAuthzOf(route: Json): "off" | Json {
  const on = Object.entries(route["typed_per_filter_config"] ?? {}).filter(([name]) => name.startsWith(EXT_AUTHZ));
  if (on.length === 0) return "off";
  expect(on, route["name"]).toHaveLength(1);
  const [filter, value] = on[0]! as [string, Json];
  // Envoy Gateway enables its filter per route with a FilterConfig, or configures it with ExtAuthzPerRoute.
  const perRoute = value["@type"] === "type.googleapis.com/envoy.config.route.v3.FilterConfig" ? value["config"] : value;
  if (perRoute?.["disabled"] === true) return "off";
  return { filter, perRoute: perRoute ?? {} };
}

/**
 * What is wrong with the translation's coverage: each route of a protected host that does not pass
 * ext_authz with nothing choosing the policy but the request; each route of a data-plane host that
 * is checked at the gateway or does not lead to the data-plane Envoy; each such host with no route.
 */
function uncovered(t: Translation): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const { vh, route, origin } of routesOf(t)) {
    const host = (vh["domains"] as string[])[0]!;
    const where = `${host} ${route["name"]}`;
    const authz = extAuthzOf(route);
    if (PROTECTED.includes(host)) {
      seen.add(host);
      if (authz === "off") problems.push(`${where}: reaches ${origin?.["name"]} without the check`);
      // Context extensions would name the policy for the whole route; the route table must choose it.
      else if (Object.keys(authz["perRoute"]["check_settings"]?.context_extensions ?? {}).length > 0) problems.push(`${where}: context extensions ${JSON.stringify(authz["perRoute"].check_settings.context_extensions)}`);
    } else if (DATA_PLANE.includes(host)) {
      seen.add(host);
      if (authz !== "off") problems.push(`${where}: checked at the gateway, and again by the data-plane Envoy`);
      const rule = t.routes.find((r) => r["metadata"].name === origin?.["name"]);
      const refs = rule === undefined ? [] : ((rule["spec"].rules as Json[]).flatMap((r) => r["backendRefs"] ?? []) as Json[]);
      const outside = refs.map((ref) => serviceKey(ref["namespace"] ?? rule!["metadata"].namespace, ref["name"])).filter((s) => !t.dataPlane.has(s));
      if (refs.length === 0 || outside.length > 0) problems.push(`${where}: goes to ${outside.join(", ") || "nothing"}, not the data-plane Envoy`);
    }
  }
  for (const host of [...PROTECTED, ...DATA_PLANE]) if (!seen.has(host)) problems.push(`${host} has no route at the Gateway`);
  return problems;
}

/** The problems on the protected hosts (each problem starts with its host). */
const onProtectedHosts = (problems: string[]) => problems.filter((p) => PROTECTED.includes(p.split(" ")[0]!));

describe("Envoy Gateway's translator, Fundament's routes and portcullis's chart together", () => {
  it("accepts every object of both charts, references resolved", () => {
    const { xds: _, ...resources } = base.output;
    const notAccepted: string[] = [];
    const conditionsOf = (o: Json): Json[] => [...(o["status"]?.conditions ?? []), ...(o["status"]?.parents ?? []).flatMap((p: Json) => p.conditions), ...(o["status"]?.ancestors ?? []).flatMap((a: Json) => a.conditions)];
    let counted = 0;
    for (const [kind, list] of Object.entries(resources)) {
      if (!Array.isArray(list)) continue;
      for (const o of list as Json[]) {
        if (!base.mine.some((m) => m["kind"] === o["kind"] && m["metadata"].name === o["metadata"]?.name && m["metadata"].namespace === o["metadata"]?.namespace)) continue;
        counted++;
        for (const c of conditionsOf(o)) {
          if ((c.type === "Accepted" || c.type === "ResolvedRefs") && c.status !== "True") notAccepted.push(`${kind} ${o["metadata"].name}: ${c.type} ${c.reason} ${c.message}`);
        }
      }
    }
    expect(notAccepted).toEqual([]);
    expect(counted).toBe(base.mine.length);
  });

  it("decodes strictly against Envoy's protos: every listener, every route configuration", () => {
    const all = (dumpOf(base, "ListenersConfigDump")["dynamicListeners"] as Json[]).map((l) => decoded("envoy.config.listener.v3.Listener", l["activeState"]["listener"]));
    expect(all.length).toBe(2);
    expect(gatewayListeners(base)).toHaveLength(1);
    expect(routesOf(base).length).toBeGreaterThan(0);
  });

  it("runs each SecurityPolicy's ext_authz fail closed, before the router, on portcullis-ext-authz within Envoy's deadline", () => {
    const policies = base.mine.filter((o) => o["kind"] === "SecurityPolicy");
    expect(policies.map((p) => p["spec"].targetRefs[0].name).sort()).toEqual(["fundament-authn-api", "fundament-dcim-api", "fundament-organization-api"]);
    for (const filters of httpFilterLists(base)) {
      const names = filters.map((f) => f["name"] as string);
      const authz = filters.filter((f) => f["name"].startsWith(EXT_AUTHZ));
      expect(authz.length, names.join(", ")).toBe(policies.length);
      for (const f of authz) {
        expect(names.indexOf(f["name"])).toBeLessThan(names.indexOf("envoy.filters.http.router"));
        const c = f["typed_config"];
        expect(c.failure_mode_allow ?? false).toBe(false);
        expect(c.status_on_error).toEqual({ code: "ServiceUnavailable" });
        const timeoutMs = Number(c.grpc_service.timeout.seconds) * 1000 + c.grpc_service.timeout.nanos / 1e6;
        expect(timeoutMs).toBe(extAuthzTimeoutMs(config));
        expect(timeoutMs).toBeGreaterThan(config.check.timeoutMs);
        expect(c.grpc_service.envoy_grpc.authority).toBe(`portcullis-ext-authz.${RELEASE_NAMESPACE}:9001`);
        // Off by default: a route its SecurityPolicy targets turns it on; no other route is checked by it.
        expect(f["disabled"]).toBe(true);
      }
    }
  });

  it("applies the stream bounds portcullis sets (issue 54): no header mutation rules to refuse x-envoy-upstream-stream-duration-ms", () => {
    const authz = httpFilterLists(base).flatMap((filters) => filters.filter((f: Json) => f.name.startsWith(EXT_AUTHZ)));
    expect(authz.length).toBeGreaterThan(0);
    // With decoder_header_mutation_rules and no allow_envoy, Envoy would refuse x-envoy-* headers from the check.
    for (const f of authz) expect(f.typed_config).not.toHaveProperty("decoder_header_mutation_rules");
  });

  it("every route of every protected host passes ext_authz, the policy chosen from the request", () => {
    expect(onProtectedHosts(uncovered(base))).toEqual([]);
  });

  it("every route of the kube-api-proxy and plugin-proxy hosts goes to the data-plane Envoy's Service, unchecked at the gateway (that Envoy checks it)", () => {
    expect(uncovered(base).filter((p) => DATA_PLANE.includes(p.split(" ")[0]!))).toEqual([]);
  });

  it("reaches portcullis with a host and path its route table decides: Fundament's catch-all on each protected host is a host of the table", () => {
    const find = routeFinder(buildRouteTable({ envoy: config.envoy!, platform: config.platform }));
    for (const host of PROTECTED) {
      // A path no route names (a new Connect package, `/healthz`): the host is known, the route is not, so `no-policy`, never a pass.
      expect(find(host, "/healthz").host, host).toBeDefined();
      expect(find(host, "/healthz").route?.policy, host).toBeUndefined();
    }
  });
});

describe("Fundament in another namespace (gateway.coveredRoutes.namespace)", () => {
  it("its routes are covered: the SecurityPolicies beside them reach portcullis-ext-authz through the chart's ReferenceGrant", () => {
    const values = modeValues("envoyGateway");
    values["gateway"].coveredRoutes = { namespace: "fundament", names: ["fundament-authn-api", "fundament-organization-api", "fundament-dcim-api"] };
    const t = translate("other-namespace", fundamentRoutes("fundament"), values);
    expect(t.mine.filter((o) => o["kind"] === "ReferenceGrant")).toHaveLength(1);
    const policies = (t.output["securityPolicies"] ?? []) as Json[];
    expect(policies.map((p) => p["metadata"].namespace)).toEqual(["fundament", "fundament", "fundament"]);
    for (const p of policies) {
      for (const c of (p["status"]?.ancestors ?? []).flatMap((a: Json) => a.conditions)) expect(`${c.type} ${c.status} ${c.message}`).toMatch(/^\w+ True/);
    }
    expect(onProtectedHosts(uncovered(t))).toEqual([]);
  }, 120_000);

  it("without that ReferenceGrant Envoy Gateway refuses the SecurityPolicies' backend, and no route is served unchecked", () => {
    const values = modeValues("envoyGateway");
    values["gateway"].coveredRoutes = { namespace: "fundament", names: ["fundament-authn-api", "fundament-organization-api", "fundament-dcim-api"] };
    const t = translate("other-namespace-no-grant", fundamentRoutes("fundament"), values);
    // The same objects, the grant left out.
    const input = join(dir, "other-namespace-no-grant.yaml");
    const without = readFileSync(input, "utf8").split("---\n").filter((doc) => !doc.includes("kind: ReferenceGrant")).join("---\n");
    writeFileSync(input, without);
    const out = JSON.parse(execFileSync(resolveBinary("egctl"), ["experimental", "translate", "--from", "gateway-api", "--to", "gateway-api,xds", "--file", input, "--output", "json"], { encoding: "utf8", maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "pipe"] })) as Json;
    const conditions = ((out["securityPolicies"] ?? []) as Json[]).flatMap((p) => (p["status"]?.ancestors ?? []).flatMap((a: Json) => a.conditions));
    expect(conditions.some((c: Json) => c.status === "False")).toBe(true);
    // Fail closed: a route whose policy is invalid is answered by Envoy Gateway itself, never forwarded unchecked.
    const translated = { ...t, output: out };
    for (const { vh, route } of routesOf(translated)) {
      if (!PROTECTED.includes((vh["domains"] as string[])[0]!)) continue;
      expect(extAuthzOf(route) !== "off" || route["direct_response"] !== undefined, `${vh["domains"][0]} ${route["name"]}: ${JSON.stringify(route).slice(0, 300)}`).toBe(true);
    }
  }, 120_000);
});

describe("a Fundament HTTPRoute left uncovered is named", () => {
  it("its SecurityPolicy dropped (gateway.coveredRoutes.names without it)", () => {
    const values = modeValues("envoyGateway");
    values["gateway"].coveredRoutes = { names: ["fundament-authn-api", "fundament-organization-api"] };
    const problems = onProtectedHosts(uncovered(translate("without-dcim", fundamentRoutes(), values)));
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.every((p) => p.startsWith("dcim.fundament.io ") && p.endsWith("reaches fundament-dcim-api without the check"))).toBe(true);
  }, 120_000);

  it("Fundament installed as another release (its routes renamed), the values still naming `fundament-…`", () => {
    const renamed = fundamentRoutes().map((r) => ({ ...r, metadata: { ...r["metadata"], name: String(r["metadata"].name).replace(/^fundament-/, "platform-") } }));
    const problems = onProtectedHosts(uncovered(translate("renamed", renamed, modeValues("envoyGateway"))));
    expect(new Set(problems.map((p) => p.split(" ")[0]))).toEqual(new Set(PROTECTED));
  }, 120_000);
});
