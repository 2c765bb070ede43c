/**
 * Property-based fuzzing of the decision core with fast-check: CheckRequests are generated from the
 * route shapes portcullis serves, then mutated (paths, queries, tokens, schemes, duplicated and
 * smuggled headers, raw header maps), against a world whose every answer is also generated. The
 * in-process checker (createChecker over the real policies from policiesFor) takes the bulk for
 * speed; a share goes through real gRPC. Properties, for every request:
 *   1. no allow without a credential that is valid for the route (tracked per generated token), and
 *      without every gate's dependency saying yes;
 *   2. never a thrown error, never a missing status, never an internal error, and every denial is
 *      the table's status for its reason;
 *   3. the same request against the same answers gives the same response (a warm token cache too);
 *   4. every allow keeps header hygiene (no caller-identity header, no bearer subprotocol travels on).
 * FUZZ_RUNS overrides the in-process run count (CI default below, ~100,000 requests).
 */
import * as fc from "fast-check";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createChecker } from "../../src/authz/check.ts";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { REASONS } from "../../src/authz/reasons.ts";
import type { CheckRequestMessage } from "../../src/envoy/check-request.ts";
import { type CheckResponseMessage, OVERWRITE_IF_EXISTS_OR_ADD, STREAM_DURATION_HEADER } from "../../src/envoy/check-response-message.ts";
import { externalAuthRoot } from "../../src/envoy/protos.ts";
import { policiesFor } from "../../src/server/policies.ts";
import type { CheckResponse } from "../support/envoy.ts";
import { FakeWorld, installation } from "../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids, pluginToken, sign, userToken, pluginClaims } from "../support/tokens.ts";
import { b64url, craft, validPluginPayload } from "../support/jwt-craft.ts";

const IN_PROCESS_RUNS = Number(process.env["FUZZ_RUNS"] ?? 100_000);
const GRPC_RUNS = 10_000;
const GARBAGE_RUNS = 10_000;

// ---------------------------------------------------------------- tokens, and which are valid for what
interface Valid {
  readonly type: "user" | "plugin";
  readonly clusterId?: string;
  readonly installationId?: string;
}

const valid = new Map<string, Valid>();
/** The first VALID_COUNT tokens are valid for something; the rest are not. */
const pool: string[] = [];
const VALID_COUNT = 5;

/** The signature segment decoded and re-encoded: base64url text differing only in unused bits is the same signature. */
function canonical(token: string): string {
  const parts = token.split(".");
  if (parts.length !== 3 || !parts.every((p) => /^[A-Za-z0-9_-]+$/.test(p))) return token;
  return `${parts[0]}.${parts[1]}.${Buffer.from(parts[2]!, "base64url").toString("base64url")}`;
}

async function mint(): Promise<void> {
  const add = (token: string, v?: Valid) => {
    pool.push(token);
    if (v !== undefined) valid.set(canonical(token), v);
  };
  add(await userToken(), { type: "user" });
  add(await userToken({ sub: ids.otherUser }), { type: "user" });
  add(await pluginToken(), { type: "plugin", clusterId: ids.cluster, installationId: ids.installation });
  add(await pluginToken({ cluster_id: ids.otherCluster }), { type: "plugin", clusterId: ids.otherCluster, installationId: ids.installation });
  add(await pluginToken({ installation_id: ids.otherInstallation, installation_name: "grafana" }), {
    type: "plugin",
    clusterId: ids.cluster,
    installationId: ids.otherInstallation,
  });
  const now = Math.floor(Date.now() / 1000);
  add(await pluginToken({}, { exp: now - 60 }));
  add(await pluginToken({}, { secret: "wrong-secret-0123456789abcdef0123456789abcdef" }));
  add(await userToken({}, { nbf: now + 600 }));
  add(await pluginToken({ aud: "organization-api" }));
  add(await pluginToken({ aud: ["fundament-plugin", "fundament-user"] }));
  add(await pluginToken({ installation_name: "a\r\nx-evil: 1" }));
  add(await pluginToken({ aud: 7 }));
  add(await sign(pluginClaims(), { issuer: "fundament-authn-api/" }));
  add(craft({ alg: "none" }, validPluginPayload(), { signature: "" }));
  add(craft({ alg: "NoNe" }, validPluginPayload(), { signature: "e30" }));
  add("not-a-jwt");
}

