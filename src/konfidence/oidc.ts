/**
 * OIDC providers: discovery and token verification (ADR-0028 jwks subjects; the session provider).
 *
 * - A provider is named by its discovery URL. The document is fetched over https with size and
 *   time limits and cached with a TTL (lru-cache fetch: one request in flight per provider). Its
 *   `issuer` must be the one the URL was derived from (OpenID Connect Discovery §4), and its
 *   `jwks_uri` must be https.
 * - Keys come from jose's remote JWKS: an unknown `kid` refetches at most once per cooldown, and
 *   keys are refetched after a bounded max age, so a key the provider removed stops verifying.
 * - A verified token is cached per (provider, token) until its `exp`, but never longer than the
 *   JWKS max age, for the same reason; concurrent verifications of one token share one.
 * - A failed discovery or JWKS fetch pauses fetches to that provider (provider-backoff.ts: bounded
 *   exponential, reset by a success): neither lru-cache nor jose caches a failure, so without it a
 *   broken provider would be fetched once per check.
 * Failures to reach a provider are DependencyUnavailable (503); a token the provider does not vouch
 * for is a rejection (401).
 */
import { decodeJwt, errors as joseErrors, createRemoteJWKSet, customFetch, jwtVerify, type JWTVerifyGetKey } from "jose";
import { hash } from "node:crypto";
import { LRUCache } from "lru-cache";
import { discoveryEndpointFor, httpsUrl } from "../konfidence-model/discovery-url.ts";
import type { TokenVerification, VerifiedToken, WorkloadTokens } from "./ports.ts";
import { ProviderBackoff } from "./provider-backoff.ts";
import { OIDC_PROVIDER, type ProviderHttp } from "./provider-http.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { errorSummary } from "../redaction/error-cause.ts";
import { publishCacheLookup } from "../metrics/events.ts";

export interface OidcProvidersOptions {
  readonly http: ProviderHttp;
  readonly discoveryTtlMs: number;
  /** Minimum time between JWKS refetches caused by unknown key ids. */
  readonly jwksCooldownMs: number;
  /** Keys older than this are refetched before use: the bound on how long a removed key still verifies. */
  readonly jwksMaxAgeMs: number;
  readonly timeoutMs: number;
  readonly clockToleranceSeconds: number;
  readonly verifiedCacheMaxEntries: number;
  /** The pause after a provider's first failed fetch, doubled by each further failure up to `failureBackoffMaxMs`. */
  readonly failureBackoffInitialMs: number;
  readonly failureBackoffMaxMs: number;
  /** Milliseconds since the epoch; injected so tests freeze time. */
  readonly now?: () => number;
}

export interface ProviderMetadata {
  readonly issuer: string;
  readonly jwksUri: string;
  readonly userinfoEndpoint: string | undefined;
}

interface Provider extends ProviderMetadata {
  readonly keys: JWTVerifyGetKey;
}

/** A token the provider does not vouch for; its message is safe to show (names the rule, never the token). */
export class TokenRejected extends Error {
  readonly code = "token-rejected";
}

/** Public-key algorithms only: a provider's JWKS never makes an HMAC secret out of a published key. */
const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"];

/** Providers kept at once (discovery documents and key sets); far above any real deployment. */
const MAX_PROVIDERS = 1_000;
/** OpenID Connect Core §2: `sub` "MUST NOT exceed 255 ASCII characters in length". */
export const MAX_SUB_LENGTH = 255;

/** The token's `iss`, read WITHOUT verification: only to pick the one provider that may verify it. */
export function unverifiedIssuer(token: string): string | undefined {
  try {
    const { iss } = decodeJwt(token);
    return typeof iss === "string" ? iss : undefined;
  } catch {
    return undefined;
  }
}

export class OidcProviders implements WorkloadTokens {
  readonly #options: OidcProvidersOptions;
  readonly #now: () => number;
  readonly #providers: LRUCache<string, Provider>;
  readonly #keySets: LRUCache<string, JWTVerifyGetKey>;
  readonly #backoff: ProviderBackoff;
  readonly #verified: LRUCache<string, VerifiedToken, { endpoint: string; token: string }>;

