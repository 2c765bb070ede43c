/**
 * Fakes of the Konfidence ports that record every call. The Project index is the real in-memory
 * store (compiled exactly as the watch compiles); token verification trusts the token's own claims
 * unless told otherwise, so rows state identities by the claims they mint.
 */
import { decodeJwt, SignJWT } from "jose";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import type { KonfidencePorts, ProjectLookup, SessionTokens, SessionVerification, TokenVerification, WorkloadTokens } from "../../src/konfidence/ports.ts";
import { type ProjectObject, ProjectStore } from "../../src/konfidence/project-index.ts";
import type { ProviderTrust } from "../../src/konfidence-model/subjects.ts";
import { FakeWorld } from "../support/fakes.ts";

export const GITHUB_ISSUER = "https://token.actions.githubusercontent.com";
export const GITHUB = `${GITHUB_ISSUER}/.well-known/openid-configuration`;
/** A second allow-listed workload provider. */
export const CI_NET_ISSUER = "https://ci.example.net";
export const CI_NET = `${CI_NET_ISSUER}/.well-known/openid-configuration`;
export const PLATFORM_ISSUER = "https://login.platform.example";
export const PLATFORM = `${PLATFORM_ISSUER}/.well-known/openid-configuration`;
export const AUD = "https://konfidence.example/api";

const FAKE_KEY = new TextEncoder().encode("fake-signing-key-the-fakes-never-check-000000");

/** A compact JWT whose claims the fakes read back; its signature means nothing to them. */
export function mintToken(claims: Record<string, unknown>): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: "HS256" }).sign(FAKE_KEY);
}

export function project(name: string, roleBindings: unknown): ProjectObject {
  return { apiVersion: "konfidence.cloud/v1alpha1", kind: "Project", metadata: { name }, spec: { roleBindings } };
}

export class FakeKonfidence implements KonfidencePorts {
  calls: string[] = [];
  synced = true;
  /** Providers that cannot be reached. */
  unavailable = new Set<string>();
  store: ProjectStore;

  constructor(trusts: ProviderTrust = () => true) {
    this.store = new ProjectStore(trusts);
  }

  projects: ProjectLookup = {
    byName: (name) => {
      this.calls.push(`project ${name}`);
      this.#requireSynced();
      return this.store.byName(name);
    },
    namesProvider: (endpoint) => {
      this.#requireSynced();
      return this.store.namesProvider(endpoint);
    },
    namesAudience: (endpoint, audiences) => {
      this.#requireSynced();
      return this.store.namesAudience(endpoint, audiences);
    },
  };

  /** A token verifies unless it carries `"fake": "reject"`. */
  workloadTokens: WorkloadTokens = {
    verify: async (endpoint, token): Promise<TokenVerification> => {
      this.calls.push(`verify ${endpoint}`);
      if (this.unavailable.has(endpoint)) throw new DependencyUnavailable("oidc-provider", "down (fake)");
      const claims = decodeJwt(token) as Record<string, unknown>;
      if (claims["fake"] === "reject") return { ok: false, detail: "signature does not verify (fake)" };
      const aud = claims["aud"];
      const audiences = typeof aud === "string" ? [aud] : ((aud as string[]) ?? []);
      return { ok: true, token: { issuer: String(claims["iss"]), sub: String(claims["sub"]), audiences, claims } };
    },
  };

  sessions: SessionTokens = {
    verify: async (token): Promise<SessionVerification> => {
      this.calls.push("session");
      if (this.unavailable.has(PLATFORM)) throw new DependencyUnavailable("oidc-provider", "down (fake)");
      const claims = decodeJwt(token) as Record<string, unknown>;
      if (claims["fake"] === "reject") return { ok: false, detail: "signature does not verify (fake)" };
      return { ok: true, issuer: PLATFORM_ISSUER, sub: String(claims["sub"]), groups: new Set((claims["groups"] as string[]) ?? []) };
    },
  };

  /** Back to a healthy world with the same Projects (a running server holds on to these ports). */
  reset(): void {
    this.calls = [];
    this.synced = true;
    this.unavailable.clear();
  }

  #requireSynced(): void {
    if (!this.synced) throw new DependencyUnavailable("konfidence-project-index", "not synced (fake)");
  }
}

/** The whole world of fakes, with Konfidence ports. */
export class KonfidenceWorld extends FakeWorld {
  konfidence = new FakeKonfidence((endpoint) => endpoint === GITHUB || endpoint === CI_NET);
}
