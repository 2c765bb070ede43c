import { join } from "node:path";
import { makeTempDir, resolveBinary, spawnManaged, waitUntilReady, type ManagedProcess } from "./binaries.ts";
import { freePort } from "./ports.ts";

export interface Etcd {
  /** http://127.0.0.1:port, for --etcd-servers. */
  readonly clientUrl: string;
  /** The etcd process, for fault injection (signals, /proc). */
  readonly process: ManagedProcess;
  stop(): Promise<void>;
}

/** Starts a single-member etcd with a throwaway data directory; `extraArgs` after the defaults. */
export async function startEtcd(extraArgs: readonly string[] = []): Promise<Etcd> {
  const bin = resolveBinary("etcd");
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const clientUrl = `http://127.0.0.1:${clientPort}`;
  // The peer URL is never used by a single member, but etcd binds it anyway
  // (default :2380), which would collide between parallel test files.
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  const dir = makeTempDir("etcd");
  const proc = spawnManaged("etcd", bin, [
    "--name=test",
    `--data-dir=${join(dir, "data")}`,
    `--listen-client-urls=${clientUrl}`,
    `--advertise-client-urls=${clientUrl}`,
    `--listen-peer-urls=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--initial-cluster=test=${peerUrl}`,
    "--logger=zap",
    "--log-level=warn",
    // A quiet resource's watch cache hears of newer revisions only by events or etcd's progress
    // notifications (10 minutes by default); etcd >= 3.4.31/3.5.13 answers kube-apiserver's
    // progress requests instead, which this 3.4.23 predates. Every second, as production etcd's
    // progress requests would let portcullis's freshness proofs advance (src/kube-watch/change-feed-watch.ts).
    "--experimental-watch-progress-notify-interval=1s",
    ...extraArgs,
  ], dir);

  await waitUntilReady(proc, async () => {
    const res = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(2_000) });
    return res.ok && ((await res.json()) as { health?: string }).health === "true";
  }, 30_000);

  return { clientUrl, process: proc, stop: () => proc.stop() };
}
