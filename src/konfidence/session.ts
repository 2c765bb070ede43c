/**
 * Session identity: an interactive user's credential is a JWT from the platform's single OIDC
 * provider, carried in a configured cookie or header. It is verified like any provider's token
 * (oidc.ts), must carry the configured audience (the platform's client id), and its groups come
 * from a configured claim. When that claim is absent and UserInfo is enabled, the groups are read
 * from the provider's UserInfo endpoint instead (OIDC Core §5.3; its `sub` must be the token's),
 * cached per token until the token expires, bounded by a TTL so membership changes are seen.
 */
import { hash } from "node:crypto";
import { LRUCache } from "lru-cache";
import { type OidcProviders, TokenRejected } from "./oidc.ts";
import type { SessionTokens, SessionVerification } from "./ports.ts";
import { OIDC_PROVIDER, type ProviderHttp } from "./provider-http.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { publishCacheLookup } from "../metrics/events.ts";
import { cookieCredentialAllowed, cookieToken, type CredentialLookup, headerToken } from "../tokens/credentials.ts";

/** A cookie counts only from a page the browser vouches for (`cookieOrigins`, or same-origin), as Fundament's does. */
export type SessionCredentialSource = { readonly cookie: string; readonly cookieOrigins: ReadonlySet<string> } | { readonly header: string };

const ABSENT: CredentialLookup = { kind: "absent" };

export function sessionCredential(headers: Readonly<Record<string, string>>, source: SessionCredentialSource): CredentialLookup {
  if (!("cookie" in source)) return headerToken(headers, source.header);
  // A browser attaches the cookie to cross-site forms and navigations, and to same-site pages' requests
  // (a plugin's), none of which CORS stops: without this, any such page could act as the user.
  return cookieCredentialAllowed(headers, source.cookieOrigins) ? cookieToken(headers, source.cookie) : ABSENT;
}

export interface OidcSessionsOptions {
  /** The session provider's discovery URL, normalized. */
  readonly endpoint: string;
  readonly audience: string;
  readonly groupsClaim: string;
  readonly userInfo: boolean;
  readonly userInfoTtlMs: number;
  readonly cacheMaxEntries: number;
  readonly now?: () => number;
}

interface UserInfoRequest {
  readonly token: string;
  readonly sub: string;
  readonly exp: number;
}

export class OidcSessions implements SessionTokens {
  readonly #providers: OidcProviders;
  readonly #http: ProviderHttp;
  readonly #options: OidcSessionsOptions;
  readonly #groups: LRUCache<string, readonly string[], UserInfoRequest>;

  constructor(providers: OidcProviders, http: ProviderHttp, options: OidcSessionsOptions) {
    this.#providers = providers;
    this.#http = http;
    this.#options = options;
    const now = options.now ?? Date.now;
    this.#groups = new LRUCache<string, readonly string[], UserInfoRequest>({
      max: options.cacheMaxEntries,
      ttl: options.userInfoTtlMs,
      perf: { now },
      // The clock read on every lookup, not a reading kept 1 ms by a timer (src/cache/cached-lookup.ts).
      ttlResolution: 0,
      fetchMethod: async (_key, _stale, { options: entry, context }) => {
        entry.ttl = Math.max(1, Math.min(context.exp * 1000 - now(), options.userInfoTtlMs));
        return this.#userInfoGroups(context);
      },
    });
  }

  async verify(token: string): Promise<SessionVerification> {
    const verified = await this.#providers.verify(this.#options.endpoint, token);
    if (!verified.ok) return verified;
    const { issuer, sub, audiences, claims } = verified.token;
    if (!audiences.includes(this.#options.audience)) return { ok: false, detail: "the session token is for another audience" };
    let groups = claims[this.#options.groupsClaim];
    if (groups === undefined && this.#options.userInfo) {
      try {
        groups = await this.#fromUserInfo({ token, sub, exp: claims["exp"] as number });
      } catch (err) {
        if (err instanceof TokenRejected) return { ok: false, detail: err.message };
        throw err;
      }
    }
    if (groups === undefined) return { ok: true, issuer, sub, groups: new Set() };
    if (!isStringArray(groups)) return { ok: false, detail: `claim ${this.#options.groupsClaim} is not a list of strings` };
    return { ok: true, issuer, sub, groups: new Set(groups) };
  }

  async #fromUserInfo(request: UserInfoRequest): Promise<readonly string[]> {
    const status: LRUCache.Status<string, readonly string[]> = {};
    try {
      const groups = await this.#groups.fetch(hash("sha256", request.token, "base64url"), { context: request, status });
      if (groups === undefined) throw new DependencyUnavailable(OIDC_PROVIDER, "no UserInfo answer");
      return groups;
    } finally {
      publishCacheLookup("oidc_userinfo", status.fetch);
    }
  }

  async #userInfoGroups({ token, sub }: UserInfoRequest): Promise<readonly string[]> {
    const { userinfoEndpoint } = await this.#providers.metadata(this.#options.endpoint);
    if (userinfoEndpoint === undefined) throw new DependencyUnavailable(OIDC_PROVIDER, "the session provider has no userinfo_endpoint");
    const { status, json } = await this.#http.json(userinfoEndpoint, { authorization: `Bearer ${token}` });
    if (status === 401 || status === 403) throw new TokenRejected("UserInfo refused the session token");
    if (status !== 200 || typeof json !== "object" || json === null) throw new DependencyUnavailable(OIDC_PROVIDER, `UserInfo answered ${status}`);
    const info = json as Record<string, unknown>;
    if (info["sub"] !== sub) throw new TokenRejected("UserInfo answered for another subject");
    const groups = info[this.#options.groupsClaim] ?? [];
    if (!isStringArray(groups)) throw new TokenRejected(`UserInfo ${this.#options.groupsClaim} is not a list of strings`);
    return groups;
  }
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === "string");
}