// ---------------------------------------------------------------- generators
const SEGMENTS = [
  "v1", "namespaces", "team-a", "kube-system", "pods", "secrets", "configmaps", "exec", "status", "watch", "proxy",
  "apps", "..", ".", "", "%2F", "%2e%2e", "%2E.", "a;b", "%00", "%0d%0a", "%zz", "%ff", "web-0", "index.html",
  ids.cluster, ids.installation, ids.otherInstallation,
];
const segment = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...SEGMENTS) }, { weight: 1, arbitrary: fc.string({ maxLength: 6 }) });
const WELL_FORMED = ["v1/namespaces/team-a/pods", "v1/namespaces/team-a/pods/web-0/exec", "v1/pods", "apps/v1/namespaces/team-a/deployments", "v3/apis/apps/v1", "index.html"];
const rest = fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...WELL_FORMED) }, { weight: 2, arbitrary: fc.array(segment, { maxLength: 6 }).map((s) => s.join("/")) });
const QUERY_PAIRS = [
  "watch", "watch=1", "watch=0", "watch=false", "watch=true;", "watch=1;x", "watch=%zz", "wAtch=1", "watch=%31",
  "fieldSelector=metadata.name%3Dallowed-secret", "fieldSelector=metadata.name!%3Dx", "fieldSelector=metadata.name%3Dallowed-secret;",
  "labelSelector=((", "limit=ten", "x=a;b", "timeoutSeconds=5", "command=sh",
];
const query = fc.oneof(
  { weight: 2, arbitrary: fc.constant("") },
  {
    weight: 1,
    arbitrary: fc
      .array(fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...QUERY_PAIRS) }, { weight: 1, arbitrary: fc.string({ maxLength: 8 }) }), { minLength: 1, maxLength: 4 })
      .map((q) => `?${q.join("&")}`),
  },
);

type Route = "kube" | "plugin" | "assets" | "other";
const routePath = (route: Route) => {
  switch (route) {
    case "kube":
      return fc
        .tuple(
          fc.oneof({ weight: 6, arbitrary: fc.constant(ids.cluster) }, { weight: 4, arbitrary: fc.constantFrom(ids.otherCluster, ids.cluster.toUpperCase(), "prod", "") }),
          fc.oneof({ weight: 6, arbitrary: fc.constantFrom("api", "apis") }, { weight: 4, arbitrary: fc.constantFrom("version", "openapi", "healthz", "API", "") }),
          rest,
        )
        .map(([c, root, r]) => `/clusters/${c}/${root}${r === "" ? "" : `/${r}`}`);
    case "plugin":
      return fc
        .tuple(
          fc.oneof({ weight: 6, arbitrary: fc.constant(ids.installation) }, { weight: 4, arbitrary: fc.constantFrom(ids.otherInstallation, ids.installation.toUpperCase(), "", "x") }),
          fc.constantFrom("runtime", "controller", "runtimes"),
          rest,
        )
        .map(([i, u, r]) => `/installations/${i}/${u}/${r}`);
    case "assets":
      return fc.tuple(fc.constantFrom("cert-manager", "sdk", "Grafana", ".."), fc.constantFrom("1.4.0", "..", "v2"), rest).map(([n, v, r]) => `/plugins/${n}/${v}/console/${r}`);
    case "other":
      return fc.string({ maxLength: 40 });
  }
};
const POLICY_OF: Record<Route, string> = { kube: "kube-api-proxy", plugin: "plugin-proxy", assets: "plugin-assets", other: "kube-api-proxy" };

