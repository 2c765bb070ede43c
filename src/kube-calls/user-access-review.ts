/**
 * The user half of user ∩ plugin (FUN-17 §4): a SubjectAccessReview on the target cluster for the
 * user's per-user ServiceAccount. Answers are cached per full review (cluster, user, attributes)
 * with separate allow and deny TTLs; concurrent identical misses share one review; errors are
 * never cached. With the cluster's RBAC change feed (cluster-change-feeds.ts) an answer RBAC decided
 * (decidedByRbac) outlives those TTLs, up to the safety net, while the feed proves every RBAC change
 * applied, and an RBAC change drops the answers it can affect: its namespace's, or the cluster's
 * (rbac-changes.ts). A review the API server could not evaluate, and a denial from a server that is
 * not ready (api-server-readiness.ts), are errors: 503, never a cached user-sar-denied.
 */
import { hash } from "node:crypto";
import { AuthorizationV1Api, type V1SubjectAccessReview, type V1SubjectAccessReviewStatus } from "#kubernetes-client";
import { ApiServerReadiness } from "../kube-fleet/api-server-readiness.ts";
import { type Cluster, type Clusters, perCluster } from "../kube-fleet/clusters.ts";
import { serviceAccountSubject, userServiceAccount } from "../kube-reading/service-accounts.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import type { SpanAttributes } from "../tracing/spans.ts";
import type { AccessAttributes, UserAccessReview } from "../ports/policy-ports.ts";
import { CachedLookup } from "../cache/cached-lookup.ts";
import { KeyTags } from "../cache/key-tags.ts";
import type { ChangeFeed } from "../cache/freshness.ts";
import { RBAC_SOURCE, type RbacCause, type ReviewInvalidation } from "../kube-watch/rbac-changes.ts";

/** The dependency name in errors, logs and metrics. */
const SAR_DEPENDENCY = "kube-subjectaccessreview";
/** The cache's names: its hit/miss metric, the dependency and the question its errors name. */
const SAR_CACHE = { metric: "subject_access_review", dependency: SAR_DEPENDENCY, question: "SubjectAccessReview" } as const;

export interface UserAccessReviewOptions {
  readonly timeoutMs: number;
  readonly allowTtlMs: number;
  readonly denyTtlMs: number;
  readonly maxEntries: number;
  /** The clusters' RBAC change feed (ClusterChangeFeeds.rbac); without it answers live for their TTLs only. */
  readonly rbac?: {
    readonly feed: ChangeFeed;
    /** The longest an answer is kept while its cluster's feed proves it current (kube.sar.safetyNetTtlMs). */
    readonly safetyNetTtlMs: number;
    /** Whether RBAC's allows are extended too (kube.sar.extendRbacAllows; true when absent); its empty-reason denials always are. */
    readonly extendAllows?: boolean;
  };
}

/** What one cached review asks; the review itself is built only when it is sent. */
interface Review {
  readonly clusterId: string;
  readonly userId: string;
  readonly attributes: AccessAttributes;
}

export class SubjectAccessReviews implements UserAccessReview, ReviewInvalidation {
  readonly #cache: CachedLookup<boolean, Review, Cluster>;
  readonly #readiness: ApiServerReadiness;
  /** Each registration of a cluster keys its answers with its own tag (forgetCluster retires it). */
  readonly #clusterTags: KeyTags;

