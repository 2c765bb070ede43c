/**
 * A PluginInstallation deleted and re-created under the same name while the watch was not running
 * (between a watch's end and the list in place that follows it: a clean end, the silence probe, a
 * 410) reaches the store only as an "update" of the name (ListWatch keys its cache by name). The
 * index keys by uid: the deleted installation's uid must go with it, or its PluginTokens stay
 * usable (and authn-api keeps minting them) until the watch next restarts in full.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../src/kube-watch/installation-index.ts";
import { NO_REVOCATIONS } from "../../src/kube-watch/revocations.ts";
import { installationServiceHandlers } from "../../src/server/installation-service.ts";
import { PINNED_HASH } from "../support/tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { until } from "../support/wire-fakes/wired.ts";

const CLUSTER = "0e0e0e0e-0000-4000-8000-0000000000c1";
const OLD = "0e0e0e0e-0000-4000-8000-00000000001a";
const NEW = "0e0e0e0e-0000-4000-8000-00000000001b";

let dir: string;
let kube: FakeKubeApi;
let clusters: Clusters;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-reinstall-"));
  kube = await new FakeKubeApi().start();
  clusters = await Clusters.load([{ id: CLUSTER, kubeconfig: kube.writeKubeconfig(dir) }]);
});

afterAll(async () => {
  await clusters?.close();
  await kube?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function manifest(installations: InstallationIndex, installationId: string): Promise<{ code?: number; value?: unknown }> {
  const handlers = installationServiceHandlers(installations, NO_REVOCATIONS);
  return new Promise((resolve) =>
    (handlers["GetInstallationManifest"] as (call: unknown, cb: (err: { code: number } | null, value?: unknown) => void) => void)(
      { request: { cluster_id: CLUSTER, installation_id: installationId } },
      (err, value) => resolve(err === null ? { value } : { code: err.code }),
    ),
  );
}

for (const [how, end] of [
  ["a 410 (history compacted)", () => kube.compact()],
  ["a clean end of the watch by the server", () => kube.endWatches()],
] as const) {
  it(`a reinstall under the same name unseen by the watch, then ${how}: the deleted uid is gone from the index`, async () => {
    kube.put({ uid: OLD, name: "cert-manager", definitionHash: PINNED_HASH });
    const installations = new InstallationIndex(clusters.all(), { logger: pino({ level: "silent" }) });
    await installations.start();
    try {
      expect(installations.byUid(CLUSTER, OLD)?.name).toBe("cert-manager");
      await until(() => kube.watchers > 0, 5_000, "the watch");
      // Deleted and re-created (a reinstall) while no watch hears it…
      kube.removeSilently(OLD);
      kube.putSilently({ uid: NEW, name: "cert-manager", definitionHash: PINNED_HASH });
      // …then the watch ends and ListWatch lists again in place (the index stays synced).
      end();
      await until(() => installations.byUid(CLUSTER, NEW) !== undefined, 5_000, "the relist to add the new installation");
      // The API server has no installation OLD any more: neither the gateway nor the mint may find it.
      expect(installations.byUid(CLUSTER, OLD)).toBeUndefined();
      expect((await manifest(installations, OLD)).code).toBe(5 /* NOT_FOUND */);
    } finally {
      await installations.stop();
      kube.removeSilently(NEW);
      kube.removeSilently(OLD);
    }
  });
}
