/**
 * Issue 46 §1: a plugin-proxy request for an installation on a cluster registered by Secret reaches
 * that installation's runtime Service. A real kube-apiserver is the management cluster (the
 * Secret) and the registered cluster (its PluginInstallation, watched through the Secret's
 * credential); portcullis answers the Check on its gRPC port; Envoy's part is simulated from the
 * generated bootstrap (deploy/examples/portcullis.yaml): the route matched with the headers of the
 * allow (as clear_route_cache does), its header mutation building the upstream host, its rewrite, its
 * headers removed, and the request sent to a local HTTP server standing in for the host the dynamic
 * forward proxy would resolve. Without `service-domain` the same allow matches only
 * `plugin-proxy-unrouted` (Envoy's 404). (OpenFGA's can_view is answered yes here: not the subject.)
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { resolve } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.ts";
import { envoyBootstrap } from "../../src/deploy/envoy-config.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { applyManifests, rawRequest, startKubeApiserver, type KubeApiserver } from "../harness/index.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { PINNED_HASH, pluginToken } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { CRD_FILES } from "./fundament-world.ts";

type Json = Record<string, any>;
const NAMESPACE = "portcullis-clusters";
const REGISTERED = "9a9a9a9a-0000-4000-8000-00000000009a";
const DOMAIN = "svc.registered-1.mesh.internal";

let api: KubeApiserver;
let ports: ConnectedPorts;
let portcullis: TestServer;
let runtime: Server;
let runtimePort: number;
let installationUid: string;
const received: Array<{ method: string; url: string; headers: IncomingHttpHeaders }> = [];

beforeAll(async () => {
  api = await startKubeApiserver();
  await applyManifests(api, CRD_FILES);
  expect((await rawRequest(api, "POST", "/api/v1/namespaces", { metadata: { name: NAMESPACE } })).status).toBe(201);
  const created = await rawRequest(api, "POST", "/apis/plugins.fundament.io/v1/plugininstallations", {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name: "cert-manager" },
    spec: { definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH } },
  });
  expect(created.status).toBe(201);
  installationUid = (created.json as { metadata: { uid: string } }).metadata.uid;
  runtime = createServer((req, res) => {
    received.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers });
    res.end("runtime says hello");
  });
  runtimePort = await new Promise<number>((done) => runtime.listen(0, "127.0.0.1", () => done((runtime.address() as { port: number }).port)));
  const config = testConfig({ clusters: [], clusterRegistry: { namespace: NAMESPACE, kubeconfig: api.kubeconfigPath } });
  ports = await connectPorts(config, pino({ level: "warn" }, new Writable({ write: (_c, _e, cb) => cb() })));
  portcullis = await startTestServer({ ...ports, canView: { canView: async () => true } }, config);
}, 180_000);

afterAll(async () => {
  await portcullis?.stop();
  await ports?.stop();
  await new Promise<void>((done) => (runtime ? runtime.close(() => done()) : done()));
  await api?.stop();
});

async function register(fields: Record<string, string>): Promise<void> {
  const data = { clusterId: REGISTERED, server: api.url, "ca.crt": api.caPem, token: api.adminToken, ...fields };
  const secret = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "registered-1", namespace: NAMESPACE, labels: { "portcullis.fundament.io/secret-type": "cluster" } },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  };
  const path = `/api/v1/namespaces/${NAMESPACE}/secrets`;
  const replaced = await rawRequest(api, "PUT", `${path}/registered-1`, secret);
  if (replaced.status === 404) expect((await rawRequest(api, "POST", path, secret)).status).toBe(201);
  else expect(replaced.status).toBe(200);
}

/** The plugin-proxy virtual host of the generated bootstrap. */
function pluginProxyHost(): Json {
  const bootstrap = envoyBootstrap(loadConfig(resolve(import.meta.dirname, "../../deploy/examples/portcullis.yaml"))) as Json;
  const hcm = bootstrap["static_resources"].listeners[0].filter_chains[0].filters[0].typed_config;
  return hcm.route_config.virtual_hosts.find((v: Json) => v.routes.some((r: Json) => r.name === "plugin-proxy-unrouted"));
}

