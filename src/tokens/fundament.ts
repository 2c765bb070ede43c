/**
 * Fundament tokens (FUN-17 §3): issuer `fundament-authn-api`; UserToken and PluginToken are told
 * apart by `aud` alone. Signed either with HS256 and the shared secret (a list, for rotation), or —
 * FUN-17 §9's planned hardening, where authn-api alone holds a private key — with EdDSA, ES256 or
 * RS256, verified against authn-api's JWKS. The mode says which are accepted:
 *  - `hs256`: the shared secret only (FUN-17 v1);
 *  - `migration`: both, each use counted by algorithm and token type, so HS256 traffic can be
 *    watched draining before it is turned off;
 *  - `asymmetric`: the JWKS only; an HS256 token is refused, so no holder of the old secret can forge.
 * The header's `alg` only picks which of the two verifications runs; each verification allows only
 * its own algorithms and keys (HMAC: the secrets; asymmetric: the JWKS, whose keys jose matches by
 * `kid` and by type), so no header can make a public key serve as an HMAC secret.
 */
import { createSecretKey, hash, type KeyObject } from "node:crypto";
import { decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from "jose";
import { LRUCache } from "lru-cache";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { errorSummary } from "../redaction/error-cause.ts";
import { publishCacheLookup, publishTokenVerified } from "../metrics/events.ts";
import { isDefinitionHash, isDnsLabel, isUuid, isPluginVersion } from "./claim-formats.ts";

export const USER_AUDIENCE = "fundament-user";
export const PLUGIN_AUDIENCE = "fundament-plugin";
export const FUNDAMENT_ISSUER = "fundament-authn-api";

/**
 * Whether the token's payload, neither verified nor parsed, holds the plugin audience's name: only to
 * choose which one token among many is worth a verification; nothing is decided on it. authn-api
 * (Go's encoding/json) writes it verbatim, so a PluginToken it signed holds it. No JSON parse and
 * nothing thrown: a request may carry a hundred thousand token-shaped values, each read here.
 */
export function mentionsPluginAudience(token: string): boolean {
  // Searched in the text first (no decoding, nothing allocated), decoded only where it may be.
  if (!PLUGIN_AUDIENCE_BASE64.some((encoded) => token.includes(encoded))) return false;
  const payload = token.slice(token.indexOf(".") + 1, token.lastIndexOf("."));
  return Buffer.from(payload, "base64url").toString("latin1").includes(PLUGIN_AUDIENCE);
}

/** PLUGIN_AUDIENCE inside base64url text, at each of the three byte alignments: the characters encoding its bits alone. */
const PLUGIN_AUDIENCE_BASE64 = [0, 1, 2].map((offset) =>
  Buffer.concat([Buffer.alloc(offset), Buffer.from(PLUGIN_AUDIENCE)])
    .toString("base64url")
    .slice(Math.ceil((8 * offset) / 6), Math.floor((8 * (offset + PLUGIN_AUDIENCE.length)) / 6)),
);

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

export type TokenMode = "hs256" | "migration" | "asymmetric";

/** The asymmetric algorithms authn-api may sign with. */
export const ASYMMETRIC_ALGORITHMS = ["EdDSA", "ES256", "RS256"] as const;
export type AsymmetricAlgorithm = (typeof ASYMMETRIC_ALGORITHMS)[number];

/** authn-api's public keys: jose's remote JWKS (src/tokens/jwks.ts), or a local set in tests. */
export interface PublicKeys {
  readonly keys: JWTVerifyGetKey;
  /** The algorithms accepted; a token naming any other is refused before a key is looked up. */
  readonly algorithms: readonly AsymmetricAlgorithm[];
  /** A verified token is reused at most this long, so a key removed from the JWKS stops verifying once the key set is refetched. */
  readonly cacheMaxAgeMs: number;
}

export interface TokenVerifierOptions {
  readonly mode: TokenMode;
  /** Every secret currently accepted (hs256, migration); the first one is authn-api's signing secret, the rest are being rotated out or in. */
  readonly secrets: readonly Uint8Array[];
  /** authn-api's public keys (migration, asymmetric). */
  readonly publicKeys?: PublicKeys;
  readonly issuer: string;
  readonly clockToleranceSeconds: number;
  /**
   * The longest `exp − iat` accepted, per token type, before clockToleranceSeconds is added: a
   * token minted to outlive its type's lifetime is refused (FUN-17 §3, §10: a PluginToken lives 15
   * minutes, and revocation without a deny-list rests on that).
   */
  readonly maxLifetimeSeconds: Readonly<Record<"user" | "plugin", number>>;
  readonly cacheMaxEntries: number;
  /** Milliseconds since the epoch; injected so tests freeze time. */
  readonly now?: () => number;
}

/**
 * A token verified with one of authn-api's public keys: its claims and the algorithm it was signed
 * with (for the migration metric). An HS256 token's claims are cached alone, without this wrapper
 * (40 bytes per cached token; HS256 is FUN-17 v1's and the default mode's only algorithm).
 */
class PublicKeyVerified {
  readonly claims: FundamentClaims;
  readonly alg: string;

  constructor(claims: FundamentClaims, alg: string) {
    this.claims = claims;
    this.alg = alg;
  }
}

export class TokenVerifier {
  readonly #keys: readonly KeyObject[];
  readonly #publicKeys: PublicKeys | undefined;
  readonly #options: TokenVerifierOptions;
  readonly #now: () => number;
  /**
   * Verified tokens by the SHA-256 of their exact text, as 32 one-byte characters (Node's "binary",
   * i.e. latin1: 48 bytes of heap, base64url's 43 characters take 64, the token itself ~600; and
   * cheaper to look up than hashing the whole token as a Map key); an entry never outlives the
   * token's `exp` (nor, for a JWKS-verified token, the key set's cache age). Failures are never cached.
   */
  readonly #verified: LRUCache<string, FundamentClaims | PublicKeyVerified>;
  /** One copy of each claim string that many cached tokens share (see SharedStrings). */
  readonly #shared: SharedStrings;

  constructor(options: TokenVerifierOptions) {
    const needsSecrets = options.mode !== "asymmetric";
    const needsKeys = options.mode !== "hs256";
    if (needsSecrets !== options.secrets.length > 0) throw new TypeError(`tokens: mode ${options.mode} ${needsSecrets ? "needs at least one secret" : "takes no secret"}`);
    if (needsKeys !== (options.publicKeys !== undefined)) throw new TypeError(`tokens: mode ${options.mode} ${needsKeys ? "needs a JWKS" : "takes no JWKS"}`);
    this.#keys = options.secrets.map((s) => createSecretKey(s));
    this.#publicKeys = options.publicKeys;
    this.#options = options;
    this.#now = options.now ?? Date.now;
    // ttlResolution 0: the clock read on every lookup, not a reading kept 1 ms by a timer (src/cache/cached-lookup.ts).
    this.#verified = new LRUCache({ max: options.cacheMaxEntries, ttlAutopurge: false, ttlResolution: 0, perf: { now: () => this.#now() } });
    // A cached token holds at most a few shared strings; twice the entries holds those of a full cache.
    this.#shared = new SharedStrings(2 * options.cacheMaxEntries);
  }

  /** Rejects with DependencyUnavailable when the JWKS cannot be fetched: a 503, never an allow. */
  verify(token: string): Promise<VerifyResult> {
    // Not an async function: a token verified before is one settled promise, without an async frame.
    let key: string;
    try {
      key = hash("sha256", token, "binary");
      const cached = this.#verified.get(key);
      const held = cached instanceof PublicKeyVerified ? cached.claims : cached;
      if (held !== undefined && held.exp * 1000 > this.#now()) {
        publishCacheLookup("verified_token", "hit");
        publishTokenVerified(cached instanceof PublicKeyVerified ? cached.alg : "HS256", held.type);
        return Promise.resolve({ ok: true, claims: held });
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#verifyUncached(token, key);
  }

  async #verifyUncached(token: string, key: string): Promise<VerifyResult> {
    publishCacheLookup("verified_token", "miss");
    const alg = algorithmOf(token);
    if (alg === undefined) return { ok: false, detail: "no readable alg in the token's header" };
    const payload = await this.#verifySignatureAndTime(token, alg);
    if (typeof payload === "string") return { ok: false, detail: payload };
    const claims = classify(payload, this.#shared);
    if (typeof claims === "string") return { ok: false, detail: claims };
    const tooLong = claims.type === "other-audience" ? undefined : this.#lifetimeFault(payload, claims.type);
    if (tooLong !== undefined) return { ok: false, detail: tooLong };
    const untilExp = claims.exp * 1000 - this.#now();
    const ttl = alg === "HS256" ? untilExp : Math.min(untilExp, this.#publicKeys!.cacheMaxAgeMs);
    if (ttl > 0) this.#verified.set(key, alg === "HS256" ? claims : new PublicKeyVerified(claims, alg), { ttl });
    publishTokenVerified(alg, claims.type);
    return { ok: true, claims };
  }

  /** Picks the verification by the header's `alg`, within what the mode accepts; anything else is refused unverified. */
  async #verifySignatureAndTime(token: string, alg: string): Promise<JWTPayload | string> {
    const mode = this.#options.mode;
    if (alg === "HS256") return mode === "asymmetric" ? "HS256 is not accepted (tokens.mode asymmetric)" : this.#verifyHmac(token);
    if (this.#publicKeys !== undefined && (this.#publicKeys.algorithms as readonly string[]).includes(alg)) return this.#verifyPublicKey(token, this.#publicKeys);
    return "algorithm not allowed";
  }

  async #verifyPublicKey(token: string, publicKeys: PublicKeys): Promise<JWTPayload | string> {
    const now = this.#now();
    try {
      const { payload } = await jwtVerify(token, publicKeys.keys, { ...this.#claimChecks(now), algorithms: [...publicKeys.algorithms] });
      return this.#issuedInThePast(payload, now);
    } catch (err) {
      if (isKeySetFailure(err)) throw new DependencyUnavailable(AUTHN_JWKS, `key set unusable: ${errorSummary(err)}`, { cause: err });
      if (err instanceof joseErrors.JWKSNoMatchingKey) return "no key of authn-api's JWKS matches the token";
      return describe(err);
    }
  }

  #claimChecks(now: number) {
    return {
      issuer: this.#options.issuer,
      clockTolerance: this.#options.clockToleranceSeconds,
      // iat: a token's lifetime (exp − iat) is bounded, so a token that does not say when it was minted is refused.
      requiredClaims: ["exp", "iat", "sub", "aud"],
      currentDate: new Date(now),
    };
  }

  #issuedInThePast(payload: JWTPayload, now: number): JWTPayload | string {
    if (typeof payload.iat === "number" && payload.iat > now / 1000 + this.#options.clockToleranceSeconds) return "token issued in the future";
    return payload;
  }

  /** Why a verified token of this type lives too long (`exp − iat` above its bound plus the tolerance), if it does. */
  #lifetimeFault(payload: JWTPayload, type: "user" | "plugin"): string | undefined {
    const bound = this.#options.maxLifetimeSeconds[type];
    // jose has checked both are numbers (exp and iat are required claims).
    const lifetime = payload.exp! - payload.iat!;
    return lifetime > bound + this.#options.clockToleranceSeconds ? `${type} token lifetime (exp - iat) above ${bound} s` : undefined;
  }

  async #verifyHmac(token: string): Promise<JWTPayload | string> {
    const now = this.#now();
    for (const key of this.#keys) {
      try {
        const { payload } = await jwtVerify(token, key, { ...this.#claimChecks(now), algorithms: ["HS256"] });
        return this.#issuedInThePast(payload, now);
      } catch (err) {
        if (err instanceof joseErrors.JWSSignatureVerificationFailed) continue;
        return describe(err);
      }
    }
    return "signature does not verify";
  }
}

/** The dependency name of authn-api's JWKS in metrics and 503s. */
export const AUTHN_JWKS = "authn-api-jwks";

/** The protected header's `alg`, when the token has a readable header naming one. */
function algorithmOf(token: string): string | undefined {
  try {
    const alg = decodeProtectedHeader(token).alg;
    return typeof alg === "string" ? alg : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The token's fault (401): its signature, claims, header or key reference. Anything else from a
 * JWKS verification (a fetch that failed, timed out, answered non-200 or no JWKS) is the key set's:
 * a 503, never a verdict on the token.
 */
const TOKEN_FAULTS = [
  joseErrors.JWTExpired,
  joseErrors.JWTClaimValidationFailed,
  joseErrors.JWTInvalid,
  joseErrors.JWSInvalid,
  joseErrors.JWSSignatureVerificationFailed,
  joseErrors.JOSEAlgNotAllowed,
  joseErrors.JOSENotSupported,
  joseErrors.JWKSNoMatchingKey,
  joseErrors.JWKSMultipleMatchingKeys,
];

function isKeySetFailure(err: unknown): boolean {
  return !TOKEN_FAULTS.some((fault) => err instanceof fault);
}

/** A message about a rejected token that is safe to log: names the rule, never the token. */
function describe(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return "token expired";
  if (err instanceof joseErrors.JWTClaimValidationFailed) return `claim ${err.claim} failed: ${err.reason}`;
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return "algorithm not allowed";
  if (err instanceof joseErrors.JOSEError) return `token rejected (${err.code})`;
  return "token rejected";
}

/**
 * One copy of each string that many tokens carry alike — a plugin token's cluster, installation,
 * plugin, version and definition hash, a user token's organizations and groups — so that a cached
 * token holds its own `sub` and shares the rest: 100,000 users of 10,000 installations keep 10,000
 * copies, not 100,000. Bounded: emptied when full, which costs only sharing (an equal string
 * decides exactly as the same one does).
 */
export class SharedStrings {
  readonly #strings = new Map<string, string>();
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  get size(): number {
    return this.#strings.size;
  }

  /** The copy already held of `s`, or `s`, now held. */
  intern(s: string): string {
    const held = this.#strings.get(s);
    if (held !== undefined) return held;
    if (this.#strings.size >= this.#max) this.#strings.clear();
    this.#strings.set(s, s);
    return s;
  }
}

function classify(payload: JWTPayload, shared: SharedStrings): FundamentClaims | string {
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
    return { type: "user", sub: payload.sub, exp, organizationIds: organizationIds.map((o) => shared.intern(o)), groups: groups.map((g) => shared.intern(g)) };
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
    clusterId: shared.intern(c["cluster_id"]),
    installationId: shared.intern(c["installation_id"]),
    installationName: shared.intern(c["installation_name"]),
    pluginName: shared.intern(c["plugin_name"]),
    pluginVersion: shared.intern(c["plugin_version"]),
    definitionHash: shared.intern(c["definition_hash"]),
  };
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === "string");
}
