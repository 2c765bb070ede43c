/**
 * No credential ever leaves portcullis except as the header it injects on allow. A representative
 * run (every allow, every denial the Fundament policies give, every dependency failure) over the
 * REAL ports with logs at `trace`; then no log line, denial body, denial header, metric or audit
 * line may hold a token, a secret, a JWT signature, an injected ServiceAccount token, portcullis's
 * own kubeconfig token or its OpenFGA API token.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REASONS } from "../../src/authz/reasons.ts";
import type { RequestSpec } from "../support/envoy.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FakeRevocationApi } from "../support/wire-fakes/revocations.ts";
import { indexAnswers, startWired, until, type Wired } from "../support/wire-fakes/wired.ts";
import { ids, OLD_SECRET, pluginToken, SECRET, userToken } from "../support/tokens.ts";
import { signatureOf } from "../support/jwt-craft.ts";

const FGA_TOKEN = `fga-api-token-${randomUUID()}`;
process.env["PORTCULLIS_TEST_FGA_TOKEN"] = FGA_TOKEN;

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;
const RUNTIME = `/installations/${ids.installation}/runtime/`;

let w: Wired;
/** The management cluster's deny-list, revoking one user for the `revoked` step. */
let revocationSource: FakeRevocationApi;
let dir: string;
const REVOKED_USER = randomUUID();
/** Every token a request carried. */
const tokens: string[] = [];
/** Every denial body and header value, and which reasons were seen. */
const denials: string[] = [];
const reasonsSeen = new Set<string>();
let allows = 0;

async function t(token: Promise<string>): Promise<string> {
  const value = await token;
  tokens.push(value);
  return value;
}

interface Step {
  name: string;
  /** Turns a dependency bad for this request only. */
  fault?: (w: Wired) => void | Promise<void>;
  request: () => Promise<RequestSpec>;
  expect: string;
}

const kube = (headers: Record<string, string>, path = PODS, method = "GET"): RequestSpec => ({ path, headers, method, policy: "kube-api-proxy" });