/** A token from the pool, maybe damaged on the way. */
const token = fc.oneof(
  { weight: 6, arbitrary: fc.nat().map((i) => pool[i % pool.length]!) },
  {
    weight: 3,
    arbitrary: fc.tuple(fc.nat(), fc.nat(), fc.constantFrom("A", "z", "_", "-", ".", "=", " ", "\u00e9", "\r")).map(([i, at, c]) => {
      const t = pool[i % pool.length]!;
      const j = at % (t.length + 1);
      return t.slice(0, j) + c + t.slice(j + 1);
    }),
  },
  { weight: 1, arbitrary: fc.tuple(fc.nat(), fc.nat()).map(([i, n]) => pool[i % pool.length]!.slice(0, -1 - (n % 40))) },
  {
    weight: 1,
    // The payload of one token under the signature of another.
    arbitrary: fc.tuple(fc.nat(), fc.nat()).map(([i, j]) => {
      const [h, , s] = pool[i % pool.length]!.split(".");
      return `${h}.${pool[j % pool.length]!.split(".")[1]}.${s}`;
    }),
  },
);

type Where = "bearer" | "cookie" | "ws";
type Browser = "same-origin" | "absent" | "same-site" | "cross-site" | "plugin-origin";
const BROWSER_HEADERS: Record<Browser, Array<[string, string]>> = {
  "same-origin": [["sec-fetch-site", "same-origin"]],
  absent: [],
  "same-site": [["sec-fetch-site", "same-site"]],
  "cross-site": [["sec-fetch-site", "cross-site"]],
  "plugin-origin": [["origin", "https://plugin-proxy.fundament.io"], ["sec-fetch-site", "same-origin"]],
};
const credential = fc.record({
  where: fc.constantFrom<Where>("bearer", "bearer", "cookie", "ws"),
  scheme: fc.constantFrom("Bearer ", "bearer ", "BEARER ", "Bearer  ", "Basic ", "", "Bearer\t", " Bearer "),
  token,
});

interface Credential {
  readonly where: Where;
  readonly scheme: string;
  readonly token: string;
}
const credentials: fc.Arbitrary<Credential[]> = fc.oneof(
  // Mostly one well-formed Bearer: the shape real clients send, and the one an allow rests on.
  { weight: 3, arbitrary: fc.nat().map((i) => [{ where: "bearer" as const, scheme: "Bearer ", token: pool[i % VALID_COUNT]! }]) },
  { weight: 2, arbitrary: fc.array(credential, { maxLength: 3 }) },
);

const HEADER_NAMES = [
  "x-fundament-user-id", "x-fundament-cluster-id", "x-fundament-upstream-service", "x-konfidence-project", "X-Fundament-Installation-Id",
  "impersonate-user", "Impersonate-Group", "x-request-id", "connection", "upgrade", "cookie", "x-forwarded-for", "host",
];
const extraHeader = fc.tuple(fc.constantFrom(...HEADER_NAMES), fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: "binary", maxLength: 12 })));

const worldArb = fc.oneof(
  // Half the worlds say yes to everything, so the allow side is exercised as hard as the deny side.
  fc.constant({ canView: true as boolean | "unavailable", sar: "allow", token: "issued", installation: "ok", indexSynced: true, clusterKnown: true }),
  fc.record({
    canView: fc.constantFrom<boolean | "unavailable">(true, true, false, "unavailable"),
    sar: fc.constantFrom("team-a-only", "allow", "deny", "unavailable"),
    token: fc.constantFrom("issued", "issued", "missing", "unavailable"),
    installation: fc.constantFrom("ok", "ok", "terminating", "unpinned", "other-name", "missing"),
    indexSynced: fc.constantFrom(true, true, true, false),
    clusterKnown: fc.constantFrom(true, true, true, false),
  }),
);
type WorldSpec = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;

