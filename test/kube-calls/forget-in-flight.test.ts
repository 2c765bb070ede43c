/**
 * A TokenRequest or SubjectAccessReview sent to a cluster's API server just before the cluster was
 * re-pointed or removed is not cached when it returns: forgetCluster() (cluster-fleet.ts, on every
 * register and unregister) cannot drop it, as lru-cache's keys() skips entries whose fetch is in
 * flight. Cached, the old server's ServiceAccount token (48 min at the default lifetime) would go
 * to the new API server, and the old server's "allowed" stand for the new one's review.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Dispatcher } from "undici";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { TokenRequests } from "../../src/kube-calls/service-account-tokens.ts";
import { SubjectAccessReviews } from "../../src/kube-calls/user-access-review.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";
import { until } from "../support/wire-fakes/wired.ts";

const ID = "0e0e0e0e-0000-4000-8000-0000000000c1";
const USER = "0e0e0e0e-0000-4000-8000-0000000000u1".replace("u", "a");
const SA = { namespace: "fundament-system", name: `fundament-${USER}` };
const GET_SECRETS: AccessAttributes = { kind: "resource", verb: "get", group: "", version: "v1", resource: "secrets", subresource: "", namespace: "ns", name: "x" };

let dir: string;
let oldServer: FakeKubeApi;
let newServer: FakeKubeApi;
let viaOld: Clusters;
let viaNew: Clusters;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-forget-"));
  oldServer = await new FakeKubeApi().start();
  newServer = await new FakeKubeApi().start();
  for (const s of [oldServer, newServer]) s.serviceAccounts.add(`${SA.namespace}/${SA.name}`);
  viaOld = await Clusters.load([{ id: ID, kubeconfig: oldServer.writeKubeconfig(dir) }]);
  viaNew = await Clusters.load([{ id: ID, kubeconfig: newServer.writeKubeconfig(dir) }]);
});

afterAll(async () => {
  await viaOld?.close();
  await viaNew?.close();
  await oldServer?.stop();
  await newServer?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A registry-held cluster X on the old API server, and how the fleet re-points it (cluster-fleet.ts register()). */
function fleet(forget: (id: string) => void) {
  const clusters = new Clusters([]);
  const noPool = { close: async () => {}, destroy: async () => {} } as unknown as Dispatcher;
  clusters.put({ cluster: viaOld.get(ID)!, pool: noPool });
  return {
    clusters,
    repoint() {
      clusters.put({ cluster: viaNew.get(ID)!, pool: noPool });
      forget(ID);
    },
  };
}

it("a TokenRequest in flight to the old API server when the cluster is re-pointed is not served for the new registration", async () => {
  oldServer.faults.tokenRequest = "slow";
  oldServer.slowMs = 300;
  let tokens!: TokenRequests;
  const f = fleet((id) => tokens.forgetCluster(id));
  tokens = new TokenRequests(f.clusters, { expirationSeconds: 3600, audiences: [], timeoutMs: 2_000, maxEntries: 100 });
  const inFlight = tokens.token(ID, SA.namespace, SA.name).catch(() => undefined);
  await until(() => oldServer.requests.some((r) => r.url.includes("/token")), 2_000, "the TokenRequest to reach the old server");
  f.repoint();
  await inFlight;
  const after = (await tokens.token(ID, SA.namespace, SA.name))?.authorization.slice("Bearer ".length);
  // Whatever the request in flight answered, the cluster now is the new API server: its token, not the old one's.
  expect(oldServer.issuedTokens).not.toContain(after);
  expect(newServer.issuedTokens).toContain(after);
  oldServer.faults.tokenRequest = "healthy";
});

it("a SubjectAccessReview in flight to the old API server when the cluster is re-pointed: the new server's answer decides", async () => {
  oldServer.faults.sar = "slow";
  oldServer.slowMs = 200;
  oldServer.sarAllowed = () => true;
  newServer.sarAllowed = () => false;
  let reviews!: SubjectAccessReviews;
  const f = fleet((id) => reviews.forgetCluster(id));
  reviews = new SubjectAccessReviews(f.clusters, { timeoutMs: 2_000, allowTtlMs: 5_000, denyTtlMs: 2_000, maxEntries: 100 });
  const inFlight = reviews.allowed(ID, USER, GET_SECRETS).catch(() => undefined);
  await until(() => oldServer.requests.some((r) => r.url.includes("/subjectaccessreviews")), 2_000, "the review to reach the old server");
  f.repoint();
  await inFlight;
  // The user's ServiceAccount may not get this secret on the API server cluster X now is.
  expect(await reviews.allowed(ID, USER, GET_SECRETS)).toBe(false);
  oldServer.faults.sar = "healthy";
});
