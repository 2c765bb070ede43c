/**
 * What the konfidence-api policy asks of the outside world: the Project index and the two kinds of
 * token verification. Implemented over a Kubernetes watch and OIDC providers (each cached, with
 * deadlines) and by fakes in tests. A port that cannot answer throws DependencyUnavailable.
 */
import type { RoleBindings } from "../konfidence-model/role-bindings.ts";

/** A Project (konfidence.cloud/v1alpha1), as compiled when it arrived. */
export interface CompiledProject {
  /** metadata.name: the `{projectId}` of the API's URLs. */
  readonly name: string;
  readonly bindings: RoleBindings;
}

export interface ProjectLookup {
  /** Throws DependencyUnavailable while the index has not synced. */
  byName(name: string): CompiledProject | undefined;
  /**
   * Whether a valid jwks subject of any Project names this provider (normalized discovery URL).
   * Only such providers are ever contacted for a workload token: a token's `iss` alone never makes
   * portcullis fetch anything. Throws DependencyUnavailable while the index has not synced.
   */
  namesProvider(endpoint: string): boolean;
  /**
   * Whether a valid jwks subject of any Project names this provider together with one of these
   * audiences: a token minted for another service is no Konfidence identity, even where no role is
   * needed. Throws DependencyUnavailable while the index has not synced.
   */
  namesAudience(endpoint: string, audiences: readonly string[]): boolean;
}

/** A token whose signature, issuer and lifetime one OIDC provider vouched for. */
export interface VerifiedToken {
  /** The `iss` the provider's discovery document names, which the token carries. */
  readonly issuer: string;
  readonly sub: string;
  readonly audiences: readonly string[];
  /** Every claim of the payload, for claim globs. */
  readonly claims: Readonly<Record<string, unknown>>;
}

export type TokenVerification = { readonly ok: true; readonly token: VerifiedToken } | { readonly ok: false; readonly detail: string };

/** Workload tokens: verified against the provider behind a discovery endpoint, at most once per token and provider while cached. */
export interface WorkloadTokens {
  verify(endpoint: string, token: string): Promise<TokenVerification>;
}

export type SessionVerification =
  | { readonly ok: true; readonly issuer: string; readonly sub: string; readonly groups: ReadonlySet<string> }
  | { readonly ok: false; readonly detail: string };

/** Interactive users' session credentials, from the platform's single OIDC provider. */
export interface SessionTokens {
  verify(token: string): Promise<SessionVerification>;
}

export interface KonfidencePorts {
  readonly projects: ProjectLookup;
  readonly workloadTokens: WorkloadTokens;
  /** Absent when no session provider is configured: only workloads can call. */
  readonly sessions?: SessionTokens;
}
