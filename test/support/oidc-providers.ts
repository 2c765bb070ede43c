/** The OidcProviders settings the OIDC test suites share; each suite adds its own ProviderHttp and overrides. */
import type { OidcProvidersOptions } from "../../src/konfidence/oidc.ts";

export const TEST_OIDC_OPTIONS = {
  discoveryTtlMs: 60_000,
  jwksCooldownMs: 30_000,
  jwksMaxAgeMs: 600_000,
  timeoutMs: 1_000,
  clockToleranceSeconds: 5,
  verifiedCacheMaxEntries: 1_000,
  failureBackoffInitialMs: 1_000,
  failureBackoffMaxMs: 30_000,
} as const satisfies Omit<OidcProvidersOptions, "http">;
