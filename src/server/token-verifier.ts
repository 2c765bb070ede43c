/**
 * Wiring of the Fundament token verifier from `tokens`: the HS256 secrets (read from their
 * sources) and authn-api's JWKS, as the mode asks (src/tokens/fundament.ts).
 */
import type { Config } from "../config/schema.ts";
import { readSecret } from "../config/load.ts";
import { TokenVerifier } from "../tokens/fundament.ts";
import { remotePublicKeys } from "../tokens/jwks.ts";

export function tokenVerifierFor(tokens: NonNullable<Config["tokens"]>): TokenVerifier {
  const secrets = (tokens.secrets ?? []).map((s, i) => new TextEncoder().encode(readSecret(s, `tokens.secrets[${i}]`)));
  return new TokenVerifier({
    mode: tokens.mode,
    secrets,
    ...(tokens.jwks === undefined ? {} : { publicKeys: remotePublicKeys(tokens.jwks) }),
    issuer: tokens.issuer,
    clockToleranceSeconds: tokens.clockToleranceSeconds,
    maxLifetimeSeconds: tokens.maxLifetimeSeconds,
    cacheMaxEntries: tokens.cacheMaxEntries,
  });
}
