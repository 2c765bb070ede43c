/**
 * `portcullis gateway-config`: the manifests for Envoy Gateway and Istio come from the same routes
 * as plain Envoy's (envoyBootstrap), every route that reaches a backend or a checked 404 is behind
 * portcullis with the policy and service plain Envoy names, the committed examples are exactly the
 * generator's output, and bad input is refused. (What Envoy Gateway's own translator makes of them:
 * envoy-gateway-xds.test.ts; what the API server says: test/e2e/gateway-manifests.test.ts.)
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse, parseAllDocuments, stringify } from "yaml";
import { loadConfig, parseConfig } from "../../src/config/load.ts";
import { envoyBootstrap } from "../../src/deploy/envoy-config.ts";
import {
  EXT_AUTHZ_SERVICE,
  gatewayManifests,
  gatewayRoutes,
  GatewayConfigError,
  istioMeshConfig,
  placeRules,
  renderGatewayYaml,
  type GatewayOptions,
} from "../../src/deploy/gateway-config.ts";
import { buildRouteTable, routeFinder } from "../../src/config/route-table.ts";
import { cli } from "../cli/run.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const EXAMPLE = resolve(ROOT, "deploy/examples/portcullis.yaml");
type Json = Record<string, any>;

const example = () => loadConfig(EXAMPLE);
export const EXAMPLE_OPTIONS: Record<GatewayOptions["target"], GatewayOptions> = {
  "envoy-gateway": { target: "envoy-gateway", namespace: "fundament-system", gateway: { namespace: "fundament-gateway", name: "fundament" }, proxyNamespace: "envoy-gateway-system" },
  istio: { target: "istio", namespace: "fundament-system", gateway: { namespace: "fundament-gateway", name: "fundament" }, proxyNamespace: "fundament-gateway" },
};
const of = (objects: Json[], kind: string) => objects.filter((o) => o["kind"] === kind);

/** Every route of plain Envoy's bootstrap that portcullis checks: host, name, context extensions. */
function checkedEnvoyRoutes(config = example()): { host: string; name: string; context: Json; headerRouted: boolean; directResponse: boolean }[] {
  const hcm = (envoyBootstrap(config) as Json)["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config;
  return (hcm.route_config.virtual_hosts as Json[]).flatMap((v) =>
    (v["routes"] as Json[])
      .filter((r) => r["typed_per_filter_config"]?.["envoy.filters.http.ext_authz"]?.disabled !== true)
      .map((r) => ({
        host: v["domains"][0],
        name: r["name"],
        context: r["typed_per_filter_config"]["envoy.filters.http.ext_authz"].check_settings.context_extensions,
        headerRouted: r["match"].headers !== undefined || r["route"]?.cluster_header !== undefined,
        directResponse: r["direct_response"] !== undefined,
      })),
  );
}

describe("the gateway routes are plain Envoy's", () => {
  it("every checked Envoy route is a gateway route with its policy and service, or listed unroutable because portcullis's headers choose its upstream", () => {
    const { routes, unroutable } = gatewayRoutes(example());
    const envoyRoutes = checkedEnvoyRoutes();
    expect(routes.length + unroutable.length).toBe(envoyRoutes.length);
    for (const e of envoyRoutes) {
      const g = routes.find((r) => r.envoyRoute === e.name);
      if (e.headerRouted || e.name.startsWith("plugin-runtime-") || e.name.startsWith("plugin-controller-")) {
        expect(g, e.name).toBeUndefined();
        expect(unroutable.map((u) => u.envoyRoute)).toContain(e.name);
        continue;
      }
      expect(g, e.name).toBeDefined();
      expect({ host: g!.host, policy: g!.policy, ...(g!.service === undefined ? {} : { service: g!.service }) }).toEqual({ host: e.host, ...e.context });
      expect(g!.backend.kind === "not-found").toBe(e.directResponse);
    }
  });

  it.each([
    [{ prefix: "/clusters/" }, { type: "PathPrefix", value: "/clusters/" }],
    [{ prefix: "/authn.v1." }, { type: "RegularExpression", value: "/authn\\.v1\\..*" }],
  ])("an Envoy match %j is the Gateway API match %j", (match, expected) => {
    const route = gatewayRoutes(example()).routes.find((r) => JSON.stringify(r.path) === JSON.stringify(expected));
    expect(route, JSON.stringify(match)).toBeDefined();
  });

  it("exact public paths stay exact, and `/login` is a whole-segment prefix", () => {
    const authn = gatewayRoutes(example()).routes.filter((r) => r.service === "authn-api");
    expect(authn.find((r) => r.path.value === "/authn.v1.TokenService/ExchangeToken")).toMatchObject({ path: { type: "Exact" }, policy: "public" });
    expect(authn.find((r) => r.path.value === "/login" && r.policy === "platform-api")).toMatchObject({ path: { type: "PathPrefix" } });
  });
});

describe("Envoy Gateway", () => {
  const objects = gatewayManifests(example(), EXAMPLE_OPTIONS["envoy-gateway"]);
  const routes = of(objects, "HTTPRoute");
  const policies = of(objects, "SecurityPolicy");

  it("every rule of every HTTPRoute is targeted by exactly one SecurityPolicy, whose contextExtensions are the Envoy route's", () => {
    const envoyRoutes = checkedEnvoyRoutes();
    let rules = 0;
    for (const route of routes) {
      for (const rule of route["spec"].rules) {
        rules++;
        const targeting = policies.filter((p) => p["spec"].targetRefs.some((t: Json) => t.kind === "HTTPRoute" && t.name === route["metadata"].name && t.sectionName === rule.name));
        expect(targeting, `${route["metadata"].name}/${rule.name}`).toHaveLength(1);
        const context = Object.fromEntries(targeting[0]!["spec"].extAuth.contextExtensions.map((c: Json) => [c.name, c.value]));
        // The Envoy route this rule was placed for, and that it matches the same paths.
        const placed = placeRules(gatewayRoutes(example()).routes).find((p) => p.httpRoute === route["metadata"].name && p.sectionName === rule.name)!;
        expect(rule.matches).toEqual([{ path: placed.route.path }]);
        const envoyRoute = envoyRoutes.find((e) => e.host === route["spec"].hostnames[0] && e.name === placed.route.envoyRoute);
        expect(context, rule.name).toEqual(envoyRoute!.context);
      }
    }
    expect(rules).toBe(gatewayRoutes(example()).routes.length);
  });

  it("fails closed: failOpen false, 503 on error, a deadline above check.timeoutMs, the ClusterIP Service", () => {
    const config = example();
    for (const p of policies) {
      const ext = p["spec"].extAuth;
      expect(ext).toMatchObject({ failOpen: false, statusOnError: 503, grpc: { backendRefs: [{ kind: "Service", name: EXT_AUTHZ_SERVICE, port: 9001 }] } });
      expect(Number(/^(\d+)ms$/.exec(ext.timeout)![1])).toBeGreaterThan(config.check.timeoutMs);
      expect(ext.recomputeRoute).toBe(ext.contextExtensions[0].value === "plugin-proxy");
    }
  });

  it("answers preflights as plain Envoy does: each host's one admitted origin, before the check (no token)", () => {
    const corsOf = (name: string) => policies.find((p) => p["metadata"].name === name)!["spec"].cors;
    expect(corsOf("portcullis-kube-api-proxy")).toMatchObject({ allowOrigins: ["https://plugin-proxy.fundament.io"], allowCredentials: false, maxAge: "600s" });
    expect(corsOf("portcullis-plugin-assets")).toEqual(corsOf("portcullis-kube-api-proxy"));
    expect(corsOf("portcullis-platform-api-authn-api")).toMatchObject({ allowOrigins: ["https://console.fundament.io"], allowCredentials: true, allowMethods: ["GET", "POST"] });
    expect(corsOf("portcullis-konfidence-api")).toBeUndefined();
  });

  it("rejects escaped slashes and headers with underscores on the Gateway, as plain Envoy's connection manager does", () => {
    expect(of(objects, "ClientTrafficPolicy")).toEqual([
      expect.objectContaining({
        metadata: expect.objectContaining({ namespace: "fundament-gateway" }),
        spec: {
          targetRefs: [{ group: "gateway.networking.k8s.io", kind: "Gateway", name: "fundament" }],
          path: { escapedSlashesAction: "RejectRequest", disableMergeSlashes: false },
          headers: { withUnderscoresAction: "RejectRequest" },
        },
      }),
    ]);
  });

  it("grants the HTTPRoutes each Service in another namespace, and checks TLS to https upstreams against their CA", () => {
    const grants = of(objects, "ReferenceGrant");
    expect(grants.map((g) => [g["metadata"].namespace, g["spec"].to.map((t: Json) => t.name)])).toEqual([["default", ["kubernetes"]], ["konfidence-system", ["konfidence-api"]]]);
    for (const g of grants) expect(g["spec"].from).toEqual([{ group: "gateway.networking.k8s.io", kind: "HTTPRoute", namespace: "fundament-system" }]);
    expect(of(objects, "BackendTLSPolicy").map((p) => p["spec"])).toEqual([
      { targetRefs: [{ group: "", kind: "Service", name: "kubernetes" }], validation: { caCertificateRefs: [{ group: "", kind: "ConfigMap", name: "kube-root-ca.crt" }], hostname: "kubernetes.default.svc.cluster.local" } },
    ]);
    // The API server outside the cluster: an Envoy Gateway Backend carrying its own TLS settings.
    expect(of(objects, "Backend").map((b) => b["spec"].endpoints)).toEqual([[{ fqdn: { hostname: "api.workload-1.fundament.io", port: 6443 } }]]);
  });

  it("answers a path under /clusters/ or /installations/ that it cannot route with a checked 404", () => {
    const notFound = routes.flatMap((r) => r["spec"].rules).filter((rule: Json) => rule.filters?.some((f: Json) => f.type === "ExtensionRef"));
    expect(notFound.map((r: Json) => r.matches[0].path)).toEqual([
      { type: "PathPrefix", value: "/clusters/" },
      { type: "PathPrefix", value: "/installations/" },
    ]);
    expect(of(objects, "HTTPRouteFilter")[0]!["spec"].directResponse.statusCode).toBe(404);
  });

  it("admits the Gateway's proxy pods, in Envoy Gateway's namespace, to the gRPC port", () => {
    const policy = of(objects, "NetworkPolicy")[0]!;
    expect(policy["spec"].ingress).toEqual([
      {
        from: [{
          namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "envoy-gateway-system" } },
          podSelector: { matchLabels: { "gateway.envoyproxy.io/owning-gateway-name": "fundament", "gateway.envoyproxy.io/owning-gateway-namespace": "fundament-gateway" } },
        }],
        ports: [{ port: "grpc", protocol: "TCP" }],
      },
    ]);
  });
});

