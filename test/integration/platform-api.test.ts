/**
 * The escalation wall for the whole platform (FUN-17 §3, FUN-19 §5) over real gRPC: platform-api
 * and public, for authn-api, organization-api, dcim-api and the public GetPluginDefinition, every
 * way a caller can present (or not present) a credential → the whole CheckResponse. Every PluginToken
 * refused is counted on portcullis_plugin_token_replay_total and logged as a security event naming
 * the installation and plugin, with no token anywhere.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids, PINNED_HASH, pluginToken, userToken } from "../support/tokens.ts";

const CONSOLE = "https://console.fundament.test";
const PLUGIN_ORIGIN = "https://plugin-proxy.fundament.test";
const ORG = "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03";

/** The services as the example configuration lists them (deploy/examples/portcullis.yaml). */
const SERVICES = [
  {
    name: "authn-api",
    routes: ["/authn.v1.", "/login", "/callback", "/logout", "/refresh"],
    public: ["/authn.v1.TokenService/ExchangeToken", "/login", "/callback"],
  },
  { name: "organization-api", routes: ["/organization.v1."], public: ["/organization.v1.PluginService/GetPluginDefinition"] },
  { name: "dcim-api", routes: ["/dcim.v1."] },
];

let world: FakeWorld;
let server: TestServer;
/** Every token any request carried: none may appear in a log line, a denial or a metric. */
const tokens: string[] = [];

beforeAll(async () => {
  world = new FakeWorld();
  const config = testConfig({
    tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }, { env: "PORTCULLIS_TEST_OLD_SECRET" }], cookieOrigins: [CONSOLE] },
    platform: { services: SERVICES },
  });
  server = await startTestServer(world, config);
});
afterAll(async () => server.stop());
beforeEach(() => {
  Object.assign(world, new FakeWorld());
});

async function t(token: Promise<string>): Promise<string> {
  const value = await token;
  tokens.push(value);
  return value;
}

interface Target {
  readonly policy: "platform-api" | "public";
  readonly service: string;
  readonly path: string;
  readonly method?: string;
}

async function check(target: Target, headers: Record<string, string>, contextExtensions?: Record<string, string>) {
  const request = envoyCheckRequest({ method: target.method ?? "POST", path: target.path, headers }) as { attributes: { context_extensions: Record<string, string> } };
  request.attributes.context_extensions = contextExtensions ?? { policy: target.policy, service: target.service };
  return summarize((await server.checkRaw(request)) as CheckResponse);
}

/** Every request also carries identity headers a client made up: none may reach the service. */
const SPOOFED = { "x-fundament-user-id": "6c1d4d3f-8a4b-4e9f-8b62-3e0a1d2f9b02", "x-fundament-installation-id": "spoofed" };

const bearer = async (token: Promise<string>) => ({ authorization: `Bearer ${await t(token)}` });
const cookie = async (token: Promise<string>, origin: string) => ({ cookie: `fundament_auth=${await t(token)}; theme=dark`, origin });
const expired = () => userToken({}, { exp: Math.floor(Date.now() / 1000) - 600, iat: Math.floor(Date.now() / 1000) - 1200 });
const bothAudiences = () => userToken({ aud: ["fundament-user", "fundament-plugin"] });

type Credential = "none" | "user-bearer" | "user-cookie-console" | "user-cookie-plugin-origin" | "plugin-bearer" | "plugin-cookie" | "plugin-cookie-plugin-origin" | "both-audiences" | "expired";

const CREDENTIALS: Record<Credential, () => Promise<Record<string, string>>> = {
  none: async () => ({}),
  "user-bearer": () => bearer(userToken()),
  "user-cookie-console": () => cookie(userToken(), CONSOLE),
  "user-cookie-plugin-origin": () => cookie(userToken(), PLUGIN_ORIGIN),
  "plugin-bearer": () => bearer(pluginToken()),
  "plugin-cookie": () => cookie(pluginToken(), CONSOLE),
  "plugin-cookie-plugin-origin": () => cookie(pluginToken(), PLUGIN_ORIGIN),
  "both-audiences": () => bearer(bothAudiences()),
  expired: () => bearer(expired()),
};

const denied = (reason: string, message: string) => ({
  allowed: false,
  grpc: 16,
  http: 401,
  reason,
  headers: { "content-type": "application/json", "x-portcullis-reason": reason, "www-authenticate": "Bearer" },
  body: { error: { code: reason, message } },
});

