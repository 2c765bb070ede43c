/**
 * The revocation gate over real gRPC, on both policies that accept PluginTokens, and on the mint
 * RPC: which entries refuse which requests, that the gate runs before any remote call (a revoked
 * plugin costs no OpenFGA Check, review or TokenRequest), that the installation's current pin is
 * checked too, the audit line and the metric, and that an unsynced list is a 503, never an allow.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Revocation } from "../../src/kube-watch/revocations.ts";
import type { RevokedRequest } from "../../src/metrics/events.ts";
import { installationServiceConstructor } from "../../src/server/installation-service.ts";
import { FakeWorld, installation } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, PINNED_HASH, pluginToken } from "../support/tokens.ts";

let world: FakeWorld;
let server: TestServer;
let manifests: grpc.Client;

beforeAll(async () => {
  world = new FakeWorld();
  server = await startTestServer(world);
  const Service = installationServiceConstructor();
  manifests = new Service(`127.0.0.1:${server.server.internalPort}`, grpc.credentials.createInsecure());
});
afterAll(async () => {
  manifests.close();
  await server.stop();
});
beforeEach(() => {
  Object.assign(world, new FakeWorld());
});

const OTHER_HASH = `sha256:${"cd".repeat(32)}`;
const entry = (target: Revocation["target"]): Revocation => ({ name: "incident", target });

const routes = {
  "kube-api-proxy": `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`,
  "plugin-proxy": `/installations/${ids.installation}/runtime/api`,
} as const;
type PolicyName = keyof typeof routes;

async function ask(policy: PolicyName, claims: Record<string, unknown> = {}) {
  return server.check({ path: routes[policy], headers: { authorization: `Bearer ${await pluginToken(claims)}` }, policy });
}

// The token names cert-manager 1.4.0, definition PINNED_HASH, installation ids.installation, user ids.user.
const table: Array<{ name: string; entries: Revocation[]; claims?: Record<string, unknown>; pinned?: Partial<ReturnType<typeof installation>>; revoked: boolean; remoteCalls: boolean }> = [
  { name: "nothing revoked", entries: [], revoked: false, remoteCalls: true },
  { name: "the installation", entries: [entry({ scope: "installation", installationId: ids.installation })], revoked: true, remoteCalls: false },
  { name: "another installation", entries: [entry({ scope: "installation", installationId: ids.otherInstallation })], revoked: false, remoteCalls: true },
  { name: "the plugin, every version", entries: [entry({ scope: "plugin", pluginName: "cert-manager" })], revoked: true, remoteCalls: false },
  { name: "the plugin's version", entries: [entry({ scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0" })], revoked: true, remoteCalls: false },
  { name: "another version of the plugin", entries: [entry({ scope: "plugin", pluginName: "cert-manager", pluginVersion: "0.9.0" })], revoked: false, remoteCalls: true },
  { name: "the plugin's definition", entries: [entry({ scope: "plugin", pluginName: "cert-manager", definitionHash: PINNED_HASH })], revoked: true, remoteCalls: false },
  { name: "another definition", entries: [entry({ scope: "plugin", pluginName: "cert-manager", definitionHash: OTHER_HASH })], revoked: false, remoteCalls: true },
  { name: "another plugin", entries: [entry({ scope: "plugin", pluginName: "cert-manager-ui" })], revoked: false, remoteCalls: true },
  { name: "the user", entries: [entry({ scope: "user", userId: ids.user })], revoked: true, remoteCalls: false },
  { name: "another user", entries: [entry({ scope: "user", userId: ids.otherUser })], revoked: false, remoteCalls: true },
  {
    name: "a version the installation was re-pinned to since the mint",
    entries: [entry({ scope: "plugin", pluginName: "cert-manager", pluginVersion: "0.9.0" })],
    pinned: { pluginVersion: "0.9.0" },
    revoked: true,
    remoteCalls: true,
  },
  {
    name: "a definition the installation was re-pinned to since the mint",
    entries: [entry({ scope: "plugin", pluginName: "cert-manager", definitionHash: OTHER_HASH })],
    pinned: { definitionHash: OTHER_HASH },
    revoked: true,
    remoteCalls: true,
  },
];

describe.each(["kube-api-proxy", "plugin-proxy"] as const)("%s", (policy) => {
  it.each(table)("$name → revoked: $revoked", async ({ entries, claims, pinned, revoked, remoteCalls }) => {
    world.revocationEntries = entries;
    if (pinned !== undefined) world.installationsByUid.set(ids.installation, installation(pinned));
    const res = await ask(policy, claims);
    if (!revoked) {
      expect(res.allowed).toBe(true);
      return;
    }
    expect(res).toMatchObject({ allowed: false, grpc: grpc.status.PERMISSION_DENIED, http: 403, reason: "revoked" });
    if (!res.allowed) expect(JSON.stringify(res.body)).not.toContain("incident");
    // The token's own claims are checked before any remote gate starts.
    expect(world.calls.some((c) => c.startsWith("canView") || c.startsWith("sar") || c.startsWith("token"))).toBe(remoteCalls);
  });

  it("an unsynced list is a 503 with retry-after, never an allow, and nothing remote is asked", async () => {
    world.revocationsSynced = false;
    const res = await ask(policy);
    expect(res).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable", headers: { "retry-after": "1" } });
    // The local installation index may be read (for the audit line's pin); nothing remote is.
    expect(world.calls.filter((c) => !c.startsWith("installation "))).toEqual([]);
  });

  it("counts the refusal by the kind of entry that matched", async () => {
    const seen: RevokedRequest[] = [];
    const onRevoked = (m: unknown) => void seen.push(m as RevokedRequest);
    subscribe("portcullis:revoked", onRevoked);
    try {
      world.revocationEntries = [entry({ scope: "user", userId: ids.user })];
      await ask(policy);
    } finally {
      unsubscribe("portcullis:revoked", onRevoked);
    }
    expect(seen).toEqual([{ policy, scope: "user" }]);
  });
});

const lastAuditLine = () => server.logs.filter((l) => l["audit"] === "plugin_request").at(-1);

describe("the audit line (kube-api-proxy)", () => {
  it("says denied:revoked and still names what was asked", async () => {
    world.revocationEntries = [entry({ scope: "installation", installationId: ids.installation })];
    await ask("kube-api-proxy");
    expect(lastAuditLine()).toMatchObject({ decision: "denied:revoked", installation_id: ids.installation, verb: "get", resource: "certificates", namespace: "team-a", name: "web" });
  });

  it("says denied:dependency-unavailable while the list is unsynced", async () => {
    world.revocationsSynced = false;
    await ask("kube-api-proxy");
    expect(lastAuditLine()).toMatchObject({ decision: "denied:dependency-unavailable", resource: "certificates" });
  });
});

function getManifest(): Promise<{ ok: true } | { ok: false; code: number; details: string }> {
  return new Promise((resolveCall) => {
    (manifests as unknown as Record<string, (req: object, cb: (err: grpc.ServiceError | null) => void) => void>)["GetInstallationManifest"]!.call(
      manifests,
      { cluster_id: ids.cluster, installation_id: ids.installation },
      (err) => resolveCall(err === null ? { ok: true } : { ok: false, code: err.code, details: err.details }),
    );
  });
}

describe("GetInstallationManifest (the mint)", () => {
  it.each([
    { name: "nothing revoked", entries: [], expected: { ok: true } },
    { name: "the installation", entries: [entry({ scope: "installation", installationId: ids.installation })], expected: { ok: false, code: grpc.status.FAILED_PRECONDITION, details: "installation is revoked" } },
    { name: "its pinned version", entries: [entry({ scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0" })], expected: { ok: false, code: grpc.status.FAILED_PRECONDITION, details: "installation is revoked" } },
    { name: "another version", entries: [entry({ scope: "plugin", pluginName: "cert-manager", pluginVersion: "0.9.0" })], expected: { ok: true } },
    // A user entry refuses that user's requests at the gateway; the mint names no user.
    { name: "a user", entries: [entry({ scope: "user", userId: ids.user })], expected: { ok: true } },
  ])("$name", async ({ entries, expected }) => {
    world.revocationEntries = entries;
    expect(await getManifest()).toEqual(expected);
  });

  it("answers UNAVAILABLE while the list is unsynced", async () => {
    world.revocationsSynced = false;
    expect(await getManifest()).toEqual({ ok: false, code: grpc.status.UNAVAILABLE, details: "revocation-list not synced" });
  });
});
