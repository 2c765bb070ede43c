/**
 * Differential test of the gateway's reading of a Kubernetes request against kube-apiserver's own
 * Go code (the oracle, scripts/deps/requestinfo-oracle: net/http's request reading, url.ParseQuery,
 * filters.WithRequestInfo with kube-apiserver's RequestInfoFactory, filters.WithRequestDeadline and
 * filters.GetAuthorizerAttributes, and the delete handler's DecodeParameters of the query, from
 * k8s.io/apiserver v0.37.2 built with the toolchain that builds the tests' kube-apiserver).
 *
 * Each generated request goes through the whole in-process checker exactly as kube-api-proxy reads
 * it (fromCheckRequest → parseGatewayPath → kubePathOf → requestInfoFor → the SubjectAccessReviews
 * it asks), with a PluginToken and every dependency saying yes, so an allow means "portcullis
 * reviewed this reading and would forward it". The same request goes to the oracle. The property:
 * whenever portcullis allows, kube-apiserver reaches authorization with the same reading (the same
 * query as its handlers read it, req.URL.Query(): url.ParseQuery's values, its error ignored as
 * kube-apiserver ignores it; the same RequestInfo; the same authorization checks in order; an
 * unsafe-delete review wherever the delete handler reads that option from the query). Any other
 * difference, even kube refusing the request itself, is an allowed disagreement: the test fails and
 * prints the case, shrunk.
 * Disagreements portcullis denies (fail closed) are counted by kind and printed.
 *
 * DIFFERENTIAL_CASES (default 200,000) and DIFFERENTIAL_SEED (default: random, printed) choose the run.
 */
import fc from "fast-check";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createChecker } from "../../src/authz/check.ts";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { fromCheckRequest, goQuery, type CheckRequestMessage } from "../../src/envoy/check-request.ts";
import type { CheckResponseMessage } from "../../src/envoy/check-response-message.ts";
import { kubePathOf, parseGatewayPath } from "../../src/kube-reading/gateway-path.ts";
import { requestInfoFor, type RequestInfo } from "../../src/kube-reading/request-info.ts";
import { requesterChecks, UNSAFE_DELETE_OPTION } from "../../src/kube-reading/requester-checks.ts";
import { policiesFor } from "../../src/server/policies.ts";
import { FakeWorld } from "../support/fakes.ts";
import { testConfig } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { startOracle, type Oracle, type OracleAnswer } from "./requestinfo-oracle.ts";
import { prng } from "../support/prng.ts";

const CASES = Number(process.env["DIFFERENTIAL_CASES"] ?? 200_000);
const SEED = Number(process.env["DIFFERENTIAL_SEED"] ?? Math.floor(Math.random() * 2 ** 31));
const BATCH = 2_000;

// ---------------------------------------------------------------- generated requests

/** A query is a list of pieces, each repeated `times` (so 10,000 `&` shrink by halving). */
interface QueryPiece {
  readonly text: string;
  readonly times: number;
}

interface Case {
  readonly method: string;
  /** Raw (still percent-encoded) path segments after the leading "/". */
  readonly segments: readonly string[];
  readonly trailingSlash: boolean;
  /** undefined: no "?" in the request target. */
  readonly query: readonly QueryPiece[] | undefined;
  readonly headers: Readonly<Record<string, string>>;
}

const pathOf = (c: Case) => `/${c.segments.join("/")}${c.trailingSlash ? "/" : ""}`;
const rawQueryOf = (c: Case) => c.query?.map((p) => p.text.repeat(p.times)).join("");
const targetOf = (c: Case) => (c.query === undefined ? pathOf(c) : `${pathOf(c)}?${rawQueryOf(c)}`);


class Gen {
  private readonly random: () => number;
  constructor(random: () => number) {
    this.random = random;
  }
  chance(p: number): boolean {
    return this.random() < p;
  }
  int(min: number, max: number): number {
    return min + Math.floor(this.random() * (max - min + 1));
  }
  pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.random() * list.length)]!;
  }
  /** [weight, value] pairs. */
  weighted<T>(table: ReadonlyArray<readonly [number, T]>): T {
    const total = table.reduce((s, [w]) => s + w, 0);
    let r = this.random() * total;
    for (const [w, v] of table) {
      r -= w;
      if (r < 0) return v;
    }
    return table[table.length - 1]![1];
  }
}

const METHODS: ReadonlyArray<readonly [number, string]> = [
  [55, "GET"], [8, "POST"], [6, "PUT"], [6, "PATCH"], [8, "DELETE"], [4, "HEAD"], [2, "OPTIONS"],
  [2, "get"], [1, "Get"], [1, "delete"], [1, "LIST"], [1, "WATCH"],
];

