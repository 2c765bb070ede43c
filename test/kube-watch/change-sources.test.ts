/**
 * What each change does to the caches (src/kube-watch/rbac-changes.ts, service-account-changes.ts), and
 * the per-cluster lifecycle that combines the feeds (cluster-change-feeds.ts), with fakes.
 */
import type { KubernetesObject } from "#kubernetes-client";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ClusterChangeFeeds } from "../../src/kube-watch/cluster-change-feeds.ts";
import { quorumReadSelector, WATCH_TIMEOUT_SECONDS, type WatchConnect } from "../../src/kube-watch/change-feed-watch.ts";
import type { Cluster } from "../../src/kube-fleet/clusters.ts";
import { RBAC_KINDS, rbacHandlers, type ReviewInvalidation } from "../../src/kube-watch/rbac-changes.ts";
import { serviceAccountHandlers, type TokenInvalidation } from "../../src/kube-watch/service-account-changes.ts";

function recordingReviews(): ReviewInvalidation & { dropped: string[] } {
  const dropped: string[] = [];
  return {
    dropped,
    invalidateNamespace: (clusterId, namespace, cause) => dropped.push(`${clusterId}/${namespace}/ (${cause})`),
    invalidateCluster: (clusterId, cause) => dropped.push(`${clusterId}/ (${cause})`),
  };
}

const obj = (namespace: string | undefined, name: string, uid = `uid-${name}`): KubernetesObject => ({ metadata: { namespace, name, uid, resourceVersion: "1" } });
const kind = (plural: string) => RBAC_KINDS.find((k) => k.plural === plural)!;

describe("RBAC changes", () => {
  it.each([
    { name: "a Role of team-a", plural: "roles", type: "MODIFIED", object: obj("team-a", "r"), dropped: ["c/team-a/ (role)"] },
    { name: "a RoleBinding of team-a deleted", plural: "rolebindings", type: "DELETED", object: obj("team-a", "rb"), dropped: ["c/team-a/ (rolebinding)"] },
    { name: "a RoleBinding added", plural: "rolebindings", type: "ADDED", object: obj("team-b", "rb"), dropped: ["c/team-b/ (rolebinding)"] },
    { name: "a ClusterRole narrowed", plural: "clusterroles", type: "MODIFIED", object: obj(undefined, "plugin-x"), dropped: ["c/ (clusterrole)"] },
    { name: "a ClusterRoleBinding removed", plural: "clusterrolebindings", type: "DELETED", object: obj(undefined, "crb"), dropped: ["c/ (clusterrolebinding)"] },
    { name: "a Role without a namespace (no such thing): the cluster's", plural: "roles", type: "ADDED", object: obj(undefined, "r"), dropped: ["c/ (role)"] },
  ] as const)("$name drops $dropped", ({ plural, type, object, dropped }) => {
    const reviews = recordingReviews();
    rbacHandlers("c", kind(plural), () => reviews).changed(type, object);
    expect(reviews.dropped).toEqual(dropped);
  });

  it.each(RBAC_KINDS.map((k) => k.plural))("a list of %s drops the cluster's answers: the first as 'list', later ones as 'relist'", (plural) => {
    const reviews = recordingReviews();
    const handlers = rbacHandlers("c", kind(plural), () => reviews);
    handlers.listed([obj("a", "x")], false);
    handlers.listed([obj("a", "x")], true);
    expect(reviews.dropped).toEqual(["c/ (list)", "c/ (relist)"]);
  });
});