const METHODS = ["GET", "GET", "GET", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get", "PROPFIND", ""];

const requestArb = fc
  .record({
    route: fc.constantFrom<Route>("kube", "kube", "kube", "plugin", "plugin", "assets", "other"),
    policyDrift: fc.oneof({ weight: 12, arbitrary: fc.constant("match") }, { weight: 4, arbitrary: fc.constantFrom("other-policy", "konfidence-api", "none", "junk") }),
    method: fc.constantFrom(...METHODS),
    credentials,
    wsProtocols: fc.constantFrom("", "v5.channel.k8s.io"),
    // The page a browser says the request came from: the session cookie counts only for same-origin (no Console origin is configured here).
    browser: fc.constantFrom<Browser>("same-origin", "same-origin", "absent", "same-site", "cross-site", "plugin-origin"),
    extra: fc.array(extraHeader, { maxLength: 4 }),
    raw: fc.boolean(),
    query,
  })
  .chain((r) => routePath(r.route).map((path) => ({ ...r, path: path + r.query })));
type RequestSpec = typeof requestArb extends fc.Arbitrary<infer T> ? T : never;

function policyOf(spec: RequestSpec): string | undefined {
  switch (spec.policyDrift) {
    case "match":
      return POLICY_OF[spec.route];
    case "other-policy":
      return spec.route === "kube" ? "plugin-proxy" : "kube-api-proxy";
    case "none":
      return undefined;
    case "junk":
      return "allow-all";
    default:
      return spec.policyDrift;
  }
}

/** The headers Envoy would send: repeated values merged with ", ", names lower-cased. */
function headersOf(spec: RequestSpec): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const c of spec.credentials) {
    if (c.where === "bearer") out.push(["authorization", `${c.scheme}${c.token}`]);
    if (c.where === "cookie") out.push(["cookie", `theme=dark; fundament_auth=${c.token}`]);
    if (c.where === "ws") out.push(["sec-websocket-protocol", `base64url.bearer.authorization.k8s.io.${b64url(c.token)}`]);
  }
  if (spec.wsProtocols !== "") out.push(["sec-websocket-protocol", spec.wsProtocols]);
  out.push(...BROWSER_HEADERS[spec.browser]);
  for (const [name, value] of spec.extra) out.push([name, value]);
  return out;
}

function merged(pairs: Array<[string, string]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of pairs) {
    const name = k.toLowerCase();
    out[name] = name in out ? `${out[name]}, ${v}` : v;
  }
  return out;
}

function messageOf(spec: RequestSpec): CheckRequestMessage {
  const policy = policyOf(spec);
  const pairs = headersOf(spec);
  const http = spec.raw
    ? { method: spec.method, path: spec.path, header_map: { headers: pairs.map(([key, value]) => ({ key, raw_value: Buffer.from(value, "latin1") })) } }
    : { method: spec.method, path: spec.path, headers: merged(pairs) };
  return { attributes: { request: { http }, context_extensions: policy === undefined ? {} : { policy } } };
}

// ---------------------------------------------------------------- the world
function applyWorld(w: FakeWorld, spec: WorldSpec): void {
  w.calls = [];
  w.audits = [];
  w.sarRequests = [];
  w.canViewAnswer = spec.canView;
  w.sarAnswer = (_c, _u, a) =>
    spec.sar === "unavailable" ? "unavailable" : spec.sar === "allow" ? true : spec.sar === "deny" ? false : a.kind === "resource" && a.namespace === "team-a";
  w.tokenAnswer = (_c, ns, name) => (spec.token === "issued" ? `sa-token-for-${ns}-${name}` : spec.token === "missing" ? undefined : "unavailable");
  w.installationsByUid = new Map(
    spec.installation === "missing"
      ? []
      : [
          [
            ids.installation,
            installation(
              spec.installation === "terminating" ? { terminating: true } : spec.installation === "unpinned" ? { definitionHash: "" } : spec.installation === "other-name" ? { name: "other" } : {},
            ),
          ],
          [ids.otherInstallation, installation({ uid: ids.otherInstallation, name: "grafana" })],
        ],
  );
  w.indexSynced = spec.indexSynced;
  w.clusterIds = new Set(spec.clusterKnown ? [ids.cluster, ids.otherCluster] : []);
}