/** Segments kube treats specially, and the encodings and bytes that have fooled parsers before. */
const ADVERSARIAL_SEGMENTS = [
  "", ".", "..", "%2e", "%2E%2E", "%2F", "a%2Fb", "%2f..%2f", "%zz", "%", "%4", "%00", "%0a", "%7F", "%20", "a b".replace(" ", "%20"),
  "%C3%A9", "é", "%FF", "%C0%AF", "%ED%A0%80", "%EF%BB%BF", "+", "a+b", ";", "a;b", "%3B", "%3F", "%3Fwatch=1", "%23", "#", "#x", "?", "?watch=1",
  "~", "Pods", "PODS", "watch", "proxy", "namespaces", "status", "finalize", "exec", "attach", "portforward", "\u212Aube", "%E2%84%AA",
  "a".repeat(64), "b".repeat(254), "api", "apis", "v1", "*", "%2A", "\u017F",
];
const GROUPS = ["apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "fundament.io", "apiextensions.k8s.io", "v1", "api"];
const VERSIONS = ["v1", "v1", "v1", "v1beta1", "v2"];
const NAMESPACES = ["team-b", "team-a", "default", "kube-system", "fundament-plugins"];
const RESOURCES = ["pods", "pods", "secrets", "configmaps", "deployments", "services", "nodes", "namespaces", "events", "serviceaccounts", "leases"];
const NAMES = ["web-1", "web-2", "db", "nginx", "allowed-secret", "cert-manager", "a.b"];
const SUBRESOURCES = ["status", "exec", "attach", "portforward", "log", "proxy", "scale", "eviction", "binding", "token", "ephemeralcontainers"];
const NON_RESOURCE = [
  "/api", "/apis", "/apis/apps", "/apis/apps/v1", "/version", "/version/", "/openapi/v2", "/openapi/v3", "/openapi/v3/apis/apps/v1",
  "/healthz", "/livez", "/metrics", "/", "/api/v1", "/apis/apps/v1/", "/api/v1/", "/api/v1/watch", "/api/v1/proxy", "/apis/apps/v1/watch",
];

function segment(g: Gen, realistic: readonly string[]): string {
  return g.chance(0.07) ? g.pick(ADVERSARIAL_SEGMENTS) : g.pick(realistic);
}

function resourcePath(g: Gen): string[] {
  const segs: string[] = [];
  if (g.chance(0.6)) segs.push(g.chance(0.97) ? "api" : segment(g, ["api"]), segment(g, VERSIONS));
  else segs.push("apis", segment(g, GROUPS), segment(g, VERSIONS));
  const special = g.weighted<string | undefined>([[83, undefined], [12, "watch"], [5, "proxy"]]);
  if (special !== undefined) segs.push(special);
  const nsShape = g.weighted([[55, "namespaced"], [33, "cluster"], [12, "namespace-itself"]] as const);
  if (nsShape === "namespace-itself") {
    segs.push("namespaces");
    if (g.chance(0.8)) segs.push(segment(g, NAMESPACES));
    if (g.chance(0.5)) segs.push(segment(g, ["status", "finalize", "pods", "secrets", "status"]));
  } else {
    if (nsShape === "namespaced") segs.push("namespaces", segment(g, NAMESPACES));
    segs.push(segment(g, RESOURCES));
    if (g.chance(0.5)) {
      segs.push(segment(g, NAMES));
      if (g.chance(0.45)) segs.push(segment(g, SUBRESOURCES));
      // proxy tails and anything past the subresource
      while (g.chance(0.15)) segs.push(segment(g, ["x", "metrics", "api", "v1", "healthz", "a.js"]));
    }
  }
  return segs;
}

const QUERY_KEYS: ReadonlyArray<readonly [number, string]> = [
  [30, "watch"], [25, "fieldSelector"], [15, "labelSelector"], [4, "timeout"], [3, "resourceVersion"], [3, "limit"], [2, "continue"],
  [2, "allowWatchBookmarks"], [2, "sendInitialEvents"], [2, "timeoutSeconds"], [2, "dryRun"], [2, "command"], [2, "container"],
  [1, "propagationPolicy"], [1, "follow"], [1, "pretty"], [1, "ports"], [2, ""], [1, "Watch"], [1, "WATCH"], [1, "w%61tch"],
  [1, "watch%00"], [1, "watch+"], [1, "%77atch"], [1, "fieldselector"], [1, "fieldSelector%3D"], [1, "field%53elector"],
  [1, "label%53elector"], [1, "resourceVersionMatch"], [2, UNSAFE_DELETE_OPTION], [1, "ignoreStoreReadErrorWith%43lusterBreakingPotential"],
];

const VALUES: Readonly<Record<string, readonly string[]>> = {
  watch: ["1", "true", "0", "false", "True", "TRUE", "fAlSe", "yes", "", "2", "t", "%31", "tru%65", "1;", "1%3B", "%00", "falſe", "fal%C5%BFe",
    "-1", "+1", "1+", "%201", "1%23", "1#", "%FF", "false%00"],
  fieldSelector: ["metadata.name=web-1", "metadata.name%3Dweb-1", "metadata.name==web-1", "metadata.name%3D%3Dweb-1", "metadata.name!=web-1",
    "metadata.name!%3Dweb-1", "metadata.namespace=team-b", "metadata.name=web-1,metadata.name=web-2", "metadata.name%3Dweb-1%2Cstatus.phase%3DRunning",
    "status.phase%3DRunning%2Cmetadata.name%3Dweb-1", "metadata.name=", "metadata.name", "=web-1", "metadata.name=web\\,1", "metadata.name%3Dweb%5C%2C1",
    "metadata.name=a/b", "metadata.name%3Da%2Fb", "metadata.name=..", "metadata.name=.", "metadata.name%3Da%25b", "metadata.name%3D%FF",
    "metadata.name=web+1", "metadata.name%3D%3D%3D", "metadata.name=web-1;", "metadata.name%3D\u212Aeb", "metadata.name%3Dweb-1%23",
    "metadata.name%3D" + "a".repeat(253), "metadata.name%3D" + "a".repeat(254), "metadata.name+%3D+web-1", "%20metadata.name%3Dweb-1"],
  labelSelector: ["app=web", "app%3Dweb", "app in (a,b)", "app+in+(a,b)", "app%20in%20(a%2Cb)", "!app", "%21app", "app", "app!=x", "a>1", "a<x",
    "a%3E1", "app=", "=x", "app=web,", "a==b==c", "(", ",", "app notin ()", "x/y=z", "-a=b", "a".repeat(64) + "=b", "app%3D%3D", "app=we%FF",
    "a=b,c=d", "a in (b,,c)", "a>9223372036854775808"],
  timeout: ["30s", "1m", "", "x", "-1s", "1", "10ms", "1h2m", "%31s", "0", "00", ".5s", ".s", "1%C2%B5s", "1%CE%BCs", "2562048h", "1S", "1s+", "+-1s",
    "9223372036854775808ns", "-9223372036854775808ns"],
  limit: ["1", "500", "-1", "x", ""],
  timeoutSeconds: ["1", "-1", "x", ""],
  resourceVersion: ["0", "", "123"],
  [UNSAFE_DELETE_OPTION]: ["true", "1", "", "false", "0", "FALSE", "fal%73e", "falſe", "no", "%zz", "1;", "%31", "+"],
};
const GENERIC_VALUES = ["1", "x", "", "%zz", "%", "a;b", "%FF", "%C3%A9", "+", "%2B", "#", "true", "All", "%"];

function queryPair(g: Gen): string {
  const key = g.weighted(QUERY_KEYS);
  const values = VALUES[key] ?? GENERIC_VALUES;
  const value = g.chance(0.05) ? g.pick(GENERIC_VALUES) : g.pick(values);
  // A space never reaches a server raw (it would end the request line): `+` or `%20`.
  const pair = (g.chance(0.06) ? key : `${key}=${value}`).replaceAll(" ", g.chance(0.5) ? "+" : "%20");
  // A sprinkle of what breaks a pair for Go (and so must break it here too).
  if (g.chance(0.03)) {
    const junk = g.pick(["%zz", "%", "%F", ";", "#", "%FF", "é", "%C3", "==", "&", "%26", "%3D"]);
    const at = g.int(0, pair.length);
    return pair.slice(0, at) + junk + pair.slice(at);
  }
  return pair;
}

/**
 * Whole pairs url.ParseQuery drops (`;`, malformed %-escapes) or reads in ways easily missed (`=`,
 * `==`, no value, `+`, escaped `&` `=` `;`, non-ASCII raw and escaped, NUL, bytes not UTF-8).
 */
const ODD_PAIRS = [
  "%zz=1", "%", "%2", "%2=1", "a=%", "a=%2", "a=%g1", ";", "a;b=1", "=", "==", "=%zz", "watch", "fieldSelector", "a+b=c+d", "%26=%3D",
  "a%3Db=1", "a=%3B", "é=ü", "%E2%84%AA=1", "\u212A=1", "%F0%9F%98%80=1", "%00=%00", "%FF=1", "a=%C3", "%25zz=%25",
];
/** What spoils a pair for Go (it drops the pair and reads the rest). */
const SPOILERS = [";", "%zz", "%", "%2", "%g1"];

/**
 * A pair Go drops, then the same key with another value: kube-apiserver's first value is the
 * second pair's. A reader that kept the spoiled pair, or dropped both, would read another request.
 */
function shadowedPair(g: Gen): string {
  const key = g.weighted(QUERY_KEYS);
  const values = VALUES[key] ?? GENERIC_VALUES;
  const spoiled = `${key}=${g.pick(values)}`;
  const at = g.int(0, spoiled.length);
  const space = g.chance(0.5) ? "+" : "%20";
  return `${spoiled.slice(0, at)}${g.pick(SPOILERS)}${spoiled.slice(at)}&${key}=${g.pick(values)}`.replaceAll(" ", space);
}

function query(g: Gen): QueryPiece[] {
  const pieces: QueryPiece[] = [];
  const one = (text: string, times = 1) => pieces.push({ text, times });
  if (g.chance(0.004)) {
    // Around and beyond net/url's 10,000-parameter limit, and very long values.
    const n = g.pick([9_998, 9_999, 10_000, 10_001, 10_002, 15_000]);
    const shape = g.pick(["selector+&", "watch+&", "&+selector", "pairs", "semicolons", "long"]);
    if (shape === "selector+&") one("fieldSelector=metadata.name%3Dweb-1"), one("&", n);
    else if (shape === "watch+&") one("watch=1"), one("&", n);
    else if (shape === "&+selector") one("&", n), one("fieldSelector=metadata.name%3Dweb-1");
    else if (shape === "pairs") one("fieldSelector=metadata.name%3Dweb-1"), one("&a=1", n), one("&watch=1");
    else if (shape === "semicolons") one("watch=1"), one(";", n);
    else one("labelSelector=app%20in%20(" + "a,".repeat(g.int(1, 40_000)) + "b)");
    return pieces;
  }
  if (g.chance(0.05)) return pieces; // "?" and nothing after it
  if (g.chance(0.03)) one(g.pick(["&", ";", "&&"]));
  const count = g.weighted([[20, 1], [30, 2], [20, 3], [10, 4], [5, 6], [3, 12]] as const);
  for (let i = 0; i < count; i++) {
    if (i > 0) one(g.weighted([[90, "&"], [5, ";"], [3, "&&"], [2, "&;"]] as const));
    one(g.chance(0.06) ? shadowedPair(g) : queryPair(g));
    if (g.chance(0.08)) one("&"), one(g.pick(ODD_PAIRS));
  }
  if (g.chance(0.05)) one(g.pick(["&", ";", "#", "&#"]));
  return pieces;
}

const WEBSOCKET = { upgrade: "websocket", connection: "Upgrade", "sec-websocket-protocol": "v5.channel.k8s.io" };

function generate(g: Gen): Case {
  const shape = g.weighted([[85, "resource"], [10, "non-resource"], [5, "random"]] as const);
  let segments: string[];
  if (shape === "resource") segments = resourcePath(g);
  else if (shape === "non-resource") segments = g.pick(NON_RESOURCE).split("/").slice(1);
  else segments = Array.from({ length: g.int(1, 7) }, () => segment(g, ["api", "apis", "v1", "namespaces", "pods", "watch", "x", ""]));
  const method = g.weighted(METHODS);
  const upgrade = method === "GET" && segments.some((s) => s === "exec" || s === "attach" || s === "portforward") && g.chance(0.6);
  return {
    method,
    segments,
    trailingSlash: g.chance(0.08),
    query: g.chance(0.7) ? query(g) : undefined,
    headers: upgrade ? WEBSOCKET : {},
  };
}

// ---------------------------------------------------------------- the two readings

const world = new FakeWorld();
const check = createChecker({ policies: policiesFor(testConfig(), world), audit: world.audit, timeoutMs: 30_000, retryAfterSeconds: 1, logger: pino({ level: "silent" }) });
let token = "";
let tokenMintedAt = 0;

/** A fresh PluginToken every minute: a long run must never outlive its token's exp. */
async function currentToken(): Promise<string> {
  if (Date.now() - tokenMintedAt > 60_000) {
    token = await pluginToken();
    tokenMintedAt = Date.now();
  }
  return token;
}

/**
 * Every generated request carries a valid PluginToken and every dependency says yes, so a denial
 * can only be about how the request reads; any other reason means the harness broke.
 */
const READING_DENIALS: ReadonlySet<string> = new Set(["bad-request", "not-found"]);

interface PortcullisReading {
  readonly allowed: boolean;
  /** The denial reason, or "allow". */
  readonly reason: string;
  readonly detail: string;
  readonly sars: readonly AccessAttributes[];
  /** What requestInfoFor read, for a request portcullis allowed. */
  readonly info: RequestInfo | undefined;
  /** The reviews of what kube-apiserver authorizes inside its handlers (requester-checks.ts), asked too. */
  readonly inHandlers: readonly AccessAttributes[];
  readonly query: URLSearchParams;
}

async function portcullis(c: Case): Promise<PortcullisReading> {
  const message: CheckRequestMessage = {
    attributes: {
      request: { http: { method: c.method, path: `/clusters/${ids.cluster}${targetOf(c)}`, headers: { ...c.headers, authorization: `Bearer ${await currentToken()}` } } },
      context_extensions: { policy: "kube-api-proxy" },
    },
  };
  // The fakes record every call; millions of cases must not keep them.
  world.sarRequests = [];
  world.calls = [];
  world.audits = [];
  const response = (await check(message)) as CheckResponseMessage;
  const allowed = response.status.code === 0;
  const request = fromCheckRequest(message);
  const target = parseGatewayPath(request.path);
  const path = allowed && target.kind === "ok" ? kubePathOf(target.rest) : undefined;
  const info = path?.kind === "ok" ? requestInfoFor({ method: request.method, path: path.path, query: request.query }) : undefined;
  // What kube authorizes inside its handlers is not the filter's reading the oracle reports:
  // portcullis asks it beforehand as well (src/kube-reading/requester-checks.ts, its own table test).
  const handlerChecks = info === undefined ? [] : requesterChecks(info, request.query, request.headers["content-type"]);
  const inHandlers = new Set(handlerChecks.map((a) => JSON.stringify(a)));
  const sars = world.sarRequests.filter((a) => !inHandlers.has(JSON.stringify(a)));
  const askedInHandlers = world.sarRequests.filter((a) => inHandlers.has(JSON.stringify(a)));
  const detail = response.denied_response === undefined ? "" : String((JSON.parse(response.denied_response.body) as { message?: string }).message ?? "");
  return { allowed, reason: allowed ? "allow" : response.status.message, detail, sars, info, inHandlers: askedInHandlers, query: request.query };
}

/** The differences between the two readings of a request portcullis allowed; empty when they agree. */
function differences(p: PortcullisReading, o: OracleAnswer): string[] {
  const diffs: string[] = [];
  if (o.invalidUtf8) diffs.push("kube reads bytes that are not UTF-8");
  const oValues = o.query.values;
  const pKeys = [...new Set(p.query.keys())].sort();
  const oKeys = Object.keys(oValues).sort();
  const pQuery = JSON.stringify(pKeys.map((k) => [k, p.query.getAll(k)]));
  const oQuery = JSON.stringify(oKeys.map((k) => [k, oValues[k]]));
  // kube-apiserver's handlers read req.URL.Query(): the values, url.ParseQuery's error ignored.
  if (pQuery !== oQuery) diffs.push(`query: portcullis ${pQuery}, kube ${oQuery}`);
  const oi = o.requestInfo;
  const pi = p.info;
  if (oi === null || pi === undefined) {
    diffs.push("requestInfo missing on one side");
  } else {
    const pFields = pi.isResourceRequest
      ? { isResourceRequest: true, verb: pi.verb, apiPrefix: pi.apiPrefix, apiGroup: pi.apiGroup, apiVersion: pi.apiVersion, namespace: pi.namespace, resource: pi.resource, subresource: pi.subresource, name: pi.name, parts: pi.parts }
      : { isResourceRequest: false, verb: pi.verb, path: pi.path };
    const oFields = oi.isResourceRequest
      ? { isResourceRequest: true, verb: oi.verb, apiPrefix: oi.apiPrefix, apiGroup: oi.apiGroup, apiVersion: oi.apiVersion, namespace: oi.namespace, resource: oi.resource, subresource: oi.subresource, name: oi.name, parts: oi.parts ?? [] }
      : { isResourceRequest: false, verb: oi.verb, path: oi.path };
    for (const key of new Set([...Object.keys(pFields), ...Object.keys(oFields)])) {
      const a = JSON.stringify((pFields as Record<string, unknown>)[key]);
      const b = JSON.stringify((oFields as Record<string, unknown>)[key]);
      if (a !== b) diffs.push(`requestInfo.${key}: portcullis ${a}, kube ${b}`);
    }
  }
  const pSars = p.sars.map((a) =>
    a.kind === "resource"
      ? { resourceRequest: true, verb: a.verb, apiGroup: a.group, apiVersion: a.version, resource: a.resource, subresource: a.subresource, namespace: a.namespace, name: a.name }
      : { resourceRequest: false, verb: a.verb, path: a.path },
  );
  const oSars = (o.attributes ?? []).map((a) =>
    a.resourceRequest
      ? { resourceRequest: true, verb: a.verb, apiGroup: a.apiGroup, apiVersion: a.apiVersion, resource: a.resource, subresource: a.subresource, namespace: a.namespace, name: a.name }
      : { resourceRequest: false, verb: a.verb, path: a.path },
  );
  if (JSON.stringify(pSars) !== JSON.stringify(oSars)) diffs.push(`authorization checks: portcullis ${JSON.stringify(pSars)}, kube ${JSON.stringify(oSars)}`);
  // The delete handler authorizes the unsafe delete it read from the query: the user must have been asked it too.
  const unsafe = (o.attributes ?? [])[0];
  if (o.deleteOptions?.unsafeDelete === true && unsafe !== undefined) {
    const asked = p.inHandlers.some(
      (a) => a.kind === "resource" && a.verb === "unsafe-delete-ignore-read-errors" && a.group === unsafe.apiGroup && a.resource === unsafe.resource &&
        a.subresource === unsafe.subresource && a.namespace === unsafe.namespace && a.name === unsafe.name,
    );
    if (!asked) diffs.push(`the delete handler authorizes unsafe-delete-ignore-read-errors (query ${oQuery}); portcullis did not ask it`);
  }
  return diffs;
}

type Verdict = { kind: "agree" } | { kind: "denied-disagreement"; label: string } | { kind: "allowed-disagreement"; diffs: string[] };

function verdict(p: PortcullisReading, o: OracleAnswer): Verdict {
  if (p.allowed) {
    // Harmless in itself (kube answers 400/500 and runs nothing), but still a reading that differs.
    if (o.rejected !== "") return { kind: "allowed-disagreement", diffs: [`kube-apiserver refuses it before authorization (${o.rejected}): ${o.rejectedDetail}`] };
    const diffs = differences(p, o);
    return diffs.length === 0 ? { kind: "agree" } : { kind: "allowed-disagreement", diffs };
  }
  if (o.rejected !== "") return { kind: "agree" };
  return { kind: "denied-disagreement", label: denialLabel(p) };
}

/** Denials grouped by what portcullis refused, with the cause of a bad-request. */
function denialLabel(p: PortcullisReading): string {
  if (p.reason !== "bad-request") return p.reason;
  const causes: Array<[RegExp, string]> = [
    [/query parameters/, "query past net/url's 10,000 parameters"],
    [/a ; in the query/, "query pair with ;"],
    [/%-escape in the query/, "query pair with a bad %-escape"],
    [/not UTF-8/, "query not UTF-8 once unescaped"],
    [/# in the request target/, "# in the target"],
    [/invalid percent-encoding/, "path not UTF-8 or bad %-escape"],
    [/dot segment/, "dot segment in path"],
    [/empty segment/, "empty segment in path"],
    [/control character/, "control character in path"],
    [/longer than|too long|exceeds/, "name longer than Kubernetes allows"],
  ];
  const cause = causes.find(([re]) => re.test(p.detail));
  return `bad-request: ${cause?.[1] ?? p.detail}`;
}

/**
 * How goQuery's reading of `raw` differs from kube-apiserver's (undefined: it does not). Read in
 * full, it must hold exactly Go's values; refused, Go must read what portcullis cannot hold or
 * what another Go reads otherwise (bytes not UTF-8, past the parameter limit).
 */
function goQueryDisagreement(raw: string, o: OracleAnswer): string | undefined {
  if (o.rejected === "http") return `net/http refuses it: ${o.rejectedDetail}`;
  const read = goQuery(raw);
  const kube = Object.fromEntries(Object.keys(o.query.values).sort().map((k) => [k, o.query.values[k]]));
  if (read.error !== undefined) {
    const unreadable = o.invalidUtf8 || o.query.error === "number of URL query parameters exceeded limit";
    return unreadable ? undefined : `portcullis refuses it (${read.error}), kube reads ${JSON.stringify(kube)}`;
  }
  if (o.invalidUtf8) return "kube reads bytes that are not UTF-8";
  const mine = Object.fromEntries([...new Set(read.query.keys())].sort().map((k) => [k, read.query.getAll(k)]));
  return JSON.stringify(mine) === JSON.stringify(kube) ? undefined : `portcullis ${JSON.stringify(mine)}, kube ${JSON.stringify(kube)}`;
}

// ---------------------------------------------------------------- shrinking

function smaller(c: Case): Case[] {
  const out: Case[] = [];
  if (c.method !== "GET") out.push({ ...c, method: "GET" });
  if (Object.keys(c.headers).length > 0) out.push({ ...c, headers: {} });
  if (c.trailingSlash) out.push({ ...c, trailingSlash: false });
  if (c.query !== undefined) {
    if (c.query.length === 0) out.push({ ...c, query: undefined });
    c.query.forEach((piece, i) => {
      out.push({ ...c, query: c.query!.filter((_, j) => j !== i) });
      if (piece.times > 1) out.push({ ...c, query: c.query!.map((p, j) => (j === i ? { ...p, times: Math.floor(p.times / 2) } : p)) });
      if (piece.times > 1) out.push({ ...c, query: c.query!.map((p, j) => (j === i ? { ...p, times: p.times - 1 } : p)) });
      if (piece.text.length > 1) out.push({ ...c, query: c.query!.map((p, j) => (j === i ? { ...p, text: p.text.slice(0, Math.ceil(p.text.length / 2)) } : p)) });
    });
  }
  c.segments.forEach((_, i) => out.push({ ...c, segments: c.segments.filter((__, j) => j !== i) }));
  return out;
}

async function shrink(oracle: Oracle, failing: Case): Promise<Case> {
  let current = failing;
  for (let progress = true; progress; ) {
    progress = false;
    for (const candidate of smaller(current)) {
      const [answer] = await oracle.ask([{ method: candidate.method, path: pathOf(candidate), rawQuery: rawQueryOf(candidate), headers: candidate.headers }]);
      if (verdict(await portcullis(candidate), answer!).kind === "allowed-disagreement") {
        current = candidate;
        progress = true;
        break;
      }
    }
  }
  return current;
}

// ---------------------------------------------------------------- the run

const counts = new Map<string, number>();
/** The first request of each kind, printed beside its count. */
const examples = new Map<string, string>();
const count = (label: string, example?: Case) => {
  counts.set(label, (counts.get(label) ?? 0) + 1);
  if (example !== undefined && !examples.has(label)) {
    const target = targetOf(example);
    examples.set(label, `${example.method} ${target.length > 90 ? `${target.slice(0, 90)}… (${target.length} chars)` : target}`);
  }
};

describe("kube-api-proxy reads a request as kube-apiserver's own code does (differential, Go oracle)", () => {
  let oracle: Oracle;
  beforeAll(async () => {
    oracle = startOracle();
  });
  afterAll(async () => {
    // undefined when the oracle binary is missing and beforeAll failed
    await (oracle as Oracle | undefined)?.stop();
  });

  it("the oracle is kube-apiserver's reading: known answers", async () => {
    const [list, tooMany, watchTooMany, exec, watchRoot] = await oracle.ask([
      { method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery: "fieldSelector=metadata.name%3Dweb-1" },
      { method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery: `fieldSelector=metadata.name%3Dweb-1${"&".repeat(10_000)}` },
      { method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery: `watch=1${"&".repeat(10_000)}` },
      { method: "GET", path: "/api/v1/namespaces/team-b/pods/web-1/exec", rawQuery: "command=ls", headers: WEBSOCKET },
      { method: "GET", path: "/api/v1/watch" },
    ]);
    expect(list!.attributes).toEqual([expect.objectContaining({ verb: "list", resource: "pods", namespace: "team-b", name: "web-1" })]);
    // net/url drops the whole query past 10,000 parameters: kube lists every pod.
    expect(tooMany!.query).toEqual({ values: {}, error: "number of URL query parameters exceeded limit" });
    expect(tooMany!.attributes).toEqual([expect.objectContaining({ verb: "list", resource: "pods", name: "" })]);
    expect(watchTooMany!.attributes).toEqual([expect.objectContaining({ verb: "list" })]);
    expect(exec!.attributes?.map((a) => a.verb)).toEqual(["get", "create"]);
    expect(watchRoot!.rejected).toBe("request-info");
  });

  it("the oracle reads what kube-apiserver's handlers read: pairs url.ParseQuery drops, and the unsafe delete", async () => {
    const [issue, shadowed, unsafeDelete, unsafeDropped] = await oracle.ask([
      // Issue 42 §6: Go drops the unreadable pair (with an error kube-apiserver ignores) and reads the rest.
      { method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery: "fieldSelector=metadata.name%3Dweb-1&%zz=1" },
      { method: "GET", path: "/api/v1/namespaces/team-b/pods", rawQuery: "fieldSelector=metadata.name%3Ddb-0;&fieldSelector=metadata.name%3Dweb-1&watch=1%zz" },
      { method: "DELETE", path: "/api/v1/namespaces/team-b/pods/web-1", rawQuery: `${UNSAFE_DELETE_OPTION}=true` },
      { method: "DELETE", path: "/api/v1/namespaces/team-b/pods/web-1", rawQuery: `${UNSAFE_DELETE_OPTION}=true;` },
    ]);
    expect(issue!.query).toEqual({ values: { fieldSelector: ["metadata.name=web-1"] }, error: 'invalid URL escape "%zz"' });
    expect(issue!.attributes).toEqual([expect.objectContaining({ verb: "list", resource: "pods", namespace: "team-b", name: "web-1" })]);
    expect(shadowed!.query.values).toEqual({ fieldSelector: ["metadata.name=web-1"] });
    expect(shadowed!.attributes).toEqual([expect.objectContaining({ verb: "list", name: "web-1" })]);
    expect(unsafeDelete!.deleteOptions).toEqual({ unsafeDelete: true, error: "" });
    expect(unsafeDropped!.deleteOptions).toEqual({ unsafeDelete: false, error: "" });
  });

  it("goQuery reads adversarial queries as url.ParseQuery does, and refuses only what it cannot read so (table, Go oracle)", async () => {
    const rows = [
      "fieldSelector=metadata.name%3Dweb-1&%zz=1", "%zz", "%", "%2", "a=%2", "%2=1", "a=%g1", ";", "watch=1;", ";watch=1", "a;b=1&watch=1", "watch=1;watch=0",
      "&&", "&&watch=1&&", "=", "==", "===", "=x", "x=", "watch", "watch&watch=0", "watch=1&watch=0", "watch=0&watch=1", "watch=1%zz&watch=0",
      "fieldSelector=metadata.name%3Ddb-0;&fieldSelector=metadata.name%3Dweb-1", "+", "a+b=c+d", "watch+=1", "%2B=%2B", "a=%26%3D%3B", "a%26b=1",
      "a%3Db=c", "%25zz=%25", "é=ü", "%C3%A9=%C3%BC", "\u212Aey=1", "%E2%84%AA=1", "%F0%9F%98%80=%F0%9F%98%80", "a=%00", "a=%EF%BB%BF",
      "a=%FF", "%FF=1", "a=%C3", "a=%C0%AF", "a=%ED%A0%80", "%FF=%zz", "fieldSelector=metadata.name%3D%FF&watch=1",
      `labelSelector=${"a".repeat(80_000)}`, `watch=1${"&".repeat(9_999)}`, `watch=1${"&".repeat(10_000)}`, `${"&a=1".repeat(10_000)}`,
    ];
    const answers = await oracle.ask(rows.map((rawQuery) => ({ method: "GET", path: "/api/v1/pods", rawQuery })));
    const wrong = rows.flatMap((raw, i) => {
      const why = goQueryDisagreement(raw, answers[i]!);
      return why === undefined ? [] : [`${raw.slice(0, 80)}: ${why}`];
    });
    expect(wrong).toEqual([]);
  });

  it("goQuery reads generated queries as url.ParseQuery does (fast-check, Go oracle)", async () => {
    const token = fc.constantFrom(
      "&", "&", "&", ";", "=", "=", "+", "%", "%2", "%zz", "%g1", "%26", "%3D", "%3B", "%25", "%2B", "%20", "%41", "%61", "%FF", "%C3%A9", "%C3",
      "%E2%84%AA", "%ED%A0%80", "%00", "watch", "fieldSelector", "labelSelector", "metadata.name", "timeout", UNSAFE_DELETE_OPTION, "1", "0",
      "true", "a", "é", "\u212A", "\u{1F600}", "web-1", "%7", "%0g",
    );
    await fc.assert(
      fc.asyncProperty(fc.array(token, { maxLength: 24 }).map((t) => t.join("")), async (raw) => {
        const [answer] = await oracle.ask([{ method: "GET", path: "/api/v1/pods", rawQuery: raw }]);
        expect(goQueryDisagreement(raw, answer!)).toBeUndefined();
      }),
      { numRuns: 5_000 },
    );
  });

  it("the comparison catches the issue's request read the old way (URLSearchParams, no parameter limit)", async () => {
    const rawQuery = `fieldSelector=metadata.name%3Dweb-1${"&".repeat(10_000)}`;
    const path = "/api/v1/namespaces/team-b/pods";
    const [answer] = await oracle.ask([{ method: "GET", path, rawQuery }]);
    const query = new URLSearchParams(rawQuery);
    const info = requestInfoFor({ method: "GET", path, query });
    const sars: AccessAttributes[] = [{ kind: "resource", verb: "list", group: "", version: "v1", resource: "pods", subresource: "", namespace: "team-b", name: "web-1" }];
    const old: PortcullisReading = { allowed: true, reason: "allow", detail: "", sars, info, inHandlers: [], query };
    const v = verdict(old, answer!);
    expect(v.kind).toBe("allowed-disagreement");
    expect(v.kind === "allowed-disagreement" && v.diffs.join("\n")).toMatch(/requestInfo\.name: portcullis "web-1", kube ""/);
  });

  it(`${CASES.toLocaleString("en")} generated requests: every disagreement is one portcullis denies`, { timeout: Math.max(600_000, CASES) }, async () => {
    const g = new Gen(prng(SEED));
    const started = Date.now();
    let allowedDisagreement: { case: Case; diffs: string[] } | undefined;
    for (let done = 0; done < CASES && allowedDisagreement === undefined; done += BATCH) {
      const cases = Array.from({ length: Math.min(BATCH, CASES - done) }, () => generate(g));
      const answers = oracle.ask(cases.map((c) => ({ method: c.method, path: pathOf(c), rawQuery: rawQueryOf(c), headers: c.headers })));
      const readings: PortcullisReading[] = [];
      for (const c of cases) readings.push(await portcullis(c));
      const oracleAnswers = await answers;
      if (CASES >= 1_000_000 && (done + BATCH) % 500_000 === 0) {
        process.stderr.write(`differential: ${(done + BATCH).toLocaleString("en")} cases, ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
      }
      for (let i = 0; i < cases.length; i++) {
        if (!readings[i]!.allowed && !READING_DENIALS.has(readings[i]!.reason)) {
          expect.fail(`harness broken: ${cases[i]!.method} ${targetOf(cases[i]!).slice(0, 200)} denied ${readings[i]!.reason}: ${readings[i]!.detail}`);
        }
        const v = verdict(readings[i]!, oracleAnswers[i]!);
        count(readings[i]!.allowed ? "portcullis allows" : "portcullis denies");
        if (v.kind === "agree") continue;
        if (v.kind === "allowed-disagreement") {
          allowedDisagreement = { case: cases[i]!, diffs: v.diffs };
          break;
        }
        count(`denied disagreement: ${v.label}`, cases[i]);
      }
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (allowedDisagreement !== undefined) {
      const minimal = await shrink(oracle, allowedDisagreement.case);
      const [answer] = await oracle.ask([{ method: minimal.method, path: pathOf(minimal), rawQuery: rawQueryOf(minimal), headers: minimal.headers }]);
      const diffs = differences(await portcullis(minimal), answer!);
      const shown = targetOf(minimal);
      expect.fail(
        `allowed disagreement (seed ${SEED}); minimal case: ${minimal.method} ${shown.length > 400 ? `${shown.slice(0, 400)}… (${shown.length} chars)` : shown}` +
          ` headers ${JSON.stringify(minimal.headers)}\n  ${diffs.join("\n  ")}`,
      );
    }
    const lines = [...counts].sort((a, b) => b[1] - a[1]).map(([k, v]) => `  ${v.toLocaleString("en").padStart(11)}  ${k}${examples.has(k) ? `\n${" ".repeat(15)}e.g. ${examples.get(k)}` : ""}`);
    console.log(
      `differential (seed ${SEED}): ${CASES.toLocaleString("en")} cases in ${seconds} s, 0 allowed disagreements\n${lines.join("\n")}`,
    );
    expect(counts.get("portcullis allows") ?? 0).toBeGreaterThan(CASES / 10);
  });
});
