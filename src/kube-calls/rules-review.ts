/**
 * A SelfSubjectRulesReview made WITH a ServiceAccount's token (issue 17 §3, can-i): the API server
 * lists the rules of whoever presents the token, so the answer is that ServiceAccount's RBAC as the
 * cluster itself evaluates it. The call goes through the cluster's pool with the cluster's own
 * credential replaced by the token; a cluster reached with a client certificate is refused, since
 * the API server would authenticate the certificate (portcullis) instead of the token.
 */
import { AuthorizationV1Api, type RequestContext, type ResponseContext, Observable } from "#kubernetes-client";
import type { Clusters } from "../kube-fleet/clusters.ts";
import type { RuleSet } from "../kube-reading/rules-intersection.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";

/** The dependency name in errors and logs. */
const RULES_REVIEW_DEPENDENCY = "kube-selfsubjectrulesreview";

export interface RulesReviews {
  /** The rules of whoever `authorization` (`Bearer <token>`, as MintedToken carries it) presents has in `namespace` ("" for the cluster-wide ones only). */
  rules(clusterId: string, authorization: string, namespace: string): Promise<RuleSet & { readonly evaluationError: string }>;
}

export class SelfSubjectRulesReviews implements RulesReviews {
  readonly #clusters: Clusters;
  readonly #timeoutMs: number;

  constructor(clusters: Clusters, options: { readonly timeoutMs: number }) {
    this.#clusters = clusters;
    this.#timeoutMs = options.timeoutMs;
  }

  async rules(clusterId: string, authorization: string, namespace: string): Promise<RuleSet & { readonly evaluationError: string }> {
    const cluster = this.#clusters.get(clusterId);
    if (cluster === undefined) throw new DependencyUnavailable(RULES_REVIEW_DEPENDENCY, "cluster not configured");
    const user = cluster.kubeConfig.getCurrentUser();
    if (user?.certData !== undefined || user?.certFile !== undefined) {
      throw new DependencyUnavailable(RULES_REVIEW_DEPENDENCY, "the cluster is reached with a client certificate, which would outrank the ServiceAccount's token");
    }
    const api = cluster.kubeConfig.makeApiClient(AuthorizationV1Api);
    const review = await withDeadline(RULES_REVIEW_DEPENDENCY, this.#timeoutMs, (signal) => {
      const base = cluster.callOptions(signal);
      // After the cluster's credential has been applied (the request factory does that): present the token instead.
      const asToken = {
        pre: (context: RequestContext) => {
          context.setHeaderParam("Authorization", authorization);
          return new Observable(Promise.resolve(context));
        },
        post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
      };
      return api.createSelfSubjectRulesReview(
        { body: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectRulesReview", spec: { namespace } } },
        { ...base, middleware: [...(base.middleware ?? []), asToken], middlewareMergeStrategy: "append" },
      );
    }, { "portcullis.cluster_id": clusterId, "kube.namespace": namespace });
    const status = review.status;
    if (status === undefined) throw new DependencyUnavailable(RULES_REVIEW_DEPENDENCY, "SelfSubjectRulesReview answered without a status");
    return {
      resourceRules: status.resourceRules.map((r) => ({ verbs: r.verbs, apiGroups: r.apiGroups ?? [], resources: r.resources ?? [], resourceNames: r.resourceNames ?? [] })),
      nonResourceRules: status.nonResourceRules.map((r) => ({ verbs: r.verbs, nonResourceURLs: r.nonResourceURLs ?? [] })),
      incomplete: status.incomplete,
      evaluationError: status.evaluationError ?? "",
    };
  }
}
