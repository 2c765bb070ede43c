/**
 * The sub-TTL kill switch (issue 17) against a real kube-apiserver: two portcullis replicas, each
 * with its own watch of Revocation objects, follow one `kubectl apply` within a second (a plugin
 * that was allowed is then 403 `revoked` on both, whatever their caches hold), follow the
 * `kubectl delete` back, and the mint RPC refuses a revoked installation. The CLI's revoke and
 * unrevoke do the same for a plugin version. The CRD's validation is the real API server's.
 */
import { execFile } from "node:child_process";
import * as grpc from "@grpc/grpc-js";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { REVOCATIONS } from "../../src/kube-watch/revocations.ts";
import { revocationObject } from "../../src/cli/revoke.ts";
import { connectPorts, type ConnectedPorts } from "../../src/server/ports.ts";
import { installationServiceConstructor } from "../../src/server/installation-service.ts";
import { createLogging } from "../../src/server/logging.ts";
import { cli } from "../cli/run.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { startFundamentWorld, type FundamentWorld, users, waitFor } from "./fundament-world.ts";

let world: FundamentWorld;
let secondPorts: ConnectedPorts;
let second: TestServer;
let manifests: grpc.Client;

beforeAll(async () => {
  // Long cache lifetimes: every gate's answer is cached as allowed, so only the deny-list can stop the plugin.
  world = await startFundamentWorld({ revocations: true, allowTtlMs: 60_000, denyTtlMs: 60_000 });
  secondPorts = await connectPorts(world.config, createLogging("warn").logger);
  await waitFor(async () => secondPorts.ready());
  second = await startTestServer(secondPorts, world.config);
  const Service = installationServiceConstructor();
  manifests = new Service(`127.0.0.1:${world.portcullis.server.internalPort}`, grpc.credentials.createInsecure());
}, 180_000);

afterAll(async () => {
  manifests?.close();
  await second?.stop();
  await world?.stop();
});

// A failed test must not leave its entry behind for the next one.
afterEach(async () => {
  const custom = world.admin.makeApiClient(CustomObjectsApi);
  const { items } = (await custom.listClusterCustomObject(REVOCATIONS)) as { items: Array<{ metadata: { name: string } }> };
  for (const item of items) await custom.deleteClusterCustomObject({ ...REVOCATIONS, name: item.metadata.name });
});

const CERTIFICATE = `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates/web`;