// ---------------------------------------------------------------- the oracle
const decodedSegments = (path: string): string[] | undefined => {
  try {
    return decodeURIComponent(path.split("?")[0]!.split("#")[0]!).split("/");
  } catch {
    return undefined;
  }
};

/** The valid credentials the request carries, by where they are (what an allow may rest on). */
function validCredentials(spec: RequestSpec): Array<{ where: Where; v: Valid }> {
  return spec.credentials.flatMap((c) => {
    // Whitespace around the credential is not part of it: Authorization takes spaces before and
    // spaces or tabs after; a cookie value is trimmed. A subprotocol entry is taken as it is.
    const token = c.where === "bearer" ? c.token.replace(/^ +/, "").replace(/[ \t]+$/, "") : c.where === "cookie" ? c.token.trim() : c.token;
    const v = valid.get(canonical(token));
    return v === undefined ? [] : [{ where: c.where, v }];
  });
}

/** Why this allow is wrong, or undefined when every necessary condition holds. */
function wrongAllow(spec: RequestSpec, world: WorldSpec, res: CheckResponseMessage, sarAnswers: readonly AccessAttributes[]): string | undefined {
  const sarAsked = sarAnswers.length > 0;
  const policy = policyOf(spec);
  const method = spec.method.toUpperCase();
  const segments = decodedSegments(spec.path);
  if (policy === "plugin-assets") {
    if (method !== "GET" && method !== "HEAD") return "asset allowed for a non-read method";
    if (!spec.path.startsWith("/plugins/") || segments === undefined || segments.some((s) => s === "." || s === "..")) return "asset path escapes /plugins/";
    return undefined;
  }
  if (policy !== "kube-api-proxy" && policy !== "plugin-proxy") return `allowed under policy ${String(policy)}`;
  if (world.canView !== true) return "allowed without can_view";
  if (!world.clusterKnown) return "allowed on an unknown cluster";
  if (segments === undefined || segments.some((s) => s === "." || s === "..")) return "allowed a dot segment";
  const creds = validCredentials(spec);
  const set = Object.fromEntries((res.ok_response?.headers ?? []).map((h) => [h.header.key, h.header.value]));
  // plugin-proxy reads Bearer only; kube-api-proxy Bearer and the WebSocket subprotocol, and the cookie only without either (and only same-origin).
  const explicitSources: readonly Where[] = policy === "plugin-proxy" ? ["bearer"] : ["bearer", "ws"];
  // An Authorization header that is only whitespace carries no credential (missing, not invalid).
  const explicit = spec.credentials.filter((c) => explicitSources.includes(c.where) && !(c.where === "bearer" && `${c.scheme}${c.token}`.trim() === "")).length;
  if (explicit > 1) return "allowed with more than one explicit credential";

  if (policy === "plugin-proxy") {
    const id = /^\/installations\/([^/]*)\//.exec(spec.path)?.[1];
    const ok = creds.some((c) => c.where === "bearer" && c.v.type === "plugin" && c.v.installationId === id);
    if (!ok) return "plugin-proxy allowed without a PluginToken for this installation";
    if ("authorization" in set) return "plugin-proxy passed a credential upstream";
    return undefined;
  }
  // kube-api-proxy
  const clusterInUrl = /^\/clusters\/([^/]*)\//.exec(spec.path)?.[1];
  const cookies = spec.credentials.filter((c) => c.where === "cookie").length;
  const cookieCounts = spec.browser === "same-origin";
  const usable = creds.filter((c) => (explicit === 1 ? c.where !== "cookie" : c.where === "cookie" && cookies === 1 && cookieCounts));
  const user = usable.some((c) => c.v.type === "user");
  const pluginCred = usable.find((c) => c.v.type === "plugin" && c.where !== "cookie" && c.v.clusterId === clusterInUrl);
  if (!user && pluginCred === undefined) return "kube-api-proxy allowed without a token valid for this cluster";
  if (world.token !== "issued") return "allowed without a ServiceAccount token";
  if (!String(set["authorization"] ?? "").startsWith("Bearer sa-token-for-")) return "allowed without swapping in the ServiceAccount token";
  // Envoy routes a registered cluster by this header: always the URL's cluster, whatever the client sent.
  if (set["x-fundament-kube-api-cluster"] !== `kube-api-${clusterInUrl}`) return "allowed without naming the URL's cluster as the upstream";
  if (pluginCred !== undefined && !user) {
    if (spec.extra.some(([name]) => name.toLowerCase().startsWith("impersonate-"))) return "plugin request allowed with impersonation";
    // The world's installation spec is the one at ids.installation; grafana (the other) is always usable.
    const usableInstallation = pluginCred.v.installationId === ids.otherInstallation || world.installation === "ok";
    if (!world.indexSynced || !usableInstallation) return "plugin request allowed on an unusable installation";
    if (world.sar === "deny" || world.sar === "unavailable" || !sarAsked) return "plugin request allowed without the user's SubjectAccessReview";
    if (world.sar === "team-a-only" && !sarAnswers.every((a) => a.kind === "resource" && a.namespace === "team-a")) return "plugin request allowed past a denied SubjectAccessReview";
  }
  return undefined;
}

