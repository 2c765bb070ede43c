/**
 * The PluginInstallation index against a real kube-apiserver, whose objects carry what a real
 * cluster's do (managedFields written by the API server itself, kubectl's last-applied-configuration,
 * labels, finalizers, a deletionTimestamp): more installations than one list page, listed through
 * the API server's own continue tokens; every Installation the same as installationOf() of the
 * object the API server returns; the store handed only the kept fields, on the list and on watch
 * events.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { InstallationIndex, installationOf, keepInstallationFields, PLUGIN_INSTALLATIONS } from "../../src/kube-watch/installation-index.ts";
import { type IndexStore, resolveWatchOptions, WatchedIndex } from "../../src/kube-watch/watched-index.ts";
import { CRD_FILES } from "../e2e/fundament-world.ts";
import { applyManifests, type KubeApiserver, rawRequest, startKubeApiserver } from "../harness/index.ts";
import { PINNED_HASH } from "../support/tokens.ts";
import { until } from "../support/wire-fakes/wired.ts";

type Raw = Parameters<typeof installationOf>[0];

const PATH = "/apis/plugins.fundament.io/v1/plugininstallations";
/** One more than a list page (watched-index.ts: 500), so the list follows a continue token. */
const COUNT = 501;
const logger = pino({ level: "silent" });

let api: KubeApiserver;
let clusters: Clusters;
let dir: string;

/** As `kubectl apply -f` creates it: the manifest again in an annotation, labels; a finalizer on some. */
function manifest(k: number): Record<string, unknown> {
  const name = `plugin-${k}`;
  const applied = {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name, labels: { "plugins.fundament.io/plugin": name } },
    spec: { organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03", definitionRef: { pluginName: name, pluginVersion: "1.4.0", definitionHash: k % 7 === 0 ? "" : PINNED_HASH } },
  };
  return {
    ...applied,
    metadata: {
      ...applied.metadata,
      annotations: { "kubectl.kubernetes.io/last-applied-configuration": `${JSON.stringify(applied)}\n` },
      ...(k % 100 === 0 ? { finalizers: ["plugins.fundament.io/cleanup"] } : {}),
    },
  };
}

async function served(): Promise<Map<string, Raw>> {
  const { json } = await rawRequest(api, "GET", PATH, undefined);
  return new Map((json as { items: Raw[] }).items.map((item) => [item.metadata!.uid!, item]));
}

beforeAll(async () => {
  api = await startKubeApiserver();
  await applyManifests(api, CRD_FILES);
  for (let k = 0; k < COUNT; k += 25) {
    await Promise.all(
      Array.from({ length: Math.min(25, COUNT - k) }, async (_, j) => {
        const created = await rawRequest(api, "POST", PATH, manifest(k + j));
        if (created.status !== 201) throw new Error(`create plugin-${k + j}: ${created.status}`);
      }),
    );
  }
  // A controller's status write, and a delete held by the finalizer: deletionTimestamp set.
  const { json: zero } = await rawRequest(api, "GET", `${PATH}/plugin-1`, undefined);
  expect((await rawRequest(api, "PUT", `${PATH}/plugin-1/status`, { ...(zero as object), status: { phase: "Degraded" } })).status).toBe(200);
  expect((await rawRequest(api, "DELETE", `${PATH}/plugin-100`, undefined)).status).toBe(200);
  dir = mkdtempSync(join(tmpdir(), "portcullis-keep-kube-"));
  clusters = await Clusters.load([{ id: "c", kubeconfig: api.kubeconfigPath }]);
}, 120_000);

afterAll(async () => {
  await clusters?.close();
  await api?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("against a real kube-apiserver", () => {
  it("every installation, over two list pages, is the Installation of the object the API server returns", async () => {
    const objects = await served();
    expect(objects.size).toBe(COUNT);
    const any = [...objects.values()][0]!;
    // What the index does not read is there: the API server's managedFields and kubectl's annotation.
    expect(any.metadata).toHaveProperty("managedFields");
    expect(any.metadata).toHaveProperty(["annotations", "kubectl.kubernetes.io/last-applied-configuration"]);
    const index = new InstallationIndex([clusters.get("c")!], { logger });
    await index.start();
    try {
      expect(index.sizes()[0]).toMatchObject({ size: COUNT, synced: true });
      for (const [uid, obj] of objects) expect(index.byUid("c", uid)).toStrictEqual(installationOf(obj));
      const deleting = [...objects.values()].find((obj) => obj.metadata?.name === "plugin-100")!;
      expect(index.byUid("c", deleting.metadata!.uid!)?.terminating).toBe(true);
      const degraded = [...objects.values()].find((obj) => obj.metadata?.name === "plugin-1")!;
      expect(index.byUid("c", degraded.metadata!.uid!)?.phase).toBe("Degraded");
    } finally {
      await index.stop();
    }
  });

  it("the store is handed the kept fields only, from the list and from a watch event", async () => {
    const puts: Raw[] = [];
    const store: IndexStore<Raw> = { keep: keepInstallationFields, put: (obj) => void puts.push(obj), remove: () => {}, clear: () => {}, size: 0 };
    const index = new WatchedIndex(clusters.get("c")!, PLUGIN_INSTALLATIONS, store, { index: "test", objects: "objects" }, resolveWatchOptions({ logger }));
    await index.start();
    try {
      const objects = await served();
      expect(puts).toHaveLength(COUNT);
      for (const obj of puts) expect(obj).toStrictEqual(keepInstallationFields(objects.get(obj.metadata!.uid!)!));
      const { json } = await rawRequest(api, "GET", `${PATH}/plugin-2`, undefined);
      expect((await rawRequest(api, "PUT", `${PATH}/plugin-2/status`, { ...(json as object), status: { phase: "Terminating" } })).status).toBe(200);
      await until(() => puts.length === COUNT + 1, 10_000, "the status update");
      const modified = (await served()).get((json as Raw).metadata!.uid!)!;
      expect(modified.metadata).toHaveProperty("managedFields");
      expect(puts.at(-1)).toStrictEqual(keepInstallationFields(modified));
      expect(puts.at(-1)?.status).toStrictEqual({ phase: "Terminating" });
    } finally {
      await index.stop();
    }
  });
});
