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
 * How often the API server's watch cache for PluginInstallations has (re)initialised, from its own
 * /metrics. kube-apiserver's cacher ends every watch on it when its own watch of etcd ends and it
 * lists again ("Terminating all watchers from cacher"), so each reinitialisation after the first
 * ends the index's watch cleanly, and the index rightly lists again: a list the API server caused,
 * not the index.
 */
export async function watchCacheInitializations(api: KubeApiserver): Promise<number> {
  const { text } = await rawTextRequest(api, "GET", "/metrics", undefined);
  return [...text.matchAll(/^apiserver_watch_cache_initializations_total\{([^}]*)\} (\d+)$/gm)]
    .filter(([, labels]) => labels!.includes('group="plugins.fundament.io"') && labels!.includes('resource="plugininstallations"'))
    .reduce((sum, [, , n]) => sum + Number(n), 0);
}

/** Requests the API server has served for one resource, by verb, from its own /metrics. */
export async function apiserverRequests(api: KubeApiserver, resource: string): Promise<{ LIST: number; WATCH: number }> {
  const { text } = await rawTextRequest(api, "GET", "/metrics", undefined);
  const served = (verb: string) =>
    [...text.matchAll(/^apiserver_request_total\{([^}]*)\} (\d+)$/gm)]
      .filter(([, labels]) => labels!.includes(`resource="${resource}"`) && labels!.includes(`verb="${verb}"`))
      .reduce((sum, [, , n]) => sum + Number(n), 0);
  return { LIST: served("LIST"), WATCH: served("WATCH") };
}