const steps: Step[] = [
  { name: "PluginToken allowed", expect: "allow", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }) },
  { name: "UserToken allowed", expect: "allow", request: async () => kube({ authorization: `Bearer ${await t(userToken())}` }) },
  { name: "UserToken cookie allowed", expect: "allow", request: async () => kube({ cookie: `fundament_auth=${await t(userToken())}`, "sec-fetch-site": "same-origin" }) },
  { name: "token signed with the old secret allowed", expect: "allow", request: async () => kube({ authorization: `Bearer ${await t(userToken({}, { secret: OLD_SECRET }))}` }) },
  {
    name: "plugin-proxy allowed",
    expect: "allow",
    request: async () => ({ path: RUNTIME, headers: { authorization: `Bearer ${await t(pluginToken())}` }, policy: "plugin-proxy" }),
  },
  { name: "plugin-assets allowed", expect: "allow", request: async () => ({ path: "/plugins/cert-manager/1.4.0/console/a.js", headers: { authorization: `Bearer ${await t(pluginToken())}` }, policy: "plugin-assets" }) },
  { name: "missing-token", expect: "missing-token", request: async () => kube({}) },
  { name: "invalid-token (wrong secret)", expect: "invalid-token", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({}, { secret: `${SECRET}-but-not-quite` }))}` }) },
  { name: "invalid-token (expired)", expect: "invalid-token", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({}, { exp: Math.floor(Date.now() / 1000) - 600 }))}` }) },
  { name: "invalid-token (two values)", expect: "invalid-token", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}, Bearer ${await t(userToken())}` }) },
  { name: "invalid-token (malformed claim)", expect: "invalid-token", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({ installation_name: "a\r\nb" }))}` }) },
  { name: "wrong-audience", expect: "wrong-audience", request: async () => ({ path: RUNTIME, headers: { authorization: `Bearer ${await t(userToken())}` }, policy: "plugin-proxy" }) },
  { name: "cluster-mismatch", expect: "cluster-mismatch", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }, `/clusters/${ids.otherCluster}/api/v1/pods`) },
  {
    name: "installation-mismatch",
    expect: "installation-mismatch",
    request: async () => ({ path: `/installations/${ids.otherInstallation}/runtime/`, headers: { authorization: `Bearer ${await t(pluginToken())}` }, policy: "plugin-proxy" }),
  },
  { name: "can-view-denied", expect: "can-view-denied", fault: (x) => void (x.openfga.allowed = () => false), request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }) },
  { name: "user-sar-denied", expect: "user-sar-denied", fault: (x) => void (x.kube.sarAllowed = () => false), request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }) },
  { name: "installation-unavailable", expect: "installation-unavailable", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({ installation_id: randomUUID() }))}` }) },
  { name: "user-unavailable", expect: "user-unavailable", request: async () => kube({ authorization: `Bearer ${await t(userToken({ sub: randomUUID() }))}` }) },
  { name: "revoked", expect: "revoked", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({ sub: REVOKED_USER }))}` }) },
  { name: "impersonation-forbidden", expect: "impersonation-forbidden", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}`, "impersonate-user": "admin" }) },
  { name: "unknown-cluster", expect: "unknown-cluster", request: async () => kube({ authorization: `Bearer ${await t(pluginToken({ cluster_id: ids.otherCluster }))}` }, `/clusters/${ids.otherCluster}/api/v1/pods`) },
  { name: "not-found", expect: "not-found", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }, `/clusters/${ids.cluster}/healthz`) },
  { name: "bad-request", expect: "bad-request", request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }, `/clusters/${ids.cluster}/api/v1/%2e%2e/secrets`) },
  { name: "method-not-allowed", expect: "method-not-allowed", request: async () => ({ path: "/plugins/cert-manager/1.4.0/console/a.js", method: "POST", headers: { authorization: `Bearer ${await t(pluginToken())}` }, policy: "plugin-assets" }) },
  { name: "no-policy", expect: "no-policy", request: async () => ({ path: PODS, headers: { authorization: `Bearer ${await t(pluginToken())}` }, policy: undefined }) },
  { name: "OpenFGA failing", expect: "dependency-unavailable", fault: (x) => void (x.openfga.fault = "status-500"), request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }) },
  { name: "OpenFGA slow", expect: "dependency-unavailable", fault: (x) => void (x.openfga.fault = "slow"), request: async () => kube({ authorization: `Bearer ${await t(userToken())}` }) },
  { name: "SubjectAccessReview reset", expect: "dependency-unavailable", fault: (x) => void (x.kube.faults.sar = "reset"), request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }) },
  {
    name: "TokenRequest failing",
    expect: "dependency-unavailable",
    fault: (x) => void (x.kube.faults.tokenRequest = "status-500"),
    request: async () => {
      const sub = randomUUID();
      w.kube.serviceAccounts.add(`fundament-system/fundament-${sub}`);
      return kube({ authorization: `Bearer ${await t(userToken({ sub }))}` });
    },
  },
  {
    name: "index not synced",
    expect: "dependency-unavailable",
    fault: async (x) => {
      x.kube.faults.list = "status-500";
      x.kube.cutWatches();
      await until(() => !indexAnswers(x.ports), 2_000, "the index to go unsynced");
    },
    request: async () => kube({ authorization: `Bearer ${await t(pluginToken())}` }),
  },
];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-secrets-"));
  revocationSource = await new FakeRevocationApi().start();
  revocationSource.put("user-revoked", { reason: "INC", user: { id: REVOKED_USER } });
  const revocations = { kubeconfig: revocationSource.writeKubeconfig(dir) };
  w = await startWired(
    { logLevel: "trace" },
    { config: (c) => ({ ...c, openfga: { ...c.openfga!, apiToken: { env: "PORTCULLIS_TEST_FGA_TOKEN" } }, revocations }) },
  );
  await until(() => w.ports.ready(), 5_000, "the revocation index to sync");
});

afterAll(async () => {
  await w.stop();
  await revocationSource.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("a representative run leaks nothing", () => {
  it("runs every allow, every Fundament denial and every dependency failure with logs at trace", async () => {
    for (const step of steps) {
      w.openfga.fault = "healthy";
      w.openfga.allowed = () => true;
      w.kube.sarAllowed = () => true;
      Object.assign(w.kube.faults, { sar: "healthy", tokenRequest: "healthy", list: "healthy", watch: "healthy" });
      await until(() => indexAnswers(w.ports), 5_000, "the index to sync");
      await step.fault?.(w);
      const res = await w.server.check(await step.request());
      expect(res.allowed ? "allow" : res.reason, step.name).toBe(step.expect);
      if (res.allowed) {
        allows++;
        continue;
      }
      reasonsSeen.add(res.reason ?? "");
      denials.push(JSON.stringify(res.body), ...Object.values(res.headers));
    }
    // Every denial the Fundament policies can give, bar internal-error (a bug, not an input) and
    // the Konfidence reasons (no Konfidence policy configured here).
    const notExercised = ["internal-error", "project-not-found", "no-role", "role-denied"];
    expect([...reasonsSeen].sort()).toEqual(Object.keys(REASONS).filter((r) => !notExercised.includes(r)).sort());
    expect(allows).toBe(6);
  });

  it("and no log line, denial, metric or audit line holds a credential", async () => {
    await new Promise((r) => setTimeout(r, 100)); // the log stream is asynchronous
    const secrets = [
      ["the HS256 secret", SECRET],
      ["the old HS256 secret", OLD_SECRET],
      ["portcullis's kubeconfig token", w.kube.bearer],
      ["portcullis's revocation-source kubeconfig token", revocationSource.bearer],
      ["portcullis's OpenFGA API token", FGA_TOKEN],
      ...tokens.flatMap((tok, i) => [[`token #${i}`, tok], [`signature of token #${i}`, signatureOf(tok)]]),
      ...w.kube.issuedTokens.map((tok, i) => [`injected ServiceAccount token #${i}`, tok]),
    ] as Array<[string, string]>;
    // The credentials really were in play: sent to the fakes, issued by them.
    expect(w.kube.issuedTokens.length).toBeGreaterThanOrEqual(2);
    expect(w.openfga.requests.some((r) => r.headers.authorization === `Bearer ${FGA_TOKEN}`)).toBe(true);
    expect(w.kube.requests.some((r) => r.headers.authorization === `Bearer ${w.kube.bearer}`)).toBe(true);

    const metrics = await (await fetch(`http://127.0.0.1:${w.server.server.adminPort}/metrics`)).text();
    const logs = w.server.rawLog() + w.portLog();
    const places: Array<[string, string]> = [
      ["logs", logs],
      ["denials", denials.join("\n")],
      ["metrics", metrics],
    ];
    // Trace logging really ran, and each dependency failure was logged with its reason.
    expect(logs.split("\n").length).toBeGreaterThan(steps.length);
    expect(w.server.logs.filter((l) => l["audit"] === "plugin_request").length).toBeGreaterThan(8);
    const leaks = places.flatMap(([where, text]) => secrets.filter(([, secret]) => secret.length >= 8 && text.includes(secret)).map(([what]) => `${what} in ${where}`));
    expect(leaks).toEqual([]);
  });
});
