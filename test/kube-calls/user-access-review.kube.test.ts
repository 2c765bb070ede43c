/**
 * Which SubjectAccessReview answers the RBAC change feed may extend (decidedByRbac), read off a real
 * kube-apiserver whose authorizer chain is RBAC then a webhook (a local HTTP server answering
 * authorization.k8s.io/v1 reviews, as a managed cluster's IAM or an OPA/Cedar webhook would): an
 * allow by a RoleBinding, by a ClusterRoleBinding, a denial no authorizer explains, the webhook's
 * allow, its explicit denial and its no-opinion with a reason. Then the cache: with a feed that
 * proves RBAC unchanged, RBAC's answers outlive their TTL and every other one is asked again. Last,
 * a chain with the webhook ahead of RBAC (Webhook,RBAC): a webhook that left a request to RBAC and
 * turns to deny it is seen past allowTtlMs only with kube.sar.extendRbacAllows false.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AccessAttributes } from "../../src/ports/policy-ports.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { decidedByRbac, reviewFor, SubjectAccessReviews } from "../../src/kube-calls/user-access-review.ts";
import { type CacheLookup, cacheLookups } from "../../src/metrics/events.ts";
import { type KubeApiserver, rawRequest, startKubeApiserver } from "../harness/index.ts";

const RBAC = "/apis/rbac.authorization.k8s.io/v1";
const USER = "u1";
const SUBJECT = { kind: "ServiceAccount", name: `fundament-${USER}`, namespace: "fundament-system" };
const ask = (namespace: string, resource: string, verb = "get"): AccessAttributes => ({ kind: "resource", verb, group: "", version: "v1", resource, subresource: "", namespace, name: "" });

/** Namespaces the webhook denies explicitly from now on (the Webhook,RBAC chain's case). */
const frozenLater = new Set<string>();

/** The webhook's policy: what RBAC does not grant, it may. */
function webhookAnswer(attributes: { namespace?: string; resource?: string } | undefined): Record<string, unknown> {
  if (frozenLater.has(attributes?.namespace ?? "")) return { allowed: false, denied: true, reason: "frozen since" };
  if (attributes?.namespace === "team-w" && attributes.resource === "pods") return { allowed: true, reason: "granted by the platform's IAM" };
  if (attributes?.namespace === "team-x") return { allowed: false, denied: true, reason: "team-x is frozen" };
  if (attributes?.namespace === "team-r") return { allowed: false, reason: "no policy for team-r" };
  return { allowed: false };
}

