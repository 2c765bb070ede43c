/** Mints Fundament tokens the way authn-api does, for tests. */
import { randomUUID } from "node:crypto";
import { SignJWT } from "jose";

export const SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789";
export const OLD_SECRET = "old-secret-being-rotated-out-0123456789abcdef0123456";

export const ids = {
  user: "5b0c3c2e-7f3a-4d8e-9a51-2d9f0c1e8a01",
  otherUser: "6c1d4d3f-8a4b-4e9f-8b62-3e0a1d2f9b02",
  cluster: "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
  otherCluster: "1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c",
  installation: "2a8b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
  otherInstallation: "3b9c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e",
} as const;

export const PINNED_HASH = `sha256:${"ab".repeat(32)}`;

export interface MintOptions {
  secret?: string;
  issuer?: string;
  exp?: number;
  nbf?: number;
  iat?: number;
  alg?: string;
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

export async function sign(claims: Record<string, unknown>, options: MintOptions = {}): Promise<string> {
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: options.alg ?? "HS256", typ: "JWT" })
    .setIssuer(options.issuer ?? "fundament-authn-api")
    .setExpirationTime(options.exp ?? nowSeconds() + 900)
    .setIssuedAt(options.iat ?? nowSeconds())
    .setJti(randomUUID());
  if (options.nbf !== undefined) jwt.setNotBefore(options.nbf);
  return jwt.sign(new TextEncoder().encode(options.secret ?? SECRET));
}

export function userClaims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    sub: ids.user,
    aud: "fundament-user",
    organization_ids: ["7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03"],
    groups: ["developers"],
    name: "Ada Lovelace",
    ...overrides,
  };
}

export function pluginClaims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    sub: ids.user,
    aud: "fundament-plugin",
    cluster_id: ids.cluster,
    installation_id: ids.installation,
    installation_name: "cert-manager",
    plugin_name: "cert-manager",
    plugin_version: "1.4.0",
    definition_hash: PINNED_HASH,
    ...overrides,
  };
}

export const userToken = (overrides?: Record<string, unknown>, options?: MintOptions) => sign(userClaims(overrides), options);
export const pluginToken = (overrides?: Record<string, unknown>, options?: MintOptions) => sign(pluginClaims(overrides), options);
