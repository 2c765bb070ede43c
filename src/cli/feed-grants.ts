/**
 * `validate-config` (without --file-only): which of the change feeds' grants each configured
 * cluster's credential lacks, as the server says it at start (kube-watch/feed-grants.ts). A warning,
 * not a failure: the server starts without them, on the short TTLs.
 */
import type { Config } from "../config/schema.ts";
import { Clusters } from "../kube-fleet/clusters.ts";
import { missingFeedGrants, missingGrantsMessage } from "../kube-watch/feed-grants.ts";
import { errorSummary } from "../redaction/error-cause.ts";

const TIMEOUT_MS = 5_000;

/** One warning line per cluster that lacks a grant or could not be asked; none when all hold them. */
export async function feedGrantWarnings(config: Config): Promise<string[]> {
  // The feeds follow clusters only where the Fundament policies, which alone use them, are served.
  if (config.openfga === undefined || config.clusters.length === 0) return [];
  const clusters = await Clusters.load(config.clusters);
  try {
    return (
      await Promise.all(
        clusters.all().map(async (cluster) => {
          try {
            const missing = await missingFeedGrants(cluster, TIMEOUT_MS);
            return missing.length === 0 ? [] : [`warning: cluster ${cluster.id}: ${missingGrantsMessage(missing)}`];
          } catch (err) {
            return [`warning: cluster ${cluster.id}: could not ask its API server which of the change feeds' grants the credential holds: ${errorSummary(err)}`];
          }
        }),
      )
    ).flat();
  } finally {
    await clusters.close();
  }
}