/** Properties 2 and 4: a well-formed answer, and hygiene on allow. */
function malformedResponse(spec: RequestSpec, res: CheckResponseMessage): string | undefined {
  if (typeof res.status?.code !== "number") return "no status";
  if (res.status.code === 0) {
    if (res.ok_response === undefined || res.denied_response !== undefined) return "OK without ok_response";
    const sent = merged(headersOf(spec));
    const removed = new Set(res.ok_response.headers_to_remove);
    const set = new Map(res.ok_response.headers.map((h) => [h.header.key, h.header.value]));
    for (const [name, value] of Object.entries(sent)) {
      if (!name.startsWith("x-fundament-") && !name.startsWith("x-konfidence-")) continue;
      if (!removed.has(name) && (!set.has(name) || set.get(name) === value)) return `${name} survived`;
    }
    if (res.ok_response.headers.some((h) => h.append_action !== OVERWRITE_IF_EXISTS_OR_ADD)) return "a header is appended, not overwritten";
    const protocols = sent["sec-websocket-protocol"];
    const forwarded = removed.has("sec-websocket-protocol") ? "" : (set.get("sec-websocket-protocol") ?? protocols ?? "");
    if (forwarded.includes("base64url.bearer.authorization.k8s.io.")) return "a bearer subprotocol travels on";
    return undefined;
  }
  const reason = res.denied_response?.headers.find((h) => h.header.key === "x-portcullis-reason")?.header.value;
  if (reason === undefined || !(reason in REASONS)) return `denial without a known reason (${String(reason)})`;
  if (reason === "internal-error") return "internal error";
  const expected = REASONS[reason as keyof typeof REASONS];
  if (res.status.code !== expected.grpc || res.denied_response?.status.code !== expected.http) return `${reason} with the wrong status`;
  return undefined;
}

// ---------------------------------------------------------------- the runs
const world = new FakeWorld();
// The fakes answer at once: a deadline here would only turn a CPU-starved CI run into a 503 (and a
// spurious determinism failure); deadlines are the fault suite's subject.
const checker = () =>
  createChecker({ policies: policiesFor(testConfig(), world), audit: world.audit, timeoutMs: 30_000, retryAfterSeconds: 1, logger: pino({ level: "silent" }) });
const figures = { inProcess: 0, grpc: 0, garbage: 0, allowed: 0, ms: 0 };

beforeAll(async () => {
  await mint();
});
afterAll(() => {
  console.log(
    `fuzz: ${figures.inProcess} in-process + ${figures.grpc} gRPC + ${figures.garbage} garbage CheckRequests in ${(figures.ms / 1000).toFixed(1)} s; ${figures.allowed} allowed, 0 wrong allows, 0 crashes`,
  );
});