/** Envoy's first match: the matchers these routes use (safe_regex, prefix; header present or exact). */
function matchRoute(host: Json, path: string, headers: Record<string, string>): Json {
  return host.routes.find((r: Json) => {
    const m = r.match;
    const pathOk = m.safe_regex !== undefined ? new RegExp(m.safe_regex.regex).test(path) : m.prefix !== undefined ? path.startsWith(m.prefix) : m.path === path;
    const headersOk = (m.headers ?? []).every((h: Json) => (h.present_match === true ? headers[h.name] !== undefined : headers[h.name] === h.string_match?.exact));
    return pathOk && headersOk;
  });
}

/** The request as it leaves Envoy: headers after the allow's mutations, the host the route builds, the path rewritten. */
function forwarded(route: Json, path: string, headers: Record<string, string>): { host: string; path: string; headers: Record<string, string> } {
  const mutation = route.typed_per_filter_config["envoy.filters.http.header_mutation"].mutations.request_mutations[0].append.header;
  const host = (mutation.value as string).replace(/%REQ\(([^)]+)\)%/g, (_, name: string) => headers[name] ?? "");
  const rewrite = route.route.regex_rewrite;
  const out = { ...headers };
  for (const name of route.request_headers_to_remove ?? []) delete out[name];
  return { host, path: path.replace(new RegExp(rewrite.pattern.regex), rewrite.substitution), headers: out };
}

it("a cluster registered with service-domain: the allow routes through the registered route to the installation's runtime Service", async () => {
  await register({ "service-domain": DOMAIN });
  const path = `/installations/${installationUid}/runtime/api/certificates?watch=1`;
  const token = await pluginToken({ cluster_id: REGISTERED, installation_id: installationUid });
  const client = { authorization: `Bearer ${token}`, cookie: "fundament_auth=x", "x-fundament-upstream-domain": "evil.example" };
  let answer!: Awaited<ReturnType<TestServer["check"]>>;
  await until(async () => (answer = await portcullis.check({ path, headers: client, policy: "plugin-proxy" })).allowed, 20_000, "the registered cluster to serve its installation");
  if (!answer.allowed) throw new Error("denied");
  expect(answer.set["x-fundament-upstream-domain"]).toBe(DOMAIN);

  const after: Record<string, string> = { ...client, ...answer.set };
  for (const name of answer.removed) delete after[name];
  const host = pluginProxyHost();
  const route = matchRoute(host, path.split("?")[0]!, after);
  expect(route.name).toBe("plugin-runtime-registered");
  const out = forwarded(route, path, after);
  expect(out.host).toBe(`plugin-cert-manager.plugin-cert-manager.${DOMAIN}:8080`);
  // The dynamic forward proxy resolves that host; here it is the local stand-in for the Service.
  const response = await fetch(`http://127.0.0.1:${runtimePort}${out.path}`, { headers: { ...out.headers, "x-forwarded-host": out.host } });
  expect(await response.text()).toBe("runtime says hello");
  const seen = received.at(-1)!;
  expect(seen.url).toBe("/api/certificates?watch=1");
  expect(seen.headers["authorization"]).toBeUndefined();
  expect(seen.headers["cookie"]).toBeUndefined();
  expect(seen.headers["x-fundament-installation-id"]).toBe(installationUid);
  expect(seen.headers["x-fundament-upstream-host"]).toBeUndefined();
}, 60_000);

it("the same cluster without service-domain: the allow carries no domain and Envoy has only its 404", async () => {
  await register({});
  const path = `/installations/${installationUid}/runtime/`;
  const token = await pluginToken({ cluster_id: REGISTERED, installation_id: installationUid });
  let answer!: Awaited<ReturnType<TestServer["check"]>>;
  await until(async () => {
    answer = await portcullis.check({ path, headers: { authorization: `Bearer ${token}` }, policy: "plugin-proxy" });
    return answer.allowed && answer.set["x-fundament-upstream-domain"] === undefined;
  }, 20_000, "the re-registered cluster to serve without a domain");
  if (!answer.allowed) throw new Error("denied");
  expect(matchRoute(pluginProxyHost(), path, answer.set).name).toBe("plugin-proxy-unrouted");
}, 60_000);
