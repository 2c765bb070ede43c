/**
 * Two answers about one PluginInstallation that must agree (issue 11, part 4), on the REAL index,
 * TokenRequest port and gRPC services over the wire-level fake API server:
 *  - GetInstallationManifest (what authn-api mints PluginTokens from) and Check refuse the same
 *    installations as being deleted: a deletionTimestamp, or status.phase Terminating without one;
 *  - after a reinstall under the same name (new uid, new ServiceAccount with the same name), the
 *    gateway injects a token issued for the new ServiceAccount, never the cached one of the deleted.
 */
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installationServiceConstructor } from "../../src/server/installation-service.ts";
import { indexAnswers, startWired, until, type Wired } from "../support/wire-fakes/wired.ts";
import { ids, PINNED_HASH, pluginToken } from "../support/tokens.ts";

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let w: Wired;
let manifests: grpc.Client;

beforeAll(async () => {
  w = await startWired();
  const Service = installationServiceConstructor();
  manifests = new Service(`127.0.0.1:${w.server.server.internalPort}`, grpc.credentials.createInsecure());
});
afterAll(async () => {
  manifests.close();
  await w.stop();
});

function manifestCode(installationId: string): Promise<number> {
  return new Promise((resolve) => {
    (manifests as unknown as Record<string, (req: object, cb: (err: grpc.ServiceError | null) => void) => void>)["GetInstallationManifest"]!.call(
      manifests,
      { cluster_id: ids.cluster, installation_id: installationId },
      (err) => resolve(err === null ? grpc.status.OK : err.code),
    );
  });
}

async function pluginCheck(uid: string, name: string) {
  return w.server.check({
    path: PODS,
    headers: { authorization: `Bearer ${await pluginToken({ installation_id: uid, installation_name: name })}` },
    policy: "kube-api-proxy",
  });
}

describe("GetInstallationManifest and Check agree on which installations are being deleted", () => {
  it.each([
    { name: "running", phase: "Running", deleting: false, manifest: grpc.status.OK, check: { allowed: true } },
    { name: "deletionTimestamp set", phase: "Running", deleting: true, manifest: grpc.status.FAILED_PRECONDITION, check: { allowed: false, http: 403, reason: "installation-unavailable" } },
    { name: "phase Terminating, no deletionTimestamp", phase: "Terminating", deleting: false, manifest: grpc.status.FAILED_PRECONDITION, check: { allowed: false, http: 403, reason: "installation-unavailable" } },
    { name: "phase Terminating and deletionTimestamp", phase: "Terminating", deleting: true, manifest: grpc.status.FAILED_PRECONDITION, check: { allowed: false, http: 403, reason: "installation-unavailable" } },
  ])("$name: manifest $manifest, check matches", async ({ phase, deleting, manifest, check }) => {
    const uid = ids.otherInstallation;
    w.kube.put({ uid, name: "grafana", definitionHash: PINNED_HASH, phase, deleting });
    w.kube.serviceAccounts.add("plugin-grafana/plugin-grafana");
    await until(async () => (await manifestCode(uid)) === manifest, 5_000, `the index to see grafana ${phase}`);
    expect(await pluginCheck(uid, "grafana")).toMatchObject(check);
  });
});

describe("a reinstall under the same name", () => {
  it("injects a token of the new ServiceAccount, not the cached one of the deleted", async () => {
    const first = "3f6c1d2e-8a4b-4c5d-9e6f-0a1b2c3d4e01";
    const second = "3f6c1d2e-8a4b-4c5d-9e6f-0a1b2c3d4e02";
    const sa = "plugin-loki/plugin-loki";
    w.kube.put({ uid: first, name: "loki", definitionHash: PINNED_HASH });
    w.kube.serviceAccounts.add(sa);
    await until(async () => (await pluginCheck(first, "loki")).allowed, 5_000, "loki to be indexed");
    const before = await pluginCheck(first, "loki");
    const oldToken = before.set?.["authorization"];
    expect(oldToken).toBe(`Bearer ${w.kube.issuedTokens.at(-1)}`);

    // Uninstall (the installation and its ServiceAccount go), then install again under the same name.
    w.kube.remove(first);
    w.kube.serviceAccounts.delete(sa);
    await until(async () => (await pluginCheck(first, "loki")).reason === "installation-unavailable", 5_000, "the uninstall to be seen");
    w.kube.serviceAccounts.add(sa);
    w.kube.put({ uid: second, name: "loki", definitionHash: PINNED_HASH });
    await until(async () => indexAnswers(w.ports) && (await pluginCheck(second, "loki")).allowed, 5_000, "the reinstall to be indexed");

    const after = await pluginCheck(second, "loki");
    expect(after.set?.["authorization"]).not.toBe(oldToken);
    expect(after.set?.["authorization"]).toBe(`Bearer ${w.kube.issuedTokens.at(-1)}`);
  });
});