/** platform-api on allow: the credential untouched, the verified identity set, the client's other x-fundament-* removed. */
const USER_ALLOWED = {
  allowed: true,
  grpc: 0,
  set: { "x-fundament-user-id": ids.user, "x-fundament-organization-ids": ORG },
  appendActions: ["OVERWRITE_IF_EXISTS_OR_ADD"],
  removed: ["x-fundament-installation-id"],
};
const MISSING = denied("missing-token", "no credentials");
const REPLAY = denied("wrong-audience", "the token is not accepted here");

const PLATFORM_EXPECTED: Record<Credential, object> = {
  none: MISSING,
  "user-bearer": USER_ALLOWED,
  "user-cookie-console": USER_ALLOWED,
  // A plugin page's request carries the user's cookie but not the Console's Origin: not a credential.
  "user-cookie-plugin-origin": MISSING,
  "plugin-bearer": REPLAY,
  "plugin-cookie": REPLAY,
  "plugin-cookie-plugin-origin": MISSING,
  "both-audiences": denied("invalid-token", "the token is not valid: token holds both audiences"),
  expired: denied("invalid-token", "the token is not valid: token expired"),
};

/** public on allow, whatever was sent: nothing read, nothing required, spoofed identity removed, the rest untouched. */
const PUBLIC_ALLOWED = { allowed: true, grpc: 0, set: {}, appendActions: [], removed: ["x-fundament-installation-id", "x-fundament-user-id"] };

const TARGETS: Array<Target & { name: string }> = [
  { name: "authn-api GetUserInfo", policy: "platform-api", service: "authn-api", path: "/authn.v1.AuthnService/GetUserInfo" },
  { name: "organization-api CreateAPIKey (FUN-17 §3's replay target)", policy: "platform-api", service: "organization-api", path: "/organization.v1.APIKeyService/CreateAPIKey" },
  { name: "dcim-api ListSites", policy: "platform-api", service: "dcim-api", path: "/dcim.v1.SiteService/ListSites" },
  { name: "public GetPluginDefinition (FUN-19 §5)", policy: "public", service: "organization-api", path: "/organization.v1.PluginService/GetPluginDefinition" },
];

const ROWS = TARGETS.flatMap((target) =>
  (Object.keys(CREDENTIALS) as Credential[]).map((credential) => ({
    name: `${target.name} · ${credential}`,
    target,
    credential,
    expected: target.policy === "public" ? PUBLIC_ALLOWED : PLATFORM_EXPECTED[credential],
    replay: target.policy === "platform-api" && (credential === "plugin-bearer" || credential === "plugin-cookie"),
  })),
);

const replayLines = () => server.logs.filter((l) => l["audit"] === "plugin_token_replay");

async function replayCount(service: string, path: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`portcullis_plugin_token_replay_total{service="${service}",method="${path}"}`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1));
}

describe("every platform route × every credential → the exact CheckResponse", () => {
  it.each(ROWS)("$name", async ({ target, credential, expected, replay }) => {
    const linesBefore = replayLines().length;
    const countBefore = await replayCount(target.service, target.path);
    const res = await check(target, { ...(await CREDENTIALS[credential]()), ...SPOOFED });
    expect(res).toEqual(expected);

    const lines = replayLines().slice(linesBefore);
    expect(await replayCount(target.service, target.path)).toBe(countBefore + (replay ? 1 : 0));
    if (!replay) {
      expect(lines).toEqual([]);
      return;
    }
    expect(lines).toEqual([
      expect.objectContaining({
        audit: "plugin_token_replay",
        service: target.service,
        path: target.path,
        http_method: "POST",
        credential: credential === "plugin-bearer" ? "bearer" : "cookie",
        user: ids.user,
        cluster_id: ids.cluster,
        installation_id: ids.installation,
        installation_name: "cert-manager",
        plugin_name: "cert-manager",
        plugin_version: "1.4.0",
        definition_hash: PINNED_HASH,
        origin: credential === "plugin-cookie" ? CONSOLE : "",
      }),
    ]);
  });
});

