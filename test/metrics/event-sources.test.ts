import { describe, expect, it } from "vitest";
import type { FeedState } from "../../src/cache/freshness.ts";
import { createMetrics } from "../../src/server/prometheus.ts";

describe("event source metrics", () => {
  it("show each source's scope as synced with its lag, or unsynced without one, as the feeds say at scrape time", async () => {
    let feeds: FeedState[] = [
      { source: "kube-rbac", scope: "c1", synced: true, lagSeconds: 0.4 },
      { source: "openfga-changes", scope: "store-1", synced: false, detail: "changes endpoint answered 500" },
    ];
    const metrics = createMetrics({ indexSizes: () => [], changeFeeds: () => feeds });
    const series = async () => (await metrics.metrics()).split("\n").filter((l) => l.startsWith("portcullis_event_source_"));
    expect(await series()).toEqual([
      'portcullis_event_source_synced{source="kube-rbac",scope="c1"} 1',
      'portcullis_event_source_synced{source="openfga-changes",scope="store-1"} 0',
      'portcullis_event_source_lag_seconds{source="kube-rbac",scope="c1"} 0.4',
    ]);
    // A cluster removed from the fleet leaves no series behind.
    feeds = [{ source: "openfga-changes", scope: "store-1", synced: true, lagSeconds: 0.1 }];
    expect(await series()).toEqual([
      'portcullis_event_source_synced{source="openfga-changes",scope="store-1"} 1',
      'portcullis_event_source_lag_seconds{source="openfga-changes",scope="store-1"} 0.1',
    ]);
  });
});