/** Checks one request against every property; true when it was allowed. */
async function property(check: (m: CheckRequestMessage) => Promise<CheckResponseMessage>, spec: RequestSpec, worldSpec: WorldSpec, twice: boolean): Promise<boolean> {
  applyWorld(world, worldSpec);
  const message = messageOf(spec);
  const first = await check(message);
  const sarAsked = [...world.sarRequests];
  const problem = malformedResponse(spec, first) ?? (first.status.code === 0 ? wrongAllow(spec, worldSpec, first, sarAsked) : undefined);
  if (problem !== undefined) throw new Error(`${problem}: ${JSON.stringify({ message, worldSpec, response: first })}`);
  if (twice) {
    applyWorld(world, worldSpec);
    expect(clockless(await check(message))).toEqual(clockless(first));
  }
  return first.status.code === 0;
}

/**
 * The answer with a stream bound's duration left out: it is the token's remaining lifetime, which
 * counts down between the two checks of one request (a second boundary crossed: 893000, then 892000).
 */
function clockless(response: CheckResponseMessage): unknown {
  return JSON.parse(JSON.stringify(response), (_key, value: unknown) =>
    typeof value === "object" && value !== null && (value as { key?: unknown }).key === STREAM_DURATION_HEADER ? { key: STREAM_DURATION_HEADER, value: "(the token's remaining lifetime)" } : value,
  );
}

describe("fuzzing the decision core", () => {
  it(`in process: ${IN_PROCESS_RUNS} generated and mutated CheckRequests`, { timeout: 120_000 }, async () => {
    const check = checker();
    const started = performance.now();
    await fc.assert(
      fc.asyncProperty(requestArb, worldArb, fc.boolean(), async (spec, worldSpec, twice) => {
        figures.inProcess++;
        if (await property(check, spec, worldSpec, twice)) figures.allowed++;
      }),
      { numRuns: IN_PROCESS_RUNS, seed: process.env["FUZZ_SEED"] === undefined ? undefined : Number(process.env["FUZZ_SEED"]) },
    );
    figures.ms += performance.now() - started;
  });

  it(`over gRPC: ${GRPC_RUNS} CheckRequests through the real server`, { timeout: 60_000 }, async () => {
    const server: TestServer = await startTestServer(world, testConfig({ logLevel: "warn" }));
    const started = performance.now();
    try {
      await fc.assert(
        fc.asyncProperty(requestArb, worldArb, async (spec, worldSpec) => {
          figures.grpc++;
          if (await property(async (m) => toMessage(await server.checkRaw(m)), spec, worldSpec, false)) figures.allowed++;
        }),
        { numRuns: GRPC_RUNS },
      );
    } finally {
      await server.stop();
    }
    figures.ms += performance.now() - started;
  });

  it(`garbage: ${GARBAGE_RUNS} CheckRequests of the wrong shape never throw and never allow`, { timeout: 60_000 }, async () => {
    const check = checker();
    applyWorld(world, { canView: true, sar: "allow", token: "issued", installation: "ok", indexSynced: true, clusterKnown: true });
    const started = performance.now();
    const anyValue = fc.anything({ maxDepth: 2 });
    const garbage = fc.oneof(
      anyValue,
      fc.record({ attributes: fc.record({ request: fc.record({ http: anyValue }), context_extensions: fc.oneof(anyValue, fc.constant({ policy: "kube-api-proxy" })) }) }),
      fc.record({
        attributes: fc.record({
          request: fc.record({ http: fc.record({ method: anyValue, path: anyValue, headers: anyValue, header_map: fc.record({ headers: fc.array(anyValue) }) }, { requiredKeys: [] }) }),
          context_extensions: fc.constant({ policy: "kube-api-proxy" }),
        }),
      }),
    );
    await fc.assert(
      fc.asyncProperty(garbage, async (message) => {
        figures.garbage++;
        const res = await check(message as CheckRequestMessage);
        expect(typeof res.status.code).toBe("number");
        expect(res.status.code).not.toBe(0);
      }),
      { numRuns: GARBAGE_RUNS },
    );
    figures.ms += performance.now() - started;
  });
});