const CASES = [
  { name: "an allow by a RoleBinding", attributes: ask("team-a", "pods"), allowed: true, reason: /^RBAC: allowed by RoleBinding "read-pods\/team-a" of ClusterRole "pod-reader" to ServiceAccount "fundament-u1\/fundament-system"$/, rbac: true },
  { name: "an allow by a ClusterRoleBinding", attributes: ask("", "nodes", "list"), allowed: true, reason: /^RBAC: allowed by ClusterRoleBinding "list-nodes" of ClusterRole "node-lister" to ServiceAccount "fundament-u1\/fundament-system"$/, rbac: true },
  { name: "a denial no authorizer explains", attributes: ask("team-b", "pods"), allowed: false, reason: /^$/, rbac: true },
  { name: "the webhook's allow", attributes: ask("team-w", "pods"), allowed: true, reason: /^granted by the platform's IAM$/, rbac: false },
  { name: "the webhook's explicit denial", attributes: ask("team-x", "pods"), allowed: false, reason: /^team-x is frozen$/, rbac: false },
  { name: "the webhook's no-opinion with a reason", attributes: ask("team-r", "pods"), allowed: false, reason: /no policy for team-r/, rbac: false },
];

/** The webhook authorizer's flags, after `--authorization-mode=Webhook`. */
const webhookArgs = () => [
  "--authorization-mode=Webhook",
  `--authorization-webhook-config-file=${webhookKubeconfig}`,
  "--authorization-webhook-version=v1",
  // The webhook's answers are not cached by kube-apiserver: each review reaches it.
  "--authorization-webhook-cache-authorized-ttl=0s",
  "--authorization-webhook-cache-unauthorized-ttl=0s",
];

let api: KubeApiserver;
let webhook: Server;
let dir: string;
const webhookAsked: string[] = [];
let webhookKubeconfig: string;

async function apply(method: string, path: string, body?: unknown, server: KubeApiserver = api): Promise<void> {
  const { status, json } = await rawRequest(server, method, path, body);
  if (status >= 300) throw new Error(`${method} ${path}: ${status} ${JSON.stringify(json)}`);
}

/** The namespaces and RBAC grants every case asks about. */
async function seed(server: KubeApiserver): Promise<void> {
  for (const name of ["fundament-system", "team-a", "team-b", "team-w", "team-x", "team-r"]) await apply("POST", "/api/v1/namespaces", { metadata: { name } }, server);
  await apply("POST", `${RBAC}/clusterroles`, { metadata: { name: "pod-reader" }, rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] }] }, server);
  await apply("POST", `${RBAC}/clusterroles`, { metadata: { name: "node-lister" }, rules: [{ apiGroups: [""], resources: ["nodes"], verbs: ["list"] }] }, server);
  const roleRef = (name: string) => ({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name });
  await apply("POST", `${RBAC}/namespaces/team-a/rolebindings`, { metadata: { name: "read-pods", namespace: "team-a" }, roleRef: roleRef("pod-reader"), subjects: [SUBJECT] }, server);
  await apply("POST", `${RBAC}/clusterrolebindings`, { metadata: { name: "list-nodes" }, roleRef: roleRef("node-lister"), subjects: [SUBJECT] }, server);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sar-authorizers-"));
  webhook = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const review = JSON.parse(body) as { spec: { user?: string; resourceAttributes?: { namespace?: string; resource?: string } } };
      // Only the reviews about our user: kube-apiserver's own requests pass through the chain too.
      const ours = review.spec.user === `system:serviceaccount:fundament-system:fundament-${USER}`;
      if (ours) webhookAsked.push(`${review.spec.resourceAttributes?.namespace}/${review.spec.resourceAttributes?.resource}`);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", status: ours ? webhookAnswer(review.spec.resourceAttributes) : { allowed: false } }));
    });
  });
  await new Promise<void>((r) => webhook.listen(0, "127.0.0.1", r));
  const port = (webhook.address() as { port: number }).port;
  webhookKubeconfig = join(dir, "webhook.kubeconfig");
  writeFileSync(
    webhookKubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "w", cluster: { server: `http://127.0.0.1:${port}/authorize` } }],
      users: [{ name: "w", user: {} }],
      contexts: [{ name: "w", context: { cluster: "w", user: "w" } }],
      "current-context": "w",
    }),
  );
  // Appended to the harness's RBAC: the chain is RBAC, then the webhook.
  api = await startKubeApiserver({ extraArgs: webhookArgs() });
  await seed(api);
}, 120_000);