describe("ServiceAccount changes", () => {
  function followed(initial: KubernetesObject[]) {
    const dropped: string[] = [];
    const tokens: TokenInvalidation = { invalidateServiceAccount: (c, ns, name, cause) => dropped.push(`${c}/${ns}/${name} (${cause})`) };
    const handlers = serviceAccountHandlers("c", () => tokens);
    handlers.listed(initial, false);
    return { handlers, dropped };
  }
  const user = (uid: string) => obj("fundament-system", "fundament-u1", uid);
  const plugin = (uid: string) => obj("plugin-x", "plugin-x", uid);

  it("the first list drops nothing", () => {
    expect(followed([user("1"), plugin("2")]).dropped).toEqual([]);
  });

  it.each([
    { name: "a user's account deleted", type: "DELETED", object: user("1"), dropped: ["c/fundament-system/fundament-u1 (serviceaccount-deleted)"] },
    { name: "a plugin's account re-created (new uid)", type: "ADDED", object: plugin("9"), dropped: ["c/plugin-x/plugin-x (serviceaccount-added)"] },
    { name: "an account appearing (a cached 'missing' goes)", type: "ADDED", object: obj("plugin-y", "plugin-y", "5"), dropped: ["c/plugin-y/plugin-y (serviceaccount-added)"] },
    { name: "an account modified, same uid", type: "MODIFIED", object: user("1"), dropped: [] },
    { name: "an ADDED repeating the known uid", type: "ADDED", object: user("1"), dropped: [] },
    { name: "a MODIFIED with another uid (a delete missed): dropped all the same", type: "MODIFIED", object: user("7"), dropped: ["c/fundament-system/fundament-u1 (serviceaccount-added)"] },
    { name: "another namespace's account deleted: no token of it is cached", type: "DELETED", object: obj("kube-system", "default"), dropped: [] },
    { name: "a namespace merely starting with 'plugin' is not a plugin's", type: "DELETED", object: obj("pluginx", "a"), dropped: [] },
  ] as const)("$name", ({ type, object, dropped }) => {
    const f = followed([user("1"), plugin("2")]);
    f.handlers.changed(type, object);
    expect(f.dropped).toEqual(dropped);
  });

  it("a deleted then re-created account is dropped at each step", () => {
    const f = followed([user("1")]);
    f.handlers.changed("DELETED", user("1"));
    f.handlers.changed("ADDED", user("2"));
    expect(f.dropped).toEqual(["c/fundament-system/fundament-u1 (serviceaccount-deleted)", "c/fundament-system/fundament-u1 (serviceaccount-added)"]);
  });

  it("a relist after an outage drops the accounts whose uid changed, vanished or appeared, and no other", () => {
    const f = followed([user("1"), plugin("2"), obj("plugin-gone", "plugin-gone", "3"), obj("default", "default", "4")]);
    f.handlers.listed([user("1"), plugin("20"), obj("plugin-new", "plugin-new", "5"), obj("default", "default", "40")], true);
    expect(f.dropped.sort()).toEqual(["c/plugin-gone/plugin-gone (relist)", "c/plugin-new/plugin-new (relist)", "c/plugin-x/plugin-x (relist)"]);
  });
});

