/**
 * The escalation wall for the whole platform (FUN-17 §3, FUN-19 §5) over real gRPC: platform-api
 * and public, for authn-api, organization-api, dcim-api and the public GetPluginDefinition, every
 * way a caller can present (or not present) a credential → the whole CheckResponse. Every PluginToken
 * refused is counted on portcullis_plugin_token_replay_total and logged as a security event naming
 * the installation and plugin, with no token anywhere.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type CheckResponse, envoyCheckRequest, summarize } from "../../support/envoy.ts";
import { FakeWorld } from "../../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../../support/server.ts";
import { ids, PINNED_HASH, pluginToken, sign, userToken } from "../../support/tokens.ts";

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
  // Not a credential from that Origin, but a PluginToken all the same: the service behind reads the
  // cookie whatever the Origin (common/auth/auth.go), so it is the same replay.
  "plugin-cookie-plugin-origin": REPLAY,
  "both-audiences": denied("invalid-token", "the token is not valid: token holds both audiences"),
  expired: denied("invalid-token", "the token is not valid: token expired"),
};

/** public on allow: nothing read, nothing required, spoofed identity removed, no Fundament token passed on, the rest untouched. */
const PUBLIC_ALLOWED = { allowed: true, grpc: 0, set: {}, appendActions: [], removed: ["x-fundament-installation-id", "x-fundament-user-id"] };
/** …and a Fundament token in Authorization (verified or not: expired, both audiences) removed. */
const PUBLIC_BEARER_REMOVED = { ...PUBLIC_ALLOWED, removed: ["authorization", ...PUBLIC_ALLOWED.removed] };
/** …and the fundament_auth cookie removed, the caller's other cookies kept. */
const PUBLIC_COOKIE_DROPPED = { ...PUBLIC_ALLOWED, set: { cookie: "theme=dark" }, appendActions: ["OVERWRITE_IF_EXISTS_OR_ADD"] };

const PUBLIC_EXPECTED: Record<Credential, object> = {
  none: PUBLIC_ALLOWED,
  "user-bearer": PUBLIC_BEARER_REMOVED,
  "user-cookie-console": PUBLIC_COOKIE_DROPPED,
  "user-cookie-plugin-origin": PUBLIC_COOKIE_DROPPED,
  "plugin-bearer": PUBLIC_BEARER_REMOVED,
  "plugin-cookie": PUBLIC_COOKIE_DROPPED,
  "plugin-cookie-plugin-origin": PUBLIC_COOKIE_DROPPED,
  "both-audiences": PUBLIC_BEARER_REMOVED,
  expired: PUBLIC_BEARER_REMOVED,
};

const REPLAYED: ReadonlySet<Credential> = new Set(["plugin-bearer", "plugin-cookie", "plugin-cookie-plugin-origin"]);

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
    expected: target.policy === "public" ? PUBLIC_EXPECTED[credential] : PLATFORM_EXPECTED[credential],
    replay: target.policy === "platform-api" && REPLAYED.has(credential),
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
    const headers = { ...(await CREDENTIALS[credential]()), ...SPOOFED };
    const res = await check(target, headers);
    expect(res).toEqual(expected);
    // On allow, the one token the row sent (a UserToken) reaches platform-api's service; none reaches a public one.
    if (res.allowed) expect(tokensIn(upstream(headers, res))).toEqual(target.policy === "public" ? [] : tokensIn(headers));

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
        origin: credential === "plugin-cookie" ? CONSOLE : credential === "plugin-cookie-plugin-origin" ? PLUGIN_ORIGIN : "",
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
 * fundament_auth cookie (the first pair of that name, split on ";").
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

/** The request as Envoy sends it on after an allow: the client's headers with the mutations applied. */
function upstream(headers: Readonly<Record<string, string>>, res: Awaited<ReturnType<typeof check>>): Record<string, string> {
  if (!res.allowed) throw new Error(`refused: ${JSON.stringify(res)}`);
  const sent: Record<string, string> = { ...headers, ...res.set };
  for (const name of res.removed) delete sent[name];
  return sent;
}

const WS_BEARER = "base64url.bearer.authorization.k8s.io.";
const wsBearer = (token: string) => `${WS_BEARER}${Buffer.from(token).toString("base64url")}`;