  constructor(clusters: Clusters, options: UserAccessReviewOptions) {
    this.#clusterTags = new KeyTags(options.maxEntries);
    const readiness = new ApiServerReadiness(clusters, { timeoutMs: options.timeoutMs });
    this.#readiness = readiness;
    // Looked up per review: the registry adds, replaces and removes clusters while this runs.
    const apiOf = perCluster((c) => c.kubeConfig.makeApiClient(AuthorizationV1Api));
    this.#cache = new CachedLookup({
      ...SAR_CACHE,
      maxEntries: options.maxEntries,
      ttlMs: options.allowTtlMs,
      // Answered by a server the cluster no longer is (re-pointed or removed meanwhile): never cached.
      source: { name: "cluster", current: (context: Review) => clusters.get(context.clusterId) },
      ...(options.rbac === undefined
        ? {}
        : { freshness: { feed: options.rbac.feed, scopeOf: (context: Review) => context.clusterId, safetyNetTtlMs: options.rbac.safetyNetTtlMs } }),
      ask: async (context: Review, cluster: Cluster) => {
        const body = reviewFor(context.userId, context.attributes);
        const review = await withDeadline(
          SAR_DEPENDENCY,
          options.timeoutMs,
          (signal) => apiOf(cluster).createSubjectAccessReview({ body }, cluster.callOptions(signal)),
          reviewSpanAttributes(context.clusterId, body),
        );
        const verdict = verdictOf(review.status);
        // Thrown, so never cached: the review did not reach a decision that can be trusted.
        if (verdict === "unevaluated") throw new DependencyUnavailable(SAR_DEPENDENCY, "the API server could not evaluate the review");
        if (verdict === "denied" && !(await readiness.ready(context.clusterId))) {
          throw new DependencyUnavailable(SAR_DEPENDENCY, "denied by an API server that is not ready");
        }
        const allowed = verdict === "allowed";
        // An authorizer ahead of RBAC may let a request through to RBAC today and deny it tomorrow:
        // where one can, RBAC's allows keep the short TTL.
        const feedCovers = decidedByRbac(review.status) && (!allowed || options.rbac?.extendAllows !== false);
        return { value: allowed, ttlMs: allowed ? options.allowTtlMs : options.denyTtlMs, feedCovers };
      },
    });
  }

  /** Not an async function: a hit is the cache's settled promise alone, not a second promise resolved with it. */
  allowed(clusterId: string, userId: string, attributes: AccessAttributes): Promise<boolean> {
    return this.#cache.lookup(reviewKey(this.#clusterTags.tagOf(clusterId), userId, attributes), { clusterId, userId, attributes });
  }

  /** A Role or RoleBinding of `namespace` changed: drops the cluster's answers about that namespace. */
  invalidateNamespace(clusterId: string, namespace: string, cause: RbacCause): void {
    this.#cache.invalidate(namespaceKeyPrefix(this.#clusterTags.tagOf(clusterId), namespace), RBAC_SOURCE, cause);
  }

  /** A ClusterRole or ClusterRoleBinding changed, or a list may hide changes: drops all of the cluster's answers. */
  invalidateCluster(clusterId: string, cause: RbacCause): void {
    // The first list names no change; one after a lost history ("relist") may hide a recent one.
    this.#cache.invalidate(clusterKeyPrefix(this.#clusterTags.tagOf(clusterId)), RBAC_SOURCE, cause, cause === "list" ? "resync" : "change");
  }

  /**
   * Drops every answer about a cluster that was replaced or removed: none was given by the API
   * server and credential now registered under its id. A review in flight to it is not cached when
   * it returns (the fetch checks its cluster is still the one registered), and the cluster's next
   * registration keys its answers with a new tag.
   */
  forgetCluster(clusterId: string): void {
    const tag = this.#clusterTags.retire(clusterId);
    if (tag !== undefined) this.#cache.forget(clusterKeyPrefix(tag));
    this.#readiness.forgetCluster(clusterId);
  }
}

/**
 * What a review's status decides. An `evaluationError` means an authorizer failed while deciding
 * (a webhook down, a rule that could not be resolved): whatever `allowed` says, it is no answer.
 */
export function verdictOf(status: V1SubjectAccessReviewStatus | undefined): "allowed" | "denied" | "unevaluated" {
  if (status === undefined || typeof status.allowed !== "boolean") return "unevaluated";
  if (status.evaluationError !== undefined && status.evaluationError !== "") return "unevaluated";
  return status.allowed && status.denied !== true ? "allowed" : "denied";
}

/** How kube-apiserver's RBAC authorizer words an allow (plugin/pkg/auth/authorizer/rbac/rbac.go, authorizingVisitor.visit). */
const RBAC_ALLOW = /^RBAC: allowed by (ClusterRoleBinding|RoleBinding) "/;

/**
 * Whether the RBAC authorizer decided the review, so that the RBAC change feed's proof may extend
 * it. An authorizer chain ends at the first authorizer with an opinion, and the review carries that
 * one's reason unchanged (apiserver's union authorizer): an RBAC allow reads `RBAC: allowed by
 * RoleBinding "name/namespace" of …` or `… ClusterRoleBinding "name" of …`. A webhook (a managed
 * cluster's IAM, OPA, Cedar), Node or ABAC decides by what no RBAC event reports: their allows keep
 * the short TTL. A denial is every authorizer's lack of opinion (RBAC gives no reason; the chain
 * joins the others' as "name: reason"), or a webhook's explicit `denied`. An empty-reason denial, the
 * RBAC-only chain's, is extended: were a silent webhook to grant it later, the user would wait up to
 * the safety net for it — a question of liveness, never of a wider allow. A denial with a reason
 * (another authorizer's, or RBAC's rule-resolution errors) or an explicit one keeps the short TTL.
 * An authorizer ahead of RBAC in the chain (a webhook put first) that comes to deny what it let
 * through to RBAC is not told apart by any review: kube.sar.extendRbacAllows false keeps RBAC's
 * allows on the short TTL for such a chain (a denial's extension only delays an allow).
 */
