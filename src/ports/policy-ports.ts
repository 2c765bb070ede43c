/**
 * What the policies ask of the outside world. Each port is implemented over a real system
 * (OpenFGA, kube-apiserver, an informer) with its own cache and deadline, and by fakes in tests.
 * A port that cannot answer throws DependencyUnavailable; it never guesses. Below both authz, which
 * calls them, and the folders that implement them (fga, kube-*), so neither imports the other.
 */
import type { SafeHeaderValue } from "../headers/mutations.ts";

/** OpenFGA Check(user:<userId>, can_view, cluster:<clusterId>). */
export interface ClusterViewCheck {
  canView(userId: string, clusterId: string): Promise<boolean>;
}

/** The attributes of one SubjectAccessReview (authorization.k8s.io/v1 SubjectAccessReviewSpec, less the subject). */
export type AccessAttributes =
  | {
      readonly kind: "resource";
      readonly verb: string;
      readonly group: string;
      readonly version: string;
      readonly resource: string;
      readonly subresource: string;
      readonly namespace: string;
      readonly name: string;
    }
  | { readonly kind: "non-resource"; readonly verb: string; readonly path: string };

/** A SubjectAccessReview on one cluster for a user's per-user ServiceAccount. */
export interface UserAccessReview {
  allowed(clusterId: string, userId: string, attributes: AccessAttributes): Promise<boolean>;
}

/** TokenRequest for a ServiceAccount; `undefined` when the ServiceAccount does not exist. */
export interface ServiceAccountTokens {
  /**
   * `ownerUid` is the uid of the object the ServiceAccount belongs to (the plugin installation):
   * a reinstall under the same name is a new owner, whose new ServiceAccount is asked afresh
   * instead of being served the deleted one's token.
   *
   * The token is a safe header value, checked once when it was cached, not per response.
   */
  token(clusterId: string, namespace: string, name: string, ownerUid?: string): Promise<MintedToken | undefined>;
}

/** A ServiceAccount token, as the Authorization value that carries it, and the Envoy cluster of the API server that issued it (the only one it is valid at). */
export interface MintedToken {
  /**
   * `Bearer <token>`, built once when the token is cached: every response that injects it sends this
   * same string. One built per check was a new 1 KB string, copied again into each response.
   */
  readonly authorization: SafeHeaderValue;
  /** From the very cluster object the TokenRequest went through, never looked up again: a re-point cannot swap it. */
  readonly envoyCluster: string;
}

/** What the gateway needs to know of a PluginInstallation (plugins.fundament.io/v1). */
export interface Installation {
  readonly uid: string;
  readonly name: string;
  readonly pluginName: string;
  readonly pluginVersion: string;
  /** `spec.definitionRef.definitionHash`: empty, `sha256:unknown`, or `sha256:<hex>`. */
  readonly definitionHash: string;
  readonly phase: string;
  readonly terminating: boolean;
  readonly organizationId: string;
}

/** The PluginInstallation index of each cluster, fed by a watch. */
export interface InstallationLookup {
  /** Throws DependencyUnavailable while the cluster's index has not synced. */
  byUid(clusterId: string, uid: string): Installation | undefined;
  /** By metadata.name, for `can-i` (no policy asks by name); absent in fakes that never need it. */
  byName?(clusterId: string, name: string): Installation | undefined;
}

/** The clusters portcullis has credentials for. */
export interface KnownClusters {
  has(clusterId: string): boolean;
  /**
   * Where Envoy reaches a registered cluster's Services (its Secret's `service-domain`), for
   * plugin-proxy's shared route; undefined for a static cluster (routed by its own Envoy routes) and
   * for one whose Secret names none. Absent in fakes: no cluster has one.
   */
  serviceDomainOf?(clusterId: string): string | undefined;
}