/** Every token the upstream request carries anywhere: in any header, and inside a WebSocket bearer subprotocol. */
function tokensIn(headers: Readonly<Record<string, string>>): string[] {
  const texts = Object.values(headers).flatMap((v) => v.split(/[\s,;=]+/));
  const decoded = texts.filter((t) => t.startsWith(WS_BEARER)).map((t) => Buffer.from(t.slice(WS_BEARER.length), "base64url").toString());
  return [...texts, ...decoded].filter((t) => /^[\w-]+\.[\w-]+\.[\w-]+$/.test(t));
}

/**
 * One rule for every carrier (FUN-17 §3): a PluginToken anywhere in a platform-api request — beside a
 * valid UserToken Bearer of any spelling, in the fundament_auth cookie from any Origin, in a
 * WebSocket bearer subprotocol — is the replay (401 wrong-audience, counted, a plugin_token_replay
 * line naming the carrier); on allow the service gets exactly one Fundament credential, the verified
 * UserToken, and the caller's other cookies and subprotocols.
 */
describe("platform-api: one rule for every credential carrier", () => {
  const METHODS: Target[] = [
    { policy: "platform-api", service: "authn-api", path: "/authn.v1.TokenService/MintPluginToken" },
    { policy: "platform-api", service: "organization-api", path: "/organization.v1.APIKeyService/CreateAPIKey" },
  ];
  /** How the verified UserToken is sent: Authorization in every spelling bearerToken() reads. */
  const SPELLINGS = ["Bearer", "bearer", "BEARER", "Bearer ", " Bearer"];
  const CARRIERS: Array<{ name: string; source: "cookie" | "websocket-protocol"; headers: (token: string) => Record<string, string>; kept: Record<string, string> }> = [
    { name: "fundament_auth cookie from the Console", source: "cookie", headers: (v) => ({ cookie: `theme=dark; fundament_auth=${v}`, origin: CONSOLE }), kept: { cookie: "theme=dark" } },
    { name: "fundament_auth cookie from a plugin page", source: "cookie", headers: (v) => ({ cookie: `fundament_auth=${v}; theme=dark`, origin: PLUGIN_ORIGIN }), kept: { cookie: "theme=dark" } },
    { name: "fundament_auth cookie, no Origin", source: "cookie", headers: (v) => ({ cookie: `fundament_auth=${v}` }), kept: {} },
    { name: "fundament_auth cookie behind a comma", source: "cookie", headers: (v) => ({ cookie: `lang=en; theme=dark, fundament_auth=${v}` }), kept: { cookie: "lang=en" } },
    { name: "WebSocket bearer subprotocol", source: "websocket-protocol", headers: (v) => ({ "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(v)}` }), kept: { "sec-websocket-protocol": "v5.channel.k8s.io" } },
    { name: "WebSocket bearer subprotocol alone", source: "websocket-protocol", headers: (v) => ({ "sec-websocket-protocol": wsBearer(v) }), kept: {} },
  ];
  const ROWS = METHODS.flatMap((method) => SPELLINGS.flatMap((scheme) => CARRIERS.map((carrier) => ({ name: `${method.path} · ${JSON.stringify(scheme)} <UserToken> · PluginToken in the ${carrier.name}`, method, scheme, carrier }))));

  it.each(ROWS)("$name → refused as a replay", async ({ method, scheme, carrier }) => {
    const before = replayLines().length;
    const count = await replayCount(method.service, method.path);
    const headers = { authorization: `${scheme} ${await t(userToken())}`, ...carrier.headers(await t(pluginToken())), ...SPOOFED };
    expect(await check(method, headers)).toEqual(REPLAY);
    expect(await replayCount(method.service, method.path)).toBe(count + 1);
    expect(replayLines().slice(before)).toEqual([expect.objectContaining({ audit: "plugin_token_replay", service: method.service, path: method.path, credential: carrier.source, installation_id: ids.installation })]);
  });

  const BESIDE = [
    { name: "another UserToken", value: () => t(userToken({ sub: ids.otherUser })) },
    { name: "an expired PluginToken", value: () => t(pluginToken({}, { exp: Math.floor(Date.now() / 1000) - 600, iat: Math.floor(Date.now() / 1000) - 1200 })) },
    { name: "a PluginToken signed with another secret", value: () => t(pluginToken({}, { secret: "some-other-secret-0123456789abcdef0123456789" })) },
    { name: "no token at all", value: async () => "deleted" },
  ];
  const ALLOWED_ROWS = METHODS.flatMap((method) => SPELLINGS.flatMap((scheme) => CARRIERS.flatMap((carrier) => BESIDE.map((beside) => ({ name: `${method.path} · ${JSON.stringify(scheme)} <UserToken> · ${beside.name} in the ${carrier.name}`, method, scheme, carrier, beside })))));

  it.each(ALLOWED_ROWS)("$name → allowed; the service gets the verified UserToken only", async ({ method, scheme, carrier, beside }) => {
    const user = await t(userToken());
    const headers = { authorization: `${scheme} ${user}`, ...carrier.headers(await beside.value()) };
    const sent = upstream(headers, await check(method, headers));
    expect(serviceCredential(sent)).toBe(user);
    expect(tokensIn(sent)).toEqual([user]);
    expect(sent["authorization"]).toBe(`Bearer ${user}`);
    // The caller's other cookies and subprotocols go on, exactly.
    expect({ cookie: sent["cookie"], "sec-websocket-protocol": sent["sec-websocket-protocol"] }).toEqual({ cookie: undefined, "sec-websocket-protocol": undefined, ...carrier.kept });
  });

  it.each([
    { name: "the Console's cookie UserToken and a PluginToken subprotocol", headers: async () => ({ ...(await cookie(userToken(), CONSOLE)), "sec-websocket-protocol": wsBearer(await t(pluginToken())) }), source: "websocket-protocol" },
    { name: "a PluginToken cookie beside the Console's: two cookies of that name", headers: async () => ({ cookie: `fundament_auth=${await t(userToken())}; fundament_auth=${await t(pluginToken())}`, origin: CONSOLE }), source: "cookie" },
    { name: "a UserToken and a PluginToken merged into one Authorization", headers: async () => ({ authorization: `Bearer ${await t(userToken())}, Bearer ${await t(pluginToken())}` }), source: "bearer" },
    { name: "a PluginToken subprotocol alone (platform-api reads no subprotocol)", headers: async () => ({ "sec-websocket-protocol": wsBearer(await t(pluginToken())) }), source: "websocket-protocol" },
  ])("$name → refused as a replay", async ({ headers, source }) => {
    const before = replayLines().length;
    expect(await check(METHODS[0]!, await headers())).toEqual(REPLAY);
    expect(replayLines().slice(before)).toEqual([expect.objectContaining({ credential: source })]);
  });

  it("the Console's cookie UserToken: the cookie goes on as sent, a bearer subprotocol does not", async () => {
    const user = await t(userToken());
    const headers = { cookie: `theme=dark; fundament_auth=${user}`, origin: CONSOLE, "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(await t(userToken({ sub: ids.otherUser })))}` };
    const sent = upstream(headers, await check(METHODS[1]!, headers));
    expect(sent["cookie"]).toBe(headers.cookie);
    expect(sent["sec-websocket-protocol"]).toBe("v5.channel.k8s.io");
    expect(serviceCredential(sent)).toBe(user);
    expect(tokensIn(sent)).toEqual([user]);
  });

  it("more tokens than any client sends are refused unread", async () => {
    const user = await t(userToken());
    const stuffed = { authorization: `Bearer ${user}`, cookie: ["a.b.c", "d.e.f", "g.h.i", "j.k.l"].map((v) => `fundament_auth=${v}`).join("; ") };
    expect(await check(METHODS[0]!, stuffed)).toEqual(denied("invalid-token", "too many credentials"));
  });

  it("a PluginToken among more tokens than any client sends is refused as the replay it is", async () => {
    const stuffed = { cookie: ["a.b.c", "d.e.f", "g.h.i", "j.k.l", await t(pluginToken())].map((v) => `fundament_auth=${v}`).join("; ") };
    expect(await check(METHODS[0]!, stuffed)).toEqual(REPLAY);
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
  /** An API key as authn-api issues them (common/apitoken: fun_ + 30 base62 + a 6-character checksum). */
  const API_KEY = "fun_0123456789ABCDEFGHIJKLMNOPQRSTabcdef";
  it.each<{ name: string; path: string; headers: Record<string, string> }>([
    { name: "API-key exchange: the key goes on in Authorization", path: "/authn.v1.TokenService/ExchangeToken", headers: { authorization: `Bearer ${API_KEY}` } },
    { name: "login", path: "/login", headers: {} },
    { name: "OIDC callback with its state cookie (authn-api's fundament_session)", path: "/callback", headers: { cookie: "fundament_session=MTcwMDAwMDAwMHxEdi1CQkFFQ180SUFBUkFCRUFBQV98" } },
  ])("$name: allowed, what the endpoint reads untouched, spoofed identity removed", async ({ path, headers }) => {
    const res = await check({ policy: "public", service: "authn-api", path, method: "GET" }, { ...headers, ...SPOOFED });
    expect(res).toEqual(PUBLIC_ALLOWED);
  });

  const definition: Target = { policy: "public", service: "organization-api", path: "/organization.v1.PluginService/GetPluginDefinition" };
  const exchange: Target = { policy: "public", service: "authn-api", path: "/authn.v1.TokenService/ExchangeToken" };
  const callback: Target = { policy: "public", service: "authn-api", path: "/callback", method: "GET" };

  /** Every carrier of a Fundament token × the public endpoints: none reaches the service, nothing is refused, nothing else is lost. */
  const CARRIED: Array<{ name: string; headers: (token: string) => Record<string, string>; kept: Record<string, string> }> = [
    ...["Bearer", "bearer", "BEARER", "Bearer ", " Bearer"].map((scheme) => ({ name: `Authorization ${JSON.stringify(scheme)}`, headers: (v: string) => ({ authorization: `${scheme} ${v}` }), kept: {} })),
    { name: "Authorization, two values merged", headers: (v) => ({ authorization: `Bearer ${API_KEY}, Bearer ${v}` }), kept: {} },
    { name: "the fundament_auth cookie from the Console", headers: (v) => ({ cookie: `fundament_session=s1; fundament_auth=${v}; theme=dark`, origin: CONSOLE }), kept: { cookie: "fundament_session=s1; theme=dark" } },
    { name: "the fundament_auth cookie from a plugin page", headers: (v) => ({ cookie: `fundament_auth=${v}`, origin: PLUGIN_ORIGIN }), kept: {} },
    { name: "the WebSocket bearer subprotocol", headers: (v) => ({ "sec-websocket-protocol": `v5.channel.k8s.io, ${wsBearer(v)}` }), kept: { "sec-websocket-protocol": "v5.channel.k8s.io" } },
  ];
  const TOKENS = [
    { token: "a PluginToken", mint: () => t(pluginToken()) },
    { token: "a UserToken", mint: () => t(userToken()) },
    { token: "an expired PluginToken", mint: () => t(pluginToken({}, { exp: Math.floor(Date.now() / 1000) - 600, iat: Math.floor(Date.now() / 1000) - 1200 })) },
    { token: "a PluginToken signed with a secret portcullis does not hold", mint: () => t(pluginToken({}, { secret: "some-other-secret-0123456789abcdef0123456789" })) },
  ];
  const PUBLIC_ROWS = [definition, exchange, callback].flatMap((target) => CARRIED.flatMap((carrier) => TOKENS.map((token) => ({ name: `${target.path} · ${token.token} in ${carrier.name}`, target, carrier, token }))));

  it.each(PUBLIC_ROWS)("$name → allowed, the service receives no Fundament token", async ({ target, carrier, token }) => {
    const before = replayLines().length;
    const headers = carrier.headers(await token.mint());
    const sent = upstream(headers, await check(target, headers));
    expect(tokensIn(sent)).toEqual([]);
    expect(serviceCredential(sent)).toBeUndefined();
    expect({ cookie: sent["cookie"], "sec-websocket-protocol": sent["sec-websocket-protocol"] }).toEqual({ cookie: undefined, "sec-websocket-protocol": undefined, ...carrier.kept });
    // Nothing is refused or counted on a public route: none of them reads a Fundament token.
    expect(replayLines().slice(before)).toEqual([]);
  });

  it.each([
    { name: "the API key beside a PluginToken cookie: the key goes on, the cookie does not", headers: async () => ({ authorization: `Bearer ${API_KEY}`, cookie: `fundament_auth=${await t(pluginToken())}` }), authorization: `Bearer ${API_KEY}` },
    { name: "a workload's ServiceAccount token (another issuer's JWT) goes on", headers: async () => ({ authorization: `Bearer ${await sign({ sub: "system:serviceaccount:ci:deployer", aud: "authn-api" }, { issuer: "https://kubernetes.default.svc.cluster.local" })}` }), authorization: "same" },
  ])("$name", async ({ headers, authorization }) => {
    const sent = await headers();
    const forwarded = upstream(sent, await check(exchange, sent));
    expect(forwarded["authorization"]).toBe(authorization === "same" ? sent.authorization : authorization);
    expect(forwarded["cookie"]).toBeUndefined();
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
