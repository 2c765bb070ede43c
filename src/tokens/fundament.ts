/**
 * Fundament tokens (FUN-17 §3): HS256, one shared secret (a list, for rotation), issuer
 * `fundament-authn-api`; UserToken and PluginToken are told apart by `aud` alone.
 */
import { createSecretKey, hash, type KeyObject } from "node:crypto";
import { errors as joseErrors, jwtVerify, type JWTPayload } from "jose";
import { LRUCache } from "lru-cache";
import { publishCacheLookup } from "../metrics/events.ts";
import { isDefinitionHash, isDnsLabel, isUuid, isPluginVersion } from "./claim-formats.ts";

export const USER_AUDIENCE = "fundament-user";
export const PLUGIN_AUDIENCE = "fundament-plugin";
export const FUNDAMENT_ISSUER = "fundament-authn-api";

export interface UserClaims {
  readonly type: "user";
  readonly sub: string;
  readonly exp: number;
  readonly organizationIds: readonly string[];
  readonly groups: readonly string[];
}

export interface PluginClaims {
  readonly type: "plugin";
  readonly sub: string;
  readonly exp: number;
  readonly clusterId: string;
  readonly installationId: string;
  readonly installationName: string;
  readonly pluginName: string;
  readonly pluginVersion: string;
  readonly definitionHash: string;
}

/** What a verified token is: a user's session, a plugin acting for a user, or a valid token for some other service. */
export type FundamentClaims = UserClaims | PluginClaims | { readonly type: "other-audience"; readonly exp: number };

export type VerifyResult = { readonly ok: true; readonly claims: FundamentClaims } | { readonly ok: false; readonly detail: string };

export interface TokenVerifierOptions {
  /** Every secret currently accepted; the first one is authn-api's signing secret, the rest are being rotated out or in. */
  readonly secrets: readonly Uint8Array[];
  readonly issuer: string;
  readonly clockToleranceSeconds: number;
  readonly cacheMaxEntries: number;
  /** Milliseconds since the epoch; injected so tests freeze time. */
  readonly now?: () => number;
}

export class TokenVerifier {
  readonly #keys: readonly KeyObject[];
  readonly #options: TokenVerifierOptions;
  readonly #now: () => number;
  /**
   * Verified tokens by the SHA-256 of their exact text (43 characters instead of the token's ~600:
   * most of an entry's memory, and cheaper to look up than hashing the whole token as a Map key);
   * an entry never outlives the token's `exp`. Failures are never cached.
   */
  readonly #verified: LRUCache<string, FundamentClaims>;

  constructor(options: TokenVerifierOptions) {
    if (options.secrets.length === 0) throw new TypeError("tokens: at least one secret is required");
    this.#keys = options.secrets.map((s) => createSecretKey(s));
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#verified = new LRUCache({ max: options.cacheMaxEntries, ttlAutopurge: false, perf: { now: () => this.#now() } });
  }

  async verify(token: string): Promise<VerifyResult> {
    const key = hash("sha256", token, "base64url");
    const cached = this.#verified.get(key);
    if (cached !== undefined && cached.exp * 1000 > this.#now()) {
      publishCacheLookup("verified_token", "hit");
      return { ok: true, claims: cached };
    }
    publishCacheLookup("verified_token", "miss");
    const payload = await this.#verifySignatureAndTime(token);
    if (typeof payload === "string") return { ok: false, detail: payload };
    const claims = classify(payload);
    if (typeof claims === "string") return { ok: false, detail: claims };
    const ttl = claims.exp * 1000 - this.#now();
    if (ttl > 0) this.#verified.set(key, claims, { ttl });
    return { ok: true, claims };
  }

  async #verifySignatureAndTime(token: string): Promise<JWTPayload | string> {
    const now = this.#now();
    for (const key of this.#keys) {
      try {
        const { payload } = await jwtVerify(token, key, {
          algorithms: ["HS256"],
          issuer: this.#options.issuer,
          clockTolerance: this.#options.clockToleranceSeconds,
          requiredClaims: ["exp", "sub", "aud"],
          currentDate: new Date(now),
        });
        if (typeof payload.iat === "number" && payload.iat > now / 1000 + this.#options.clockToleranceSeconds) {
          return "token issued in the future";
        }
        return payload;
      } catch (err) {
        if (err instanceof joseErrors.JWSSignatureVerificationFailed) continue;
        return describe(err);
      }
    }
    return "signature does not verify";
  }
}

/** A message about a rejected token that is safe to log: names the rule, never the token. */
function describe(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return "token expired";
  if (err instanceof joseErrors.JWTClaimValidationFailed) return `claim ${err.claim} failed: ${err.reason}`;
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return "algorithm not allowed";
  if (err instanceof joseErrors.JOSEError) return `token rejected (${err.code})`;
  return "token rejected";
}

function classify(payload: JWTPayload): FundamentClaims | string {
  // jose checks aud only when asked for one audience; any other JSON here (a number, an object,
  // null) would otherwise throw below and be answered as a 500 instead of a 401.
  const aud: unknown = typeof payload.aud === "string" ? [payload.aud] : payload.aud;
  if (!isStringArray(aud)) return "aud malformed";
  const isUser = aud.includes(USER_AUDIENCE);
  const isPlugin = aud.includes(PLUGIN_AUDIENCE);
  const exp = payload.exp!;
  // One token is exactly one of the two types: a token for both would cross the escalation wall.
  if (isUser && isPlugin) return "token holds both audiences";
  if (!isUser && !isPlugin) return { type: "other-audience", exp };
  if (!isUuid(payload.sub)) return "sub is not a UUID";
  if (isUser) {
    const organizationIds = payload["organization_ids"] ?? [];
    const groups = payload["groups"] ?? [];
    if (!isStringArray(organizationIds) || !isStringArray(groups)) return "organization_ids or groups malformed";
    return { type: "user", sub: payload.sub, exp, organizationIds, groups };
  }
  const c = payload as Record<string, unknown>;
  if (!isUuid(c["cluster_id"])) return "cluster_id is not a UUID";
  if (!isUuid(c["installation_id"])) return "installation_id is not a UUID";
  if (!isDnsLabel(c["installation_name"])) return "installation_name is not a DNS label";
  if (!isDnsLabel(c["plugin_name"])) return "plugin_name is not a DNS label";
  if (!isPluginVersion(c["plugin_version"])) return "plugin_version malformed";
  if (!isDefinitionHash(c["definition_hash"])) return "definition_hash malformed";
  return {
    type: "plugin",
    sub: payload.sub,
    exp,
    clusterId: c["cluster_id"],
    installationId: c["installation_id"],
    installationName: c["installation_name"],
    pluginName: c["plugin_name"],
    pluginVersion: c["plugin_version"],
    definitionHash: c["definition_hash"],
  };
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === "string");
}