  constructor(options: OidcProvidersOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    const perf = { now: () => this.#now() };
    // The clock read on every lookup, not a reading kept 1 ms by a timer (src/cache/cached-lookup.ts).
    const ttlResolution = 0;
    this.#backoff = new ProviderBackoff({ initialMs: options.failureBackoffInitialMs, maxMs: options.failureBackoffMaxMs, now: () => this.#now() });
    this.#keySets = new LRUCache({ max: MAX_PROVIDERS });
    this.#providers = new LRUCache<string, Provider>({
      max: MAX_PROVIDERS,
      ttl: options.discoveryTtlMs,
      perf,
      ttlResolution,
      fetchMethod: (endpoint) => this.#discover(endpoint),
    });
    this.#verified = new LRUCache<string, VerifiedToken, { endpoint: string; token: string }>({
      max: options.verifiedCacheMaxEntries,
      ttl: options.jwksMaxAgeMs,
      perf,
      ttlResolution,
      fetchMethod: async (_key, _stale, { options: entry, context }) => {
        const verified = await this.#verifyUncached(context.endpoint, context.token);
        entry.ttl = Math.max(1, Math.min(verified.exp * 1000 - this.#now(), options.jwksMaxAgeMs));
        return verified.token;
      },
    });
  }

  async verify(endpoint: string, token: string): Promise<TokenVerification> {
    const status: LRUCache.Status<string, VerifiedToken> = {};
    try {
      // Keyed by a digest: a token is up to 8 KB of caller-chosen text, kept until evicted.
      const verified = await this.#verified.fetch(hash("sha256", `${endpoint}\n${token}`, "base64url"), { context: { endpoint, token }, status });
      if (verified === undefined) throw new DependencyUnavailable(OIDC_PROVIDER, "no verification result");
      return { ok: true, token: verified };
    } catch (err) {
      if (err instanceof TokenRejected) return { ok: false, detail: err.message };
      throw err;
    } finally {
      publishCacheLookup("oidc_verified_token", status.fetch);
    }
  }

  /** The provider's discovery document, as cached. */
  metadata(endpoint: string): Promise<ProviderMetadata> {
    return this.#provider(endpoint);
  }

  async #provider(endpoint: string): Promise<Provider> {
    const status: LRUCache.Status<string, Provider> = {};
    const provider = await this.#providers.fetch(endpoint, { status });
    publishCacheLookup("oidc_discovery", status.fetch);
    if (provider === undefined) throw new DependencyUnavailable(OIDC_PROVIDER, "no discovery document");
    return provider;
  }

  async #verifyUncached(endpoint: string, token: string): Promise<{ token: VerifiedToken; exp: number }> {
    const provider = await this.#provider(endpoint);
    let payload;
    try {
      ({ payload } = await jwtVerify(token, provider.keys, {
        issuer: provider.issuer,
        algorithms: ALGORITHMS,
        clockTolerance: this.#options.clockToleranceSeconds,
        currentDate: new Date(this.#now()),
        requiredClaims: ["exp", "sub"],
      }));
    } catch (err) {
      if (err instanceof DependencyUnavailable) throw err;
      throw new TokenRejected(rejection(err));
    }
    if (typeof payload.sub !== "string") throw new TokenRejected("sub is not a string");
    // It becomes x-konfidence-subject and a log field: bounded, as OpenID Connect Core §2 bounds it.
    if (payload.sub.length === 0 || payload.sub.length > MAX_SUB_LENGTH) throw new TokenRejected(`sub is empty or longer than ${MAX_SUB_LENGTH} characters`);
    const aud = payload.aud;
    const audiences = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud.filter((a) => typeof a === "string") : [];
    // jwtVerify checked that `iss` is the issuer the discovery document names.
    return { token: { issuer: provider.issuer, sub: payload.sub, audiences, claims: payload }, exp: payload.exp! };
  }

  #discover(endpoint: string): Promise<Provider> {
    return this.#backoff.run(endpoint, async () => {
      this.#backoff.admit(endpoint);
      return this.#discovered(endpoint, await this.#options.http.json(endpoint));
    });
  }

  #discovered(endpoint: string, { status, json }: { status: number; json: unknown }): Provider {
    if (status !== 200) throw new DependencyUnavailable(OIDC_PROVIDER, `discovery answered ${status}`);
    if (typeof json !== "object" || json === null) throw new DependencyUnavailable(OIDC_PROVIDER, "discovery document is not an object");
    const doc = json as Record<string, unknown>;
    const issuer = doc["issuer"];
    // A document may only speak for the issuer its URL belongs to.
    if (typeof issuer !== "string" || discoveryEndpointFor(issuer) !== endpoint) {
      throw new DependencyUnavailable(OIDC_PROVIDER, "discovery document names another issuer");
    }
    const jwksUri = httpsUrl(doc["jwks_uri"]);
    if (jwksUri === undefined) throw new DependencyUnavailable(OIDC_PROVIDER, "jwks_uri is not an https URL");
    const userinfoEndpoint = doc["userinfo_endpoint"] === undefined ? undefined : httpsUrl(doc["userinfo_endpoint"]);
    if (doc["userinfo_endpoint"] !== undefined && userinfoEndpoint === undefined) {
      throw new DependencyUnavailable(OIDC_PROVIDER, "userinfo_endpoint is not an https URL");
    }
    return { issuer, jwksUri, userinfoEndpoint, keys: this.#keysFor(endpoint, jwksUri) };
  }

  /**
   * One remote key set per provider and jwks_uri, kept across discovery refreshes so its cache
   * survives them. Its fetches are admitted by the provider's backoff, and their outcome charged to it.
   */
  #keysFor(endpoint: string, jwksUri: string): JWTVerifyGetKey {
    const id = `${endpoint}\n${jwksUri}`;
    const existing = this.#keySets.get(id);
    if (existing !== undefined) return existing;
    const { jwksFetch } = this.#options.http;
    const remote = createRemoteJWKSet(new URL(jwksUri), {
      cooldownDuration: this.#options.jwksCooldownMs,
      cacheMaxAge: this.#options.jwksMaxAgeMs,
      timeoutDuration: this.#options.timeoutMs,
      [customFetch]: (url, init) => {
        this.#backoff.admit(endpoint);
        return jwksFetch(url, init);
      },
    });
    const keys: JWTVerifyGetKey = (header, token) =>
      this.#backoff.run(endpoint, async () => {
        try {
          return await remote(header, token);
        } catch (err) {
          if (isTokenKeyError(err) || err instanceof DependencyUnavailable) throw err;
          throw new DependencyUnavailable(OIDC_PROVIDER, `JWKS unusable: ${errorSummary(err)}`, { cause: err });
        }
      });
    this.#keySets.set(id, keys);
    return keys;
  }
}

/** Key selection failures caused by the token (its kid or alg), as opposed to the provider's key set. */
function isTokenKeyError(err: unknown): boolean {
  return (
    err instanceof joseErrors.JWKSNoMatchingKey ||
    err instanceof joseErrors.JWKSMultipleMatchingKeys ||
    err instanceof joseErrors.JOSENotSupported ||
    err instanceof joseErrors.JOSEAlgNotAllowed
  );
}

/** Why a token was rejected, safe to log and show: names the rule, never the token. */
function rejection(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return "token expired";
  if (err instanceof joseErrors.JWTClaimValidationFailed) return `claim ${err.claim} failed: ${err.reason}`;
  if (err instanceof joseErrors.JWKSNoMatchingKey) return "no key of the provider matches the token";
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return "algorithm not allowed";
  if (err instanceof joseErrors.JOSEError) return `token rejected (${err.code})`;
  return "token rejected";
}