/** What each replica answers, kube-api-proxy and plugin-proxy. */
async function answers(token: string): Promise<string[]> {
  const replicas = [world.portcullis, second];
  const results = await Promise.all(
    replicas.flatMap((r) => [
      r.check({ path: CERTIFICATE, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" }),
      r.check({ path: `/installations/${world.installationUid}/runtime/api`, headers: { authorization: `Bearer ${token}` }, policy: "plugin-proxy" }),
    ]),
  );
  return results.map((r) => (r.allowed ? "allowed" : `${r.http} ${r.reason}`));
}

/** Polls both replicas every 10 ms until every answer is `expected`; the milliseconds it took. */
async function untilAll(token: string, expected: string, timeoutMs = 5_000): Promise<number> {
  const started = performance.now();
  for (;;) {
    const now = await answers(token);
    if (now.every((a) => a === expected)) return performance.now() - started;
    if (performance.now() - started > timeoutMs) throw new Error(`still ${JSON.stringify(now)} after ${timeoutMs} ms, expected ${expected}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function kubectl(args: string[], input?: string): Promise<void> {
  return new Promise((resolveRun, reject) => {
    const child = execFile("kubectl", ["--kubeconfig", world.api.kubeconfigPath, ...args], { timeout: 20_000 }, (err, _stdout, stderr) =>
      err === null ? resolveRun() : reject(new Error(`kubectl ${args.join(" ")}: ${stderr}`)),
    );
    if (input !== undefined) child.stdin!.end(input);
  });
}

function getManifest(installationId: string): Promise<{ ok: true } | { ok: false; code: number; details: string }> {
  return new Promise((resolveCall) => {
    (manifests as unknown as Record<string, (req: object, cb: (err: grpc.ServiceError | null) => void) => void>)["GetInstallationManifest"]!.call(
      manifests,
      { cluster_id: ids.cluster, installation_id: installationId },
      (err) => resolveCall(err === null ? { ok: true } : { ok: false, code: err.code, details: err.details }),
    );
  });
}

async function revokedCount(server: TestServer): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${server.server.adminPort}/metrics`);
  const text = await res.text();
  return text
    .split("\n")
    .filter((l) => l.startsWith("portcullis_revoked_total"))
    .join("\n");
}

describe("revocation on two replicas against the real kube-apiserver", () => {
  it("installation: kubectl apply → 403 revoked on both replicas within 1 s, mint refused; kubectl delete → allowed again", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    expect(await answers(token)).toEqual(["allowed", "allowed", "allowed", "allowed"]);
    expect(await getManifest(world.installationUid)).toEqual({ ok: true });

    const revocation = revocationObject({ scope: "installation", installationId: world.installationUid }, "INC-1: cert-manager plugin exfiltrating");
    await kubectl(["apply", "-f", "-"], JSON.stringify(revocation));
    const revokedMs = await untilAll(token, "403 revoked");
    console.log(`installation revoked on both replicas ${revokedMs.toFixed(0)} ms after kubectl apply returned`);
    expect(revokedMs).toBeLessThan(1_000);

    expect(await getManifest(world.installationUid)).toEqual({ ok: false, code: grpc.status.FAILED_PRECONDITION, details: "installation is revoked" });
    const audit = world.portcullis.logs.filter((l) => l["audit"] === "plugin_request" && l["decision"] === "denied:revoked");
    expect(audit.length).toBeGreaterThan(0);
    expect(audit[0]).toMatchObject({ user: users.alice, installation_id: world.installationUid, resource: "certificates" });
    expect(await revokedCount(second)).toContain('portcullis_revoked_total{policy="kube-api-proxy",scope="installation"}');
    expect(await revokedCount(world.portcullis)).toContain('portcullis_revoked_total{policy="GetInstallationManifest",scope="installation"}');

    await kubectl(["delete", "revocation", String((revocation["metadata"] as { name: string }).name)]);
    const restoredMs = await untilAll(token, "allowed");
    console.log(`allowed again on both replicas ${restoredMs.toFixed(0)} ms after kubectl delete returned`);
    expect(restoredMs).toBeLessThan(1_000);
    expect(await getManifest(world.installationUid)).toEqual({ ok: true });
  });

  it("plugin version, through `portcullis revoke` / `unrevoke`: another version's entry changes nothing", async () => {
    const token = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    const kubeconfig = ["--kubeconfig", world.api.kubeconfigPath];
    const other = await cli(["revoke", "--plugin", "cert-manager", "--plugin-version", "9.9.9", "--reason", "INC-2", ...kubeconfig]);
    expect(other).toMatchObject({ code: 0 });
    // A replica that saw the other entry answers as before: the control for the next step.
    await waitFor(async () => (await world.admin.makeApiClient(CustomObjectsApi).listClusterCustomObject(REVOCATIONS)).items.length === 1);
    await new Promise((r) => setTimeout(r, 300));
    expect(await answers(token)).toEqual(["allowed", "allowed", "allowed", "allowed"]);

    const revoke = await cli(["revoke", "--plugin", "cert-manager", "--plugin-version", "1.4.0", "--reason", "INC-2: 1.4.0 is bad", ...kubeconfig]);
    expect(revoke).toMatchObject({ code: 0, stdout: expect.stringContaining("created") });
    const revokedMs = await untilAll(token, "403 revoked");
    console.log(`plugin version revoked on both replicas ${revokedMs.toFixed(0)} ms after portcullis revoke exited`);
    expect(revokedMs).toBeLessThan(1_000);
    expect(await getManifest(world.installationUid)).toMatchObject({ ok: false, code: grpc.status.FAILED_PRECONDITION });
    expect(await cli(["revoke", "--plugin", "cert-manager", "--plugin-version", "1.4.0", "--reason", "again", ...kubeconfig])).toMatchObject({
      code: 0,
      stdout: expect.stringContaining("already in force"),
    });

    expect(await cli(["unrevoke", "--plugin", "cert-manager", "--plugin-version", "1.4.0", ...kubeconfig])).toMatchObject({ code: 0, stdout: expect.stringContaining("deleted") });
    expect(await cli(["unrevoke", "--plugin", "cert-manager", "--plugin-version", "9.9.9", ...kubeconfig])).toMatchObject({ code: 0 });
    expect(await untilAll(token, "allowed")).toBeLessThan(1_000);
    expect(await getManifest(world.installationUid)).toEqual({ ok: true });
  });

  it("user: that user's requests through any plugin are revoked, another user's are not, and minting is not refused", async () => {
    const alice = await pluginToken({ sub: users.alice, installation_id: world.installationUid });
    const bob = await pluginToken({ sub: users.bob, installation_id: world.installationUid });
    expect(await answers(bob)).toEqual(["allowed", "allowed", "allowed", "allowed"]);
    const revocation = revocationObject({ scope: "user", userId: users.alice }, "INC-3: alice's session stolen");
    await kubectl(["apply", "-f", "-"], JSON.stringify(revocation));
    expect(await untilAll(alice, "403 revoked")).toBeLessThan(1_000);
    expect(await answers(bob)).toEqual(["allowed", "allowed", "allowed", "allowed"]);
    expect(await getManifest(world.installationUid)).toEqual({ ok: true });
    await kubectl(["delete", "revocation", String((revocation["metadata"] as { name: string }).name)]);
    expect(await untilAll(alice, "allowed")).toBeLessThan(1_000);
  });

  it.each([
    { name: "two targets", spec: { reason: "x", installation: { id: ids.installation }, user: { id: ids.user } } },
    { name: "no target", spec: { reason: "x" } },
    { name: "no reason", spec: { user: { id: ids.user } } },
    { name: "an installation id that is not a UUID", spec: { reason: "x", installation: { id: "cert-manager" } } },
    { name: "a definition hash that pins nothing", spec: { reason: "x", plugin: { name: "cert-manager", definitionHash: "sha256:unknown" } } },
  ])("the real API server refuses a Revocation with $name", async ({ spec }) => {
    const custom = world.admin.makeApiClient(CustomObjectsApi);
    await expect(
      custom.createClusterCustomObject({ ...REVOCATIONS, body: { apiVersion: "portcullis.fundament.io/v1alpha1", kind: "Revocation", metadata: { name: "bad" }, spec } }),
    ).rejects.toMatchObject({ code: 422 });
  });
});