describe("ClusterChangeFeeds", () => {
  /** Feeds on fake clusters whose watches the test ends; lists answer at once, except for the plurals in `forbidden`. */
  function fleet(forbidden: string[] = []) {
    let now = 10_000;
    const open: Array<{ path: string; bookmark: (resourceVersion: string) => void; end: (err: unknown) => void }> = [];
    /** Each list's field selector, by plural: a quorum read's, or none for a full list. */
    const lists: string[] = [];
    const reviews = recordingReviews();
    const tokens: TokenInvalidation = { invalidateServiceAccount: () => {} };
    const warnings: unknown[] = [];
    const connect: WatchConnect = async (path, _params, callback, done) => {
      const controller = new AbortController();
      let ended = false;
      const end = (err: unknown) => {
        if (!ended) (ended = true), done(err);
      };
      open.push({ path, end, bookmark: (resourceVersion) => callback("BOOKMARK", { metadata: { resourceVersion } }, {}) });
      controller.signal.addEventListener("abort", () => end(new DOMException("aborted", "AbortError")));
      return controller;
    };
    const feeds = new ClusterChangeFeeds({
      logger: pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line)) }),
      targets: () => ({ reviews, tokens }),
      now: () => now,
      initialBackoffMs: 5,
      maxBackoffMs: 5,
      connect: () => connect,
    });
    const cluster = (id: string): Cluster => {
      const list = (plural: string, fieldSelector?: string) => async () => {
        lists.push(`${plural} ${fieldSelector ?? "all"}`);
        if (forbidden.includes(plural)) throw Object.assign(new Error("HTTP-Code: 403"), { code: 403, body: "{}", headers: {} });
        // A quorum read finds etcd one revision on: something else was written since the list.
        return { metadata: { resourceVersion: fieldSelector === undefined ? "7" : "8" }, items: [] };
      };
      // The feeds make their listers from the cluster's kubeConfig: a fake API client per class.
      const kubeConfig = {
        makeApiClient: () => ({
          listClusterCustomObject: ({ plural, fieldSelector }: { plural: string; fieldSelector?: string }) => list(plural, fieldSelector)(),
          listServiceAccountForAllNamespaces: ({ fieldSelector }: { fieldSelector?: string }) => list("serviceaccounts", fieldSelector)(),
        }),
      };
      return { id, kubeConfig, callOptions: () => ({}) } as unknown as Cluster;
    };
    const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
    return { feeds, open, lists, reviews, warnings, cluster, settle, advance: (ms: number) => (now += ms), now: () => now };
  }

  it("a cluster is proven up to the least of its four RBAC watches, and not at all until each has listed", async () => {
    const f = fleet();
    expect(f.feeds.rbac.provenUntil("c")).toBeUndefined();
    f.feeds.add(f.cluster("c"));
    await f.settle();
    const listedAt = f.now();
    expect(f.feeds.rbac.provenUntil("c")).toBe(listedAt);
    expect(f.open.map((w) => w.path).sort()).toEqual([
      "/api/v1/serviceaccounts",
      "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
      "/apis/rbac.authorization.k8s.io/v1/clusterroles",
      "/apis/rbac.authorization.k8s.io/v1/rolebindings",
      "/apis/rbac.authorization.k8s.io/v1/roles",
    ]);
    // Each feed made a quorum read of one key before its watch: namespaced kinds name a namespace too.
    expect([...f.lists].sort()).toEqual(
      [
        ...["clusterrolebindings", "clusterroles", "rolebindings", "roles", "serviceaccounts"].map((plural) => `${plural} all`),
        ...["clusterrolebindings", "clusterroles"].map((plural) => `${plural} ${quorumReadSelector(false)}`),
        ...["rolebindings", "roles", "serviceaccounts"].map((plural) => `${plural} ${quorumReadSelector(true)}`),
      ].sort(),
    );
    // Every watch ends cleanly at its timeout, which proves nothing; the next cycle reads again.
    const T_MS = WATCH_TIMEOUT_SECONDS * 1_000;
    f.advance(T_MS);
    for (const w of [...f.open]) w.end(null);
    await f.settle();
    const second = f.open.slice(5);
    expect(second).toHaveLength(5);
    expect(f.feeds.rbac.provenUntil("c")).toBe(listedAt);
    // Three of the four RBAC watches deliver a bookmark at their read's version: the cluster stays proven at the fourth's.
    f.advance(1_000);
    for (const w of second.filter((w) => !w.path.endsWith("/roles"))) w.bookmark("8");
    expect(f.feeds.rbac.provenUntil("c")).toBe(listedAt);
    second.find((w) => w.path.endsWith("/roles"))!.bookmark("8");
    expect(f.feeds.rbac.provenUntil("c")).toBe(listedAt + T_MS);
    // Each first list dropped the cluster's answers once.
    expect(f.reviews.dropped).toEqual(["c/ (list)", "c/ (list)", "c/ (list)", "c/ (list)"]);
    expect(f.feeds.describe()).toEqual([
      { source: "kube-rbac", scope: "c", synced: true, lagSeconds: 1 },
      { source: "kube-serviceaccounts", scope: "c", synced: true, lagSeconds: 1 },
    ]);
    f.feeds.remove("c");
    expect(f.feeds.rbac.provenUntil("c")).toBeUndefined();
    expect(f.feeds.describe()).toEqual([]);
    await f.feeds.stop();
  });

  it("a credential that cannot watch ClusterRoles keeps that cluster unproven, says why, logs once, and leaves the others proven", async () => {
    const f = fleet(["clusterroles"]);
    f.feeds.add(f.cluster("denied"));
    await f.settle();
    await f.settle();
    expect(f.feeds.rbac.provenUntil("denied")).toBeUndefined();
    expect(f.feeds.describe()).toEqual([
      { source: "kube-rbac", scope: "denied", synced: false, detail: "forbidden: the credential cannot list clusterroles" },
      { source: "kube-serviceaccounts", scope: "denied", synced: true, lagSeconds: 0 },
    ]);
    expect(f.warnings).toEqual([expect.objectContaining({ cluster_id: "denied", source: "kube-rbac", detail: "forbidden: the credential cannot list clusterroles" })]);
    await f.feeds.stop();
  });

  it("add() of a registered id replaces its feeds: the new cluster's must list before it is proven", async () => {
    const f = fleet();
    f.feeds.add(f.cluster("c"));
    await f.settle();
    expect(f.feeds.rbac.provenUntil("c")).toBeDefined();
    f.feeds.add(f.cluster("c"));
    expect(f.feeds.rbac.provenUntil("c")).toBeUndefined();
    await f.settle();
    expect(f.feeds.rbac.provenUntil("c")).toBe(f.now());
    await f.feeds.stop();
  });
});