export function decidedByRbac(status: V1SubjectAccessReviewStatus | undefined): boolean {
  if (status?.allowed === true) return RBAC_ALLOW.test(status.reason ?? "");
  return status?.denied !== true && (status?.reason ?? "") === "";
}

/**
 * The cache key of one review: the cluster's tag (KeyTags: one registration of the cluster), the
 * namespace it asks about ("" for a cluster-scoped or non-resource request), then the SHA-256 of
 * what the review's spec is made from (reviewFor: the user and every attribute, in a fixed order),
 * so a hit builds no review. Equal keys are equal specs. The attributes carry what the URL named,
 * which a caller shapes; hashed, they are 32 characters, one per byte of the digest ("binary", i.e. Latin-1: 32
 * bytes of heap, base64url took 43). All 256 bits are kept: a caller chooses both of two requests'
 * attributes, so what guards one answer standing for another request is SHA-256's collision
 * resistance, ~2^128 work in full and only ~2^64 for a digest cut to 128 bits. The tag and the
 * namespace come first in the clear so that a replaced or removed cluster's answers, and those an
 * RBAC change in one namespace can affect, can be found and dropped by prefix (clusterKeyPrefix,
 * namespaceKeyPrefix): the tag holds no "/", and the digest, which may, comes after the namespace's
 * closing "/". A namespace the API server would refuse (one holding "/") at worst widens what
 * another namespace's prefix drops.
 */
export function reviewKey(clusterTag: string, userId: string, a: AccessAttributes): string {
  const asked =
    a.kind === "resource" ? [userId, a.verb, a.group, a.version, a.resource, a.subresource, a.namespace, a.name] : [userId, a.verb, a.path];
  const namespace = a.kind === "resource" ? a.namespace : "";
  return `${namespaceKeyPrefix(clusterTag, namespace)}${hash("sha256", JSON.stringify(asked), "binary")}`;
}

/** What the keys of every review of the cluster (of its tag) start with. */
export function clusterKeyPrefix(clusterTag: string): string {
  return `${clusterTag}/`;
}

/** What the keys of the cluster's reviews about `namespace` start with ("" for cluster-scoped and non-resource ones). */
function namespaceKeyPrefix(clusterTag: string, namespace: string): string {
  return `${clusterTag}/${namespace}/`;
}

/** The SubjectAccessReview the API server would evaluate for the user's ServiceAccount making this request. */
/** What a trace shows of a review: the cluster and the request it asks about (the user is in the Check's own trace). */
function reviewSpanAttributes(clusterId: string, body: V1SubjectAccessReview): SpanAttributes {
  const resource = body.spec.resourceAttributes;
  const nonResource = body.spec.nonResourceAttributes;
  return {
    "portcullis.cluster_id": clusterId,
    "kube.sar.verb": resource?.verb ?? nonResource?.verb ?? "",
    ...(resource === undefined
      ? { "kube.sar.path": nonResource?.path ?? "" }
      : {
          "kube.sar.resource": [resource.resource, resource.subresource].filter((p) => p !== undefined && p !== "").join("/"),
          "kube.sar.group": resource.group ?? "",
          "kube.sar.namespace": resource.namespace ?? "",
        }),
  };
}

export function reviewFor(userId: string, attributes: AccessAttributes): V1SubjectAccessReview {
  const subject = serviceAccountSubject(userServiceAccount(userId));
  const spec: V1SubjectAccessReview["spec"] =
    attributes.kind === "resource"
      ? {
          user: subject.user,
          groups: subject.groups,
          resourceAttributes: {
            verb: attributes.verb,
            group: attributes.group,
            version: attributes.version,
            resource: attributes.resource,
            subresource: attributes.subresource,
            namespace: attributes.namespace,
            name: attributes.name,
          },
        }
      : { user: subject.user, groups: subject.groups, nonResourceAttributes: { verb: attributes.verb, path: attributes.path } };
  return { apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", spec };
}