/** An allow as a broken gateway would give it, with a ServiceAccount token swapped in. */
const ALLOW: CheckResponseMessage = {
  status: { code: 0, message: "" },
  ok_response: { headers: [{ header: { key: "authorization", value: "Bearer sa-token-for-x" }, append_action: OVERWRITE_IF_EXISTS_OR_ADD }], headers_to_remove: [] },
};
const reasonOf = (res: CheckResponseMessage) => res.denied_response?.headers.find((h) => h.header.key === "x-portcullis-reason")?.header.value;

describe("the properties can fail: each catches a deliberately broken checker", () => {
  const mutants: Array<{ name: string; mutate: (check: ReturnType<typeof checker>) => ReturnType<typeof checker> }> = [
    { name: "lets cluster-mismatch through", mutate: (check) => async (m) => ((r) => (reasonOf(r) === "cluster-mismatch" ? ALLOW : r))(await check(m)) },
    { name: "lets installation-mismatch through", mutate: (check) => async (m) => ((r) => (reasonOf(r) === "installation-mismatch" ? ALLOW : r))(await check(m)) },
    { name: "lets a 503 through", mutate: (check) => async (m) => ((r) => (reasonOf(r) === "dependency-unavailable" ? ALLOW : r))(await check(m)) },
    {
      name: "forgets to remove smuggled headers",
      mutate: (check) => async (m) => ((r) => (r.ok_response === undefined ? r : { ...r, ok_response: { ...r.ok_response, headers_to_remove: [] } }))(await check(m)),
    },
    { name: "throws on a cookie", mutate: (check) => async (m) => (JSON.stringify(m).includes("fundament_auth") ? Promise.reject(new Error("boom")) : check(m)) },
    {
      name: "answers differently the second time",
      mutate: (check) => {
        let calls = 0;
        return async (m) => ((r) => (++calls % 2 === 0 && r.status.code !== 0 ? { ...r, status: { ...r.status, message: "flipped" } } : r))(await check(m));
      },
    },
  ];

  it.each(mutants)("$name", async ({ mutate }) => {
    const check = mutate(checker());
    const run = fc.assert(
      fc.asyncProperty(requestArb, worldArb, async (spec, worldSpec) => void (await property(check, spec, worldSpec, true))),
      { numRuns: 5_000 },
    );
    await expect(run).rejects.toThrow(/Property failed/);
  });
});

/** The gRPC client decodes enums as names (numbers here, from the vendored proto) and leaves absent fields out; back to the checker's shape. */
function toMessage(raw: CheckResponse): CheckResponseMessage {
  const STATUS: Record<string, number> = { BadRequest: 400, Unauthorized: 401, Forbidden: 403, NotFound: 404, MethodNotAllowed: 405, InternalServerError: 500, ServiceUnavailable: 503 };
  const APPEND_ACTIONS = externalAuthRoot().lookupEnum("envoy.config.core.v3.HeaderValueOption.HeaderAppendAction").values;
  const header = (h: { header: { key: string; value: string }; append_action?: string }) => ({
    header: h.header,
    append_action: APPEND_ACTIONS[h.append_action ?? "APPEND_IF_EXISTS_OR_ADD"] as typeof OVERWRITE_IF_EXISTS_OR_ADD,
  });
  return {
    status: { code: raw.status.code, message: raw.status.message ?? "" },
    ...(raw.ok_response === undefined && raw.status.code === 0
      ? { ok_response: { headers: [], headers_to_remove: [] } }
      : raw.ok_response === undefined
        ? {}
        : { ok_response: { headers: (raw.ok_response.headers ?? []).map(header), headers_to_remove: raw.ok_response.headers_to_remove ?? [] } }),
    ...(raw.denied_response === undefined
      ? {}
      : {
          denied_response: {
            status: { code: STATUS[String(raw.denied_response.status.code)] ?? Number(raw.denied_response.status.code) },
            headers: (raw.denied_response.headers ?? []).map(header),
            body: raw.denied_response.body ?? "",
          },
        }),
  };
}