describe("authn-api MintPluginToken: a PluginToken cannot mint another (FUN-17 §3)", () => {
  const mint: Target = { policy: "platform-api", service: "authn-api", path: "/authn.v1.TokenService/MintPluginToken" };

  it.each([
    { name: "PluginToken as Bearer → refused, counted, logged", credential: "plugin-bearer" as const, expected: REPLAY, replay: true },
    { name: "PluginToken in the cookie from the Console → refused, counted, logged", credential: "plugin-cookie" as const, expected: REPLAY, replay: true },
    { name: "UserToken as Bearer (functl, Terraform) → allowed", credential: "user-bearer" as const, expected: USER_ALLOWED, replay: false },
    { name: "UserToken cookie from the Console → allowed", credential: "user-cookie-console" as const, expected: USER_ALLOWED, replay: false },
  ])("$name", async ({ credential, expected, replay }) => {
    const before = await replayCount(mint.service, mint.path);
    expect(await check(mint, { ...(await CREDENTIALS[credential]()), ...SPOOFED })).toEqual(expected);
    expect(await replayCount(mint.service, mint.path)).toBe(before + (replay ? 1 : 0));
  });

  it("passes the caller's credential on unchanged on allow (the service still validates it)", async () => {
    const headers = await bearer(userToken());
    const res = await check(mint, { ...headers, cookie: "theme=dark" });
    expect(res).toMatchObject({ allowed: true, removed: [] });
    if (res.allowed) expect(Object.keys(res.set)).not.toContain("authorization");
  });
});

/**
 * The credential Fundament's services read (fundament-oss/fundament common/auth/auth.go,
 * Validator.Validate): Authorization only when it starts with exactly "Bearer ", else the
 * fundament_auth cookie.
 */
function serviceCredential(headers: Readonly<Record<string, string>>): string | undefined {
  const authorization = headers["authorization"] ?? "";
  if (authorization.startsWith("Bearer ")) return authorization.slice("Bearer ".length);
  for (const part of (headers["cookie"] ?? "").split(";")) {
    const pair = part.trim();
    if (pair.startsWith("fundament_auth=")) return pair.slice("fundament_auth=".length);
  }
  return undefined;
}

describe("platform-api: the service reads the token portcullis verified, never a PluginToken beside it", () => {
  const createKey: Target = { policy: "platform-api", service: "organization-api", path: "/organization.v1.APIKeyService/CreateAPIKey" };

  it.each(["bearer", "BEARER", "BeArEr", " Bearer", "Bearer  "])("Authorization %j <a UserToken> beside a PluginToken cookie", async (scheme) => {
    const user = await t(userToken());
    const headers = { authorization: `${scheme} ${user}`, ...(await cookie(pluginToken(), CONSOLE)) };
    const res = await check(createKey, headers);
    if (!res.allowed) throw new Error(`refused: ${JSON.stringify(res)}`);
    const upstream: Record<string, string> = { ...headers, ...res.set };
    for (const name of res.removed) delete upstream[name];
    expect(serviceCredential(upstream)).toBe(user);
    expect(res.set["authorization"]).toBe(`Bearer ${user}`);
  });
});

describe("platform-api: the rest of the gate", () => {
  const dcim: Target = { policy: "platform-api", service: "dcim-api", path: "/dcim.v1.SiteService/ListSites" };

  it.each([
    { name: "a token for another service (aud=dcim-api) is wrong-audience, not a replay", headers: () => bearer(userToken({ aud: "dcim-api" })), expected: REPLAY },
    { name: "a token signed with the secret being rotated out is accepted", headers: () => bearer(userToken({}, { secret: "old-secret-being-rotated-out-0123456789abcdef0123456" })), expected: USER_ALLOWED },
    { name: "a token from another issuer", headers: () => bearer(userToken({}, { issuer: "someone-else" })), expected: denied("invalid-token", "the token is not valid: claim iss failed: check_failed") },
    { name: "two Authorization values merged by Envoy", headers: async () => ({ authorization: `Bearer ${await t(userToken())}, Bearer ${await t(userToken())}` }), expected: denied("invalid-token", "the credential is malformed") },
    { name: "Bearer wins over the cookie (a PluginToken Bearer beside a user cookie is still refused)", headers: async () => ({ ...(await bearer(pluginToken())), ...(await cookie(userToken(), CONSOLE)) }), expected: REPLAY },
    { name: "organization_ids that are not UUIDs never become a header", headers: () => bearer(userToken({ organization_ids: ["a,b", ORG] })), expected: denied("invalid-token", "the token's organization_ids are not UUIDs") },
  ])("$name", async ({ headers, expected }) => {
    expect(await check(dcim, { ...(await headers()), ...SPOOFED })).toEqual(expected);
  });

  it("a user in no organization gets no organizations header, and a spoofed one is removed", async () => {
    const res = await check(dcim, { ...(await bearer(userToken({ organization_ids: [] }))), "x-fundament-organization-ids": ORG });
    expect(res).toEqual({ allowed: true, grpc: 0, set: { "x-fundament-user-id": ids.user }, appendActions: ["OVERWRITE_IF_EXISTS_OR_ADD"], removed: ["x-fundament-organization-ids"] });
  });

  it.each<{ name: string; extensions: Record<string, string> }>([
    { name: "no service named by the route", extensions: { policy: "platform-api" } },
    { name: "a service that is not configured", extensions: { policy: "platform-api", service: "billing-api" } },
  ])("$name → 403 no-policy, before any token is read", async ({ extensions }) => {
    const res = await check(dcim, await bearer(pluginToken()), extensions);
    expect(res).toMatchObject({ allowed: false, http: 403, grpc: 7, reason: "no-policy" });
    expect(replayLines()).not.toContainEqual(expect.objectContaining({ service: "billing-api" }));
  });
});