describe("Istio", () => {
  const objects = gatewayManifests(example(), EXAMPLE_OPTIONS.istio);

  it("one CUSTOM AuthorizationPolicy on the Gateway checks every request to every routed host, with or without a port", () => {
    const [policy, ...more] = of(objects, "AuthorizationPolicy");
    expect(more).toEqual([]);
    expect(policy!["spec"]).toMatchObject({ action: "CUSTOM", provider: { name: "portcullis" }, targetRefs: [{ kind: "Gateway", name: "fundament" }] });
    const hosts: string[] = policy!["spec"].rules[0].to[0].operation.hosts;
    for (const r of of(objects, "HTTPRoute")) for (const h of r["spec"].hostnames) expect(hosts).toEqual(expect.arrayContaining([h, `${h}:*`]));
    expect(of(objects, "SecurityPolicy")).toEqual([]);
  });

  it("needs no 404 rules: Istio checks before routing, and a path no rule matches is the gateway's 404", () => {
    for (const r of of(objects, "HTTPRoute")) for (const rule of r["spec"].rules) expect(rule.backendRefs, rule.name).toBeDefined();
    expect(of(objects, "HTTPRouteFilter")).toEqual([]);
  });

  it("reaches the API server outside the cluster through a ServiceEntry, its TLS checked by a BackendTLSPolicy", () => {
    expect(of(objects, "ServiceEntry").map((s) => s["spec"].hosts)).toEqual([["api.workload-1.fundament.io"]]);
    expect(of(objects, "BackendTLSPolicy").map((p) => p["spec"].targetRefs[0].kind)).toEqual(["Service", "ServiceEntry"]);
  });

  it("request mode: for a request each generated rule matches, portcullis's route table chooses the rule's policy and service", () => {
    const config = example();
    const find = routeFinder(buildRouteTable({ envoy: config.envoy!, platform: config.platform }));
    /** Gateway API's meaning of a path match: Exact, PathPrefix by whole segments, a fully matching RE2. */
    const matches = (m: { type: string; value: string }, path: string) =>
      m.type === "Exact" ? path === m.value
      : m.type === "PathPrefix" ? path === m.value.replace(/\/$/, "") || path.startsWith(m.value.endsWith("/") ? m.value : `${m.value}/`)
      : new RegExp(`^(?:${m.value})$`).test(path);
    /** Paths the rule matches: the value itself, one below it, and one more segment. */
    const samples = (m: { type: string; value: string }) => {
      const literal = m.type === "RegularExpression" ? m.value.replace(/\.\*$/, "").replace(/\\(.)/g, "$1") : m.value;
      return [literal, `${literal.replace(/\/$/, "")}/x`, `${literal}Service/Method`, `${literal}api/v1/namespaces`];
    };
    let checked = 0;
    for (const route of of(objects, "HTTPRoute")) {
      const host = route["spec"].hostnames[0] as string;
      const placed = placeRules(gatewayRoutes(config).routes).filter((p) => p.httpRoute === route["metadata"].name);
      for (const rule of route["spec"].rules as Json[]) {
        const intended = placed.find((p) => p.sectionName === rule.name)!.route;
        for (const path of samples(rule.matches[0].path).filter((p) => matches(rule.matches[0].path, p))) {
          // The rule Gateway API would pick for this path is the most specific: skip paths another rule of the host claims more specifically.
          const exactElsewhere = (route["spec"].rules as Json[]).some((r) => r !== rule && r.matches[0].path.type === "Exact" && r.matches[0].path.value === path);
          if (exactElsewhere) continue;
          for (const authority of [host, `${host}:443`, host.toUpperCase()]) {
            const choice = find(authority, path).route;
            expect({ policy: choice?.policy, service: choice?.service }, `${authority}${path}`).toEqual({ policy: intended.policy, service: intended.service });
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(of(objects, "HTTPRoute").flatMap((r) => r["spec"].rules).length);
  });

  it("the extension provider fails closed with 503 and waits longer than portcullis decides", () => {
    const config = example();
    const provider = istioMeshConfig(config, { namespace: "fundament-system" })["meshConfig"].extensionProviders[0];
    expect(provider).toEqual({
      name: "portcullis",
      envoyExtAuthzGrpc: { service: `${EXT_AUTHZ_SERVICE}.fundament-system.svc.cluster.local`, port: 9001, timeout: "1s", failOpen: false, statusOnError: "503" },
    });
    expect(1000).toBeGreaterThan(config.check.timeoutMs);
  });

  it("admits the Gateway's own pods, labelled by Istio with the Gateway's name", () => {
    expect(of(objects, "NetworkPolicy")[0]!["spec"].ingress[0].from).toEqual([
      { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "fundament-gateway" } }, podSelector: { matchLabels: { "gateway.networking.k8s.io/gateway-name": "fundament" } } },
    ]);
  });
});

describe("the committed examples", () => {
  it.each([
    ["deploy/gateway/envoy-gateway.yaml", ["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "envoy-gateway", "--gateway", "fundament-gateway/fundament"]],
    ["deploy/gateway/istio.yaml", ["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "istio", "--gateway", "fundament-gateway/fundament"]],
    ["deploy/gateway/istiod-values.yaml", ["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "istio", "--mesh-config"]],
  ])("%s is exactly what `portcullis %s` prints", async (file, args) => {
    const run = await cli(args);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(readFileSync(resolve(ROOT, file), "utf8")).toBe(run.stdout);
  });

  it("renderGatewayYaml is a YAML stream of exactly gatewayManifests", () => {
    const yaml = renderGatewayYaml(example(), EXAMPLE_OPTIONS["envoy-gateway"]);
    expect(parseAllDocuments(yaml).map((d) => d.toJS())).toEqual(gatewayManifests(example(), EXAMPLE_OPTIONS["envoy-gateway"]));
  });
});

describe("the documented commands", () => {
  /** Every `portcullis gateway-config …` line of docs/deployment.md and README.md, as printed. */
  const lines = ["docs/deployment.md", "README.md"].flatMap((file) =>
    readFileSync(resolve(ROOT, file), "utf8")
      .split("\n")
      .filter((l) => /^(portcullis|npm start --) gateway-config /.test(l))
      .map((l) => [file, l] as const),
  );

  it("exist for both targets and istiod's provider", () => {
    expect(lines.length).toBeGreaterThanOrEqual(4);
  });

  it.each(lines)("%s: `%s` runs (CONFIG the example, values.yaml the chart's values as a platform writes them)", async (_, line) => {
    const command = line.replace(/\s+#.*$/, "").split(/\s*(?:>|&&)\s*/)[0]!;
    const args = command
      .replace(/^npm start -- |^portcullis /, "")
      .replaceAll('"$CONFIG"', "deploy/examples/portcullis.yaml")
      .replace("values.yaml", "test/deploy/fixtures/gateway-values.yaml")
      .split(/\s+/);
    const run = await cli(args);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout.length).toBeGreaterThan(100);
  });
});

describe("refused", () => {
  const base = parse(readFileSync(EXAMPLE, "utf8")) as Json;

  it("a hostname that is no origin's host (httproute.hostnames)", () => {
    expect(() => gatewayManifests(example(), { ...EXAMPLE_OPTIONS.istio, hostnames: ["nope.fundament.io"] })).toThrow(GatewayConfigError);
  });

  const withListenTls = (requireClientCert: boolean) =>
    parseConfig(stringify({
      ...base,
      listen: { ...base["listen"], tls: { certFile: "/tls/tls.crt", keyFile: "/tls/tls.key", ...(requireClientCert ? { clientCaFile: "/tls/ca.crt", requireClientCert } : {}) } },
      envoy: { ...base["envoy"], portcullis: { ...base["envoy"].portcullis, tls: { caFile: "/etc/envoy/portcullis-ca.crt", serverName: "portcullis.fundament-system.svc", ...(requireClientCert ? { clientCertificateChainFile: "/c.crt", clientPrivateKeyFile: "/c.key" } : {}) } } },
    }));

  it("portcullis with TLS (listen.tls): Envoy Gateway checks its certificate with the name and CA plain Envoy uses", () => {
    const policies = gatewayManifests(withListenTls(false), EXAMPLE_OPTIONS["envoy-gateway"]).filter((o) => o["kind"] === "BackendTLSPolicy" && o["spec"].targetRefs[0].name === EXT_AUTHZ_SERVICE);
    expect(policies.map((p) => p["spec"].validation)).toEqual([{ caCertificateRefs: [{ group: "", kind: "ConfigMap", name: "portcullis-grpc-ca" }], hostname: "portcullis.fundament-system.svc" }]);
    expect(gatewayManifests(example(), EXAMPLE_OPTIONS["envoy-gateway"]).filter((o) => o["kind"] === "BackendTLSPolicy" && o["spec"].targetRefs[0].name === EXT_AUTHZ_SERVICE)).toEqual([]);
  });

  it.each([
    ["istio", false, /Istio's envoyExtAuthzGrpc provider calls portcullis in plaintext/],
    ["envoy-gateway", true, /requireClientCert: Envoy Gateway presents a client certificate only gateway-wide/],
  ] as const)("portcullis with TLS behind %s (client certificate required: %s): what cannot be generated is refused, not generated broken", (target, requireClientCert, message) => {
    expect(() => gatewayManifests(withListenTls(requireClientCert), EXAMPLE_OPTIONS[target])).toThrow(message);
  });

  it("a plaintext upstream that is not a Service of the cluster", () => {
    const config = parseConfig(stringify({ ...base, envoy: { ...base["envoy"], upstreams: { ...base["envoy"].upstreams, assets: { url: "http://assets.example.com:8080" } } } }));
    expect(() => gatewayManifests(config, EXAMPLE_OPTIONS["envoy-gateway"])).toThrow(/assets\.example\.com.*neither a Service/);
  });

  // The kit's configuration without its envoy section (the data plane's).
  const noEnvoy = join(mkdtempSync(join(tmpdir(), "portcullis-no-envoy-")), "portcullis.yaml");
  const { envoy: _envoy, ...kit } = parse(readFileSync(resolve(ROOT, "deploy/k8s/portcullis.yaml"), "utf8")) as Record<string, unknown>;
  writeFileSync(noEnvoy, stringify(kit));
  it.each([
    [["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "nginx", "--gateway", "a/b"], /--target must be one of/],
    [["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "istio"], /name the Gateway/],
    [["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "istio", "--gateway", "just-a-name"], /NAMESPACE\/NAME/],
    [["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "envoy-gateway", "--mesh-config"], /--mesh-config is for --target istio/],
    [["gateway-config", "--config", noEnvoy, "--target", "istio", "--gateway", "a/b"], /no envoy section/],
  ])("portcullis %j exits 2", async (args, message) => {
    const run = await cli(args);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).toBe("");
  });

  it("reads the Gateway and hostnames from the chart's values file", async () => {
    const run = await cli(["gateway-config", "--config", "deploy/examples/portcullis.yaml", "--target", "istio", "--values", "test/deploy/fixtures/gateway-values.yaml"]);
    expect(run.stderr).toBe("");
    const objects = parseAllDocuments(run.stdout).map((d) => d.toJS() as Json);
    expect(of(objects, "HTTPRoute").map((r) => r["spec"].hostnames[0])).toEqual(["kube-api-proxy.fundament.io"]);
    expect(of(objects, "HTTPRoute")[0]!["spec"].parentRefs).toEqual([{ group: "gateway.networking.k8s.io", kind: "Gateway", namespace: "istio-ingress", name: "shared", sectionName: "https" }]);
  });
});
