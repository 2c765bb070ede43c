/**
 * A PluginInstallation index (cluster id "c") on a real kube-apiserver with the CRDs applied, for
 * the tests of a quiet watch: what the index logged at warn and above, and what the API server served.
 */
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import { Clusters } from "../../../src/kube-fleet/clusters.ts";
import { InstallationIndex } from "../../../src/kube-watch/installation-index.ts";
import { CRD_FILES } from "../../e2e/fundament-world.ts";
import { applyManifests, type KubeApiserver, rawTextRequest, startKubeApiserver } from "../../harness/index.ts";

export interface RealIndex {
  readonly api: KubeApiserver;
  readonly index: InstallationIndex;
  /** The `msg` of every line the index logged at warn or above. */
  warnings(): string[];
  stop(): Promise<void>;
}

/** Started and synced (the first list and watch done). */
export async function startRealIndex(options: { inactivityMs?: number } = {}): Promise<RealIndex> {
  const api = await startKubeApiserver();
  await applyManifests(api, CRD_FILES);
  const clusters = await Clusters.load([{ id: "c", kubeconfig: api.kubeconfigPath }]);
  const lines: string[] = [];
  const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
  const index = new InstallationIndex(clusters.all(), { logger, ...options });
  await index.start();
  return {
    api,
    index,
    warnings: () => lines.map((line) => (JSON.parse(line) as { msg: string }).msg),
    stop: async () => {
      await index.stop();
      await clusters.close();
      await api.stop();
    },
  };
}

/** Runs `lookup` every `everyMs` for `forMs`: how many passed, and when and why each other one threw. */
export async function lookUpThroughout(forMs: number, everyMs: number, lookup: () => void): Promise<{ answered: number; unanswered: string[] }> {
  let answered = 0;
  const unanswered: string[] = [];
  for (const started = Date.now(); Date.now() - started < forMs; await sleep(everyMs)) {
    try {
      lookup();
      answered++;
    } catch (err) {
      unanswered.push(`${Date.now() - started} ms: ${(err as Error).message}`);
    }
  }
  return { answered, unanswered };
}

/**
 * What the API server did for one resource, from one reading of its own /metrics: the requests it
 * served, by verb, and how often its watch cache for the resource has (re)initialised. Its cacher
 * ends every watch on the cache when its own watch of etcd ends and it lists again ("Terminating all
 * watchers from cacher"), so each reinitialisation after the first ends the index's watch cleanly,
 * and the index rightly lists and watches again: requests the API server caused, not the index.
 */
export async function apiserverCounts(api: KubeApiserver, resource: string): Promise<{ LIST: number; WATCH: number; watchCacheStarts: number }> {
  const { text } = await rawTextRequest(api, "GET", "/metrics", undefined);
  const total = (metric: string, label?: string) =>
    [...text.matchAll(new RegExp(`^${metric}\\{([^}]*)\\} (\\d+)$`, "gm"))]
      .filter(([, labels]) => labels!.includes(`resource="${resource}"`) && (label === undefined || labels!.includes(label)))
      .reduce((sum, [, , n]) => sum + Number(n), 0);
  return {
    LIST: total("apiserver_request_total", 'verb="LIST"'),
    WATCH: total("apiserver_request_total", 'verb="WATCH"'),
    watchCacheStarts: total("apiserver_watch_cache_initializations_total"),
  };
}