afterAll(async () => {
  await api?.stop();
  await new Promise((r) => webhook?.close(r));
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("kube-apiserver's reviews, read by decidedByRbac", () => {
  it.each(CASES)("$name", async ({ attributes, allowed, reason, rbac }) => {
    const { status, json } = await rawRequest(api, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", reviewFor(USER, attributes));
    expect(status).toBe(201);
    const review = (json as { status: { allowed: boolean; denied?: boolean; reason?: string; evaluationError?: string } }).status;
    expect(review.allowed).toBe(allowed);
    expect(review.evaluationError ?? "").toBe("");
    expect(review.reason ?? "").toMatch(reason);
    expect(decidedByRbac(review)).toBe(rbac);
  });
});

describe("the cache: only RBAC's answers outlive their TTL on the feed's proof", () => {
  const TTL_MS = 300;
  let clusters: Clusters;
  let reviews: SubjectAccessReviews;
  const lookups: string[] = [];
  const onLookup = (m: unknown) => {
    if ((m as CacheLookup).cache === "subject_access_review") lookups.push((m as CacheLookup).outcome);
  };

  beforeAll(async () => {
    clusters = await Clusters.load([{ id: "c", kubeconfig: api.kubeconfigPath }]);
    // A feed that proves RBAC unchanged up to now, always: what the RBAC change feed says of a quiet cluster.
    const feed = { provenUntil: () => performance.now() };
    reviews = new SubjectAccessReviews(clusters, { timeoutMs: 5_000, allowTtlMs: TTL_MS, denyTtlMs: TTL_MS, maxEntries: 100, rbac: { feed, safetyNetTtlMs: 60_000 } });
    cacheLookups.subscribe(onLookup);
  });
  afterAll(async () => {
    cacheLookups.unsubscribe(onLookup);
    await clusters?.close();
  });

  it.each(CASES)("$name", async ({ attributes, allowed, rbac }) => {
    expect(await reviews.allowed("c", USER, attributes)).toBe(allowed);
    await sleep(TTL_MS * 2);
    const from = lookups.length;
    const webhookFrom = webhookAsked.length;
    expect(await reviews.allowed("c", USER, attributes)).toBe(allowed);
    expect(lookups.slice(from)).toEqual([rbac ? "hit" : "stale"]);
    // Asked again, the review reached the webhook again (RBAC allowed none of them); a hit asked nobody.
    expect(webhookAsked.length - webhookFrom).toBe(rbac ? 0 : 1);
  });
});

describe("a webhook ahead of RBAC (Webhook,RBAC) that turns to deny what it left to RBAC", () => {
  const TTL_MS = 300;
  let front: KubeApiserver;
  let clusters: Clusters;
  // A feed that proves RBAC unchanged up to now, always: the webhook's change is no RBAC event.
  const feed = { provenUntil: () => performance.now() };
  const reviewsWith = (extendAllows: boolean) =>
    new SubjectAccessReviews(clusters, { timeoutMs: 5_000, allowTtlMs: TTL_MS, denyTtlMs: TTL_MS, maxEntries: 100, rbac: { feed, safetyNetTtlMs: 60_000, extendAllows } });

  beforeAll(async () => {
    front = await startKubeApiserver({ authorizationMode: "Webhook,RBAC", extraArgs: webhookArgs().slice(1) });
    await seed(front);
    clusters = await Clusters.load([{ id: "c", kubeconfig: front.kubeconfigPath }]);
  }, 120_000);
  afterAll(async () => {
    frozenLater.clear();
    await clusters?.close();
    await front?.stop();
  });

  it.each([
    { extendAllows: false, afterTtl: false },
    // The default: RBAC's allow is served on the feed's proof, the webhook's denial unseen.
    { extendAllows: true, afterTtl: true },
  ])("extendRbacAllows $extendAllows: the cached allow after allowTtlMs is $afterTtl", async ({ extendAllows, afterTtl }) => {
    frozenLater.clear();
    const reviews = reviewsWith(extendAllows);
    const { json } = await rawRequest(front, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", reviewFor(USER, ask("team-a", "pods")));
    expect((json as { status: { reason?: string } }).status.reason).toMatch(/^RBAC: allowed by RoleBinding "read-pods\/team-a"/);
    expect(await reviews.allowed("c", USER, ask("team-a", "pods"))).toBe(true);
    frozenLater.add("team-a");
    await sleep(TTL_MS * 2);
    expect(await reviews.allowed("c", USER, ask("team-a", "pods"))).toBe(afterTtl);
  });

  it("extendRbacAllows false still extends RBAC's denial no authorizer explains", async () => {
    frozenLater.clear();
    const reviews = reviewsWith(false);
    const from = webhookAsked.length;
    expect(await reviews.allowed("c", USER, ask("team-b", "pods"))).toBe(false);
    await sleep(TTL_MS * 2);
    expect(await reviews.allowed("c", USER, ask("team-b", "pods"))).toBe(false);
    // Asked once: the second answer was the cache's.
    expect(webhookAsked.length - from).toBe(1);
  });
});