describe("public", () => {
  it.each<{ name: string; path: string; headers: Record<string, string> }>([
    { name: "API-key exchange: the key goes on in Authorization", path: "/authn.v1.TokenService/ExchangeToken", headers: { authorization: "Bearer fun_0123456789abcdef" } },
    { name: "login", path: "/login", headers: {} },
    { name: "OIDC callback with its state cookie", path: "/callback", headers: { cookie: "oidc_state=abc" } },
  ])("$name: allowed, credentials untouched, spoofed identity removed", async ({ path, headers }) => {
    const res = await check({ policy: "public", service: "authn-api", path, method: "GET" }, { ...headers, ...SPOOFED });
    expect(res).toEqual(PUBLIC_ALLOWED);
  });

  it.each([
    { name: "a method not listed public", service: "organization-api", path: "/organization.v1.APIKeyService/CreateAPIKey" },
    { name: "a public path of another service", service: "dcim-api", path: "/organization.v1.PluginService/GetPluginDefinition" },
    { name: "a public path with a trailing slash", service: "organization-api", path: "/organization.v1.PluginService/GetPluginDefinition/" },
    { name: "a public path in another case", service: "organization-api", path: "/organization.v1.PluginService/getPluginDefinition" },
    { name: "an unconfigured service", service: "billing-api", path: "/login" },
  ])("$name → 403 no-policy: only what is listed is public", async ({ service, path }) => {
    expect(await check({ policy: "public", service, path }, {})).toMatchObject({ allowed: false, http: 403, reason: "no-policy", body: { error: { code: "no-policy" } } });
  });
});

describe("the replay metric's method label", () => {
  it("is bounded: past 200 distinct paths a replaying plugin chooses, they count as `other`", async () => {
    const token = await t(pluginToken());
    const distinct = 210;
    for (let i = 0; i < distinct; i++) {
      const res = await check({ policy: "platform-api", service: "dcim-api", path: `/dcim.v1.SiteService/Probe${i}` }, { authorization: `Bearer ${token}` });
      expect(res).toMatchObject({ allowed: false, reason: "wrong-audience" });
    }
    const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
    const series = text.split("\n").filter((l) => l.startsWith("portcullis_plugin_token_replay_total{"));
    expect(series.length).toBeLessThanOrEqual(201);
    const other = series.find((l) => l.includes('method="other"'));
    expect(other).toBeDefined();
    expect(Number(other!.slice(other!.lastIndexOf(" ") + 1))).toBeGreaterThanOrEqual(distinct - 200);
  });
});

describe("no token anywhere but where it was sent", () => {
  it("no log line, security event or metric holds a token or its signature", async () => {
    expect(tokens.length).toBeGreaterThan(30);
    const text = await (await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`)).text();
    const logs = server.rawLog();
    expect(replayLines().length).toBeGreaterThanOrEqual(8);
    for (const token of tokens) {
      const signature = token.slice(token.lastIndexOf(".") + 1);
      expect(logs).not.toContain(signature);
      expect(text).not.toContain(signature);
    }
  });
});
