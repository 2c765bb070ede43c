/**
 * The configuration file: bad files are refused with one line per problem naming the field, the
 * committed JSON Schema is the one the zod schema generates, and the committed configurations are valid.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ConfigError, loadConfig, parseConfig } from "../../src/config/load.ts";
import { renderConfigJsonSchema } from "../../src/config/json-schema.ts";
import { routeCovers } from "../../src/config/platform-schema.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const C1 = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
const C2 = "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c";

const base = () => ({
  tokens: { secrets: [{ env: "S" }] },
  openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
  clusters: [{ id: C1 }],
});
const envoy = () => ({
  origins: { console: "https://console.example", kubeApiProxy: "https://kube.example", pluginProxy: "https://plugins.example" },
  clusters: [{ id: C1, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" }],
  upstreams: { assets: { url: "http://assets:8080" } },
});

function problems(config: unknown): string[] {
  try {
    parseConfig(typeof config === "string" ? config : stringify(config), "test.yaml");
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.message.split("\n").slice(1).map((l) => l.trim());
  }
  return [];
}

describe("bad configurations name the field and what it expects", () => {
  const rows: Array<{ name: string; config: unknown; expected: string[] }> = [
    { name: "empty file", config: "", expected: ["tokens: expected tokens and openfga (Fundament), or a konfidence section, or both"] },
    { name: "typo in a key", config: { ...base(), listen: { grcp: "0.0.0.0:9001" } }, expected: ['listen: Unrecognized key: "grcp"'] },
    { name: "unknown top-level key", config: { ...base(), checks: {} }, expected: ['(root): Unrecognized key: "checks"'] },
    { name: "address without port", config: { ...base(), listen: { grpc: "0.0.0.0" } }, expected: ["listen.grpc: expected host:port, e.g. 0.0.0.0:9001"] },
    { name: "secret with both sources", config: { ...base(), tokens: { secrets: [{ env: "A", file: "/b" }] } }, expected: ["tokens.secrets[0]: expected exactly one of env or file"] },
    { name: "no secrets", config: { ...base(), tokens: { secrets: [] } }, expected: ["tokens.secrets: Too small: expected array to have >=1 items"] },
    { name: "upper-case cluster id", config: { ...base(), clusters: [{ id: C1.toUpperCase() }] }, expected: ["clusters[0].id: expected a lower-case UUID"] },
    { name: "duplicate cluster", config: { ...base(), clusters: [{ id: C1 }, { id: C1 }] }, expected: ["clusters: cluster ids must be unique"] },
    { name: "OpenFGA URL", config: { ...base(), openfga: { apiUrl: "not a url", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" } }, expected: ["openfga.apiUrl: expected an http:// or https:// URL"] },
    // Issue 13: what used to pass here and fail (or misbehave) only at start.
    { name: "port above 65535", config: { ...base(), listen: { grpc: "0.0.0.0:70000" } }, expected: ["listen.grpc: expected a port from 1 to 65535"] },
    { name: "port 0", config: { ...base(), listen: { admin: "127.0.0.1:0" } }, expected: ["listen.admin: expected a port from 1 to 65535"] },
    { name: "check deadline beyond 60 s", config: { ...base(), check: { timeoutMs: 80_000_000_000 } }, expected: ["check.timeoutMs: expected whole milliseconds from 1 to 60000 (60 s)"] },
    { name: "OpenFGA deadline 0", config: { ...base(), openfga: { ...base().openfga, timeoutMs: 0 } }, expected: ["openfga.timeoutMs: expected whole milliseconds from 1 to 60000 (60 s)"] },
    { name: "SAR cache lifetime beyond a day", config: { ...base(), kube: { sar: { allowTtlMs: 90_000_000 } } }, expected: ["kube.sar.allowTtlMs: expected whole milliseconds from 1 to 86400000 (24 h)"] },
    { name: "TokenRequest deadline fractional", config: { ...base(), kube: { tokenRequest: { timeoutMs: 1.5 } } }, expected: ["kube.tokenRequest.timeoutMs: expected whole milliseconds from 1 to 60000 (60 s)"] },
    { name: "drain beyond 10 min", config: { ...base(), shutdown: { drainMs: 600_001 } }, expected: ["shutdown.drainMs: expected whole milliseconds from 0 to 600000 (600 s)"] },
    { name: "watchdog below 500 ms", config: { ...base(), watchdog: { timeoutMs: 100 } }, expected: ["watchdog.timeoutMs: expected whole milliseconds from 500 to 600000 (600 s)"] },
    { name: "Konfidence provider deadline", config: { ...base(), konfidence: { providers: { timeoutMs: 61_000 } } }, expected: ["konfidence.providers.timeoutMs: expected whole milliseconds from 1 to 60000 (60 s)"] },
    { name: "Retry-After beyond an hour", config: { ...base(), check: { retryAfterSeconds: 3601 } }, expected: ["check.retryAfterSeconds: Too big: expected number to be <=3600"] },
    { name: "store id not a ULID (the old shipped one)", config: { ...base(), openfga: { apiUrl: "http://openfga:8080", storeId: "01JFUNDAMENTSTORE000000000" } }, expected: ["openfga.storeId: expected an OpenFGA store id: a ULID, 26 characters of Crockford base32 (e.g. 01HVMMBCMGZNT3SED4Z17ECXCA)"] },
    { name: "model id not a ULID", config: { ...base(), openfga: { ...base().openfga, authorizationModelId: "latest" } }, expected: ["openfga.authorizationModelId: expected an OpenFGA authorization model id: a ULID, 26 characters of Crockford base32 (e.g. 01HVMMBCMGZNT3SED4Z17ECXCA)"] },
    { name: "OpenFGA URL of another scheme", config: { ...base(), openfga: { ...base().openfga, apiUrl: "ftp://openfga:8080" } }, expected: ["openfga.apiUrl: expected an http:// or https:// URL"] },
    { name: "cookie origin of another scheme", config: { ...base(), tokens: { secrets: [{ env: "S" }], cookieOrigins: ["javascript:alert(1)"] } }, expected: ["tokens.cookieOrigins[0]: expected an http:// or https:// URL"] },
    { name: "tokens without openfga", config: { tokens: base().tokens }, expected: ["openfga: expected an openfga section: the Fundament policies ask its can_view"] },
    { name: "openfga without tokens", config: { openfga: base().openfga }, expected: ["tokens: expected a tokens section: openfga serves the Fundament policies, which verify Fundament tokens"] },
    { name: "platform services without tokens", config: { konfidence: {}, platform: { services: [{ name: "authn-api", routes: ["/authn.v1."] }] } }, expected: ["platform.services: platform services need tokens and openfga: their routes accept Fundament UserTokens only"] },
    { name: "Konfidence only", config: { konfidence: {} }, expected: [] },
    { name: "Konfidence cluster in neither clusters[] nor a registry", config: { ...base(), konfidence: { cluster: { clusterId: C2 } } }, expected: [`konfidence.cluster.clusterId: ${C2} is not in clusters[] (and no clusterRegistry could register it)`] },
    { name: "Konfidence cluster the registry may register", config: { ...base(), clusterRegistry: { namespace: "clusters" }, konfidence: { cluster: { clusterId: C2 } } }, expected: [] },
    { name: "PluginToken lifetime bound beyond a day", config: { ...base(), tokens: { ...base().tokens, maxLifetimeSeconds: { plugin: 86_401 } } }, expected: ["tokens.maxLifetimeSeconds.plugin: expected whole seconds from 60 to 86400 (24 h)"] },
    { name: "UserToken lifetime bound fractional", config: { ...base(), tokens: { ...base().tokens, maxLifetimeSeconds: { user: 3600.5 } } }, expected: ["tokens.maxLifetimeSeconds.user: expected whole seconds from 60 to 2592000 (720 h)"] },
    { name: "token lifetime bound typo", config: { ...base(), tokens: { ...base().tokens, maxLifetimeSeconds: { plugins: 900 } } }, expected: ['tokens.maxLifetimeSeconds: Unrecognized key: "plugins"'] },
    { name: "TokenRequest too short", config: { ...base(), kube: { tokenRequest: { expirationSeconds: 60 } } }, expected: ["kube.tokenRequest.expirationSeconds: Too small: expected number to be >=600"] },
    { name: "log level", config: { ...base(), logLevel: "verbose" }, expected: ['logLevel: Invalid option: expected one of "fatal"|"error"|"warn"|"info"|"debug"|"trace"'] },
    { name: "envoy: origin with a path", config: { ...base(), envoy: { ...envoy(), origins: { ...envoy().origins, pluginProxy: "https://plugins.example/" } } }, expected: ["envoy.origins.pluginProxy: expected an origin like https://plugin-proxy.fundament.io (no path)"] },
    { name: "envoy: cluster portcullis does not serve", config: { ...base(), envoy: { ...envoy(), clusters: [...envoy().clusters, { id: C2, apiServer: "https://a:6443", caFile: "/ca" }] } }, expected: [`envoy.clusters[1].id: ${C2} is not in clusters[]`] },
    { name: "envoy: served cluster without a route", config: { ...base(), clusters: [{ id: C1 }, { id: C2 }], envoy: envoy() }, expected: [`envoy.clusters: cluster ${C2} has no entry`] },
    { name: "envoy: plain-http API server", config: { ...base(), envoy: { ...envoy(), clusters: [{ id: C1, apiServer: "http://10.0.0.1:6443", caFile: "/ca.crt" }] } }, expected: ["envoy.clusters[0].apiServer: expected https://host[:port] of the cluster's API server"] },
    { name: "envoy: relative CA file", config: { ...base(), envoy: { ...envoy(), clusters: [{ id: C1, apiServer: "https://10.0.0.1:6443", caFile: "ca.crt" }] } }, expected: ["envoy.clusters[0].caFile: expected an absolute file path (as Envoy sees it)"] },
    { name: "envoy: https upstream without CA", config: { ...base(), envoy: { ...envoy(), upstreams: { assets: { url: "https://assets:8443" } } } }, expected: ["envoy.upstreams.assets.caFile: an https upstream needs caFile"] },
    { name: "envoy: Konfidence origin without upstream", config: { ...base(), envoy: { ...envoy(), origins: { ...envoy().origins, konfidence: "https://k.example" } } }, expected: ["envoy.origins.konfidence: set both envoy.origins.konfidence and envoy.upstreams.konfidence, or neither"] },
    { name: "envoy: ext_authz deadline not above portcullis's", config: { ...base(), check: { timeoutMs: 800 }, envoy: { ...envoy(), extAuthzTimeoutMs: 800 } }, expected: ["envoy.extAuthzTimeoutMs: must be greater than check.timeoutMs (800), or Envoy gives up before portcullis answers"] },
    { name: "envoy: typo", config: { ...base(), envoy: { ...envoy(), listner: {} } }, expected: ['envoy: Unrecognized key: "listner"'] },
    // platform.services (FUN-17 §3, FUN-19 §5): only what is listed is public, and only under the service's own routes.
    { name: "platform: public path under none of the service's routes", config: { ...base(), platform: { services: [{ name: "organization-api", routes: ["/organization.v1."], public: ["/authn.v1.TokenService/ExchangeToken"] }] } }, expected: ["platform.services[0].public[0]: /authn.v1.TokenService/ExchangeToken is not under any of this service's routes"] },
    { name: "platform: public path equal to a Connect-package prefix", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: ["/dcim.v1."], public: ["/dcim.v1."] }] } }, expected: ["platform.services[0].public[0]: /dcim.v1. is not under any of this service's routes"] },
    { name: "platform: a whole-segment prefix does not cover a longer name", config: { ...base(), platform: { services: [{ name: "authn-api", routes: ["/login"], public: ["/loginx"] }] } }, expected: ["platform.services[0].public[0]: /loginx is not under any of this service's routes"] },
    { name: "platform: MintPluginToken listed public (FUN-17 §3: UserToken only)", config: { ...base(), platform: { services: [{ name: "authn-api", routes: ["/authn.v1."], public: ["/authn.v1.TokenService/MintPluginToken"] }] } }, expected: ["platform.services[0].public[0]: /authn.v1.TokenService/MintPluginToken mints PluginTokens and needs a UserToken: it cannot be public"] },
    { name: "platform: service listed twice", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: ["/dcim.v1."] }, { name: "dcim-api", routes: ["/dcim.v2."] }] } }, expected: ["platform.services[1].name: dcim-api is listed twice"] },
    { name: "platform: service without routes", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: [] }] } }, expected: ["platform.services[0].routes: Too small: expected array to have >=1 items"] },
    { name: "platform: dot segment in a route", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: ["/dcim.v1/../admin/"] }] } }, expected: ["platform.services[0].routes[0]: expected a path prefix like /organization.v1. , /authn.v1.TokenService/ or /login"] },
    { name: "platform: query in a public path", config: { ...base(), platform: { services: [{ name: "authn-api", routes: ["/login"], public: ["/login?x=1"] }] } }, expected: ["platform.services[0].public[0]: expected an exact path like /organization.v1.PluginService/GetPluginDefinition"] },
    { name: "platform: relative route", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: ["dcim.v1."] }] } }, expected: ["platform.services[0].routes[0]: expected a path prefix like /organization.v1. , /authn.v1.TokenService/ or /login"] },
    { name: "platform: name not a DNS label", config: { ...base(), platform: { services: [{ name: "DCIM API", routes: ["/dcim.v1."] }] } }, expected: ["platform.services[0].name: expected a DNS label, e.g. organization-api"] },
    { name: "platform: typo", config: { ...base(), platform: { services: [{ name: "dcim-api", routes: ["/dcim.v1."], publc: [] }] } }, expected: ['platform.services[0]: Unrecognized key: "publc"'] },
  ];

  it.each(rows)("$name", ({ config, expected }) => {
    expect(problems(config)).toEqual(expected);
  });

  it("prefixes the message with the file and reports YAML errors", () => {
    expect(() => parseConfig("a: [", "x.yaml")).toThrow(/^x\.yaml: not valid YAML: /);
    expect(() => parseConfig("a: 1\na: 2", "x.yaml")).toThrow(/^x\.yaml: not valid YAML: /);
  });

  it("accepts a minimal configuration with an envoy section", () => {
    expect(problems({ ...base(), envoy: envoy() })).toEqual([]);
  });
});

describe("a cookie origin may not be a host that serves plugin code (issue 42 §5)", () => {
  const konfidenceSession = (cookieOrigins: string[]) => ({
    session: { discoveryUrl: "https://idp.example/.well-known/openid-configuration", audience: "konfidence", cookie: "session", cookieOrigins },
  });
  const withTokens = (cookieOrigins: string[], withEnvoy = true) => ({ ...base(), tokens: { ...base().tokens, cookieOrigins }, ...(withEnvoy ? { envoy: envoy() } : {}) });
  const PLUGIN = "is on the host plugin-proxy's (envoy.origins.pluginProxy), which serves plugin pages: every page there would act with the user's session cookie";
  const KUBE = "is on the host kube-api-proxy's (envoy.origins.kubeApiProxy), which relays pages of pods and Services, plugins' among them: every page there would act with the user's session cookie";
  const rows: Array<{ name: string; config: unknown; expected: string[] }> = [
    { name: "plugin-proxy's origin", config: withTokens(["https://plugins.example"]), expected: [`tokens.cookieOrigins[0]: https://plugins.example ${PLUGIN}`] },
    { name: "plugin-proxy's origin with a trailing slash", config: withTokens(["https://plugins.example/"]), expected: [`tokens.cookieOrigins[0]: https://plugins.example/ ${PLUGIN}`] },
    { name: "plugin-proxy's host in upper case", config: withTokens(["https://PLUGINS.Example"]), expected: [`tokens.cookieOrigins[0]: https://PLUGINS.Example ${PLUGIN}`] },
    { name: "plugin-proxy's origin with the default port written out", config: withTokens(["https://plugins.example:443"]), expected: [`tokens.cookieOrigins[0]: https://plugins.example:443 ${PLUGIN}`] },
    { name: "plugin-proxy's host on another port (Envoy matches the host alone)", config: withTokens(["https://plugins.example:8443"]), expected: [`tokens.cookieOrigins[0]: https://plugins.example:8443 ${PLUGIN}`] },
    { name: "plugin-proxy's host over http", config: withTokens(["http://plugins.example"]), expected: [`tokens.cookieOrigins[0]: http://plugins.example ${PLUGIN}`] },
    { name: "plugin-proxy's host with a trailing dot", config: withTokens(["https://plugins.example."]), expected: [`tokens.cookieOrigins[0]: https://plugins.example. ${PLUGIN}`] },
    { name: "kube-api-proxy's origin", config: withTokens(["https://kube.example"]), expected: [`tokens.cookieOrigins[0]: https://kube.example ${KUBE}`] },
    { name: "the second of two, beside the Console", config: withTokens(["https://console.example", "https://plugins.example"]), expected: [`tokens.cookieOrigins[1]: https://plugins.example ${PLUGIN}`] },
    { name: "Konfidence's cookie origins: plugin-proxy's", config: { ...base(), envoy: envoy(), konfidence: konfidenceSession(["https://plugins.example"]) }, expected: [`konfidence.session.cookieOrigins[0]: https://plugins.example ${PLUGIN}`] },
    { name: "Konfidence's cookie origins: kube-api-proxy's in mixed case", config: { ...base(), envoy: envoy(), konfidence: konfidenceSession(["https://Kube.example"]) }, expected: [`konfidence.session.cookieOrigins[0]: https://Kube.example ${KUBE}`] },
    { name: "both lists at once", config: { ...withTokens(["https://kube.example"]), konfidence: konfidenceSession(["https://plugins.example"]) }, expected: [`tokens.cookieOrigins[0]: https://kube.example ${KUBE}`, `konfidence.session.cookieOrigins[0]: https://plugins.example ${PLUGIN}`] },
    // What is not refused:
    { name: "control: the Console", config: withTokens(["https://console.example"]), expected: [] },
    { name: "control: a subdomain of plugin-proxy's host (another virtual host)", config: withTokens(["https://x.plugins.example"]), expected: [] },
    { name: "control: a host that only begins with plugin-proxy's", config: withTokens(["https://plugins.example.org"]), expected: [] },
    { name: "control: Konfidence's UI origin", config: { ...base(), envoy: envoy(), konfidence: konfidenceSession(["https://konfidence-ui.example"]) }, expected: [] },
    { name: "control: no envoy section, so no plugin origin known", config: withTokens(["https://plugins.example"], false), expected: [] },
  ];

  it.each(rows)("$name", ({ config, expected }) => {
    expect(problems(config)).toEqual(expected);
  });
});

describe("platform route prefixes read as the generated Envoy routes match them (routeCovers)", () => {
  it.each([
    { prefix: "/dcim.v1.", path: "/dcim.v1.SiteService/ListSites", covers: true },
    { prefix: "/dcim.v1.", path: "/dcim.v1.", covers: false },
    { prefix: "/dcim.v1.", path: "/dcim.v10.SiteService/ListSites", covers: false },
    { prefix: "/authn.v1.TokenService/", path: "/authn.v1.TokenService/ExchangeToken", covers: true },
    { prefix: "/authn.v1.TokenService/", path: "/authn.v1.TokenServiceX/ExchangeToken", covers: false },
    { prefix: "/login", path: "/login", covers: true },
    { prefix: "/login", path: "/login/password", covers: true },
    { prefix: "/login", path: "/loginx", covers: false },
    { prefix: "/login", path: "/logi", covers: false },
  ])("$prefix covers $path: $covers", ({ prefix, path, covers }) => {
    expect(routeCovers(prefix, path)).toBe(covers);
  });
});

describe("committed files", () => {
  it("deploy/portcullis.schema.json is what `portcullis config-schema` prints", () => {
    // Regenerate: npx node src/cli/main.ts config-schema > deploy/portcullis.schema.json
    expect(readFileSync(resolve(ROOT, "deploy/portcullis.schema.json"), "utf8")).toBe(renderConfigJsonSchema());
  });

  it.each(["deploy/examples/portcullis.yaml", "deploy/k8s/portcullis.yaml"])("%s is a valid configuration", (file) => {
    expect(() => loadConfig(resolve(ROOT, file))).not.toThrow();
  });
});
