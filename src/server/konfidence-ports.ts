/**
 * Konfidence's ports, from the `konfidence` configuration section: the Project watch, the OIDC
 * providers and the session provider (its policy is composed in policies.ts).
 */
import { readFileSync } from "node:fs";
import type { Logger } from "pino";
import { discoveryEndpoint } from "../konfidence-model/discovery-url.ts";
import { OidcProviders } from "../konfidence/oidc.ts";
import type { KonfidencePorts } from "../konfidence/ports.ts";
import { ProjectIndex } from "../konfidence/project-index.ts";
import { ProviderHttp } from "../konfidence/provider-http.ts";
import { RegisteredProjects } from "../konfidence/registered-projects.ts";
import { OidcSessions } from "../konfidence/session.ts";
import type { ProviderTrust } from "../konfidence-model/subjects.ts";
import { ConfigError } from "../config/load.ts";
import type { KonfidenceConfig } from "../config/konfidence-schema.ts";
import { type Cluster, Clusters } from "../kube-fleet/clusters.ts";

export interface KonfidenceConnection {
  readonly ports: KonfidencePorts;
  readonly projects: ProjectIndex | RegisteredProjects;
  /** The Project index the cluster registry attaches its cluster to, where `clusterId` is not a static cluster. */
  readonly registered: RegisteredProjects | undefined;
  stop(): Promise<void>;
}

/**
 * Starts the Project watch in the background; readiness waits for it through `projects.hasSynced`.
 * With `registry`, a `clusterId` not in clusters[] is the registry's to attach (RegisteredProjects).
 */
export async function connectKonfidence(
  config: KonfidenceConfig,
  clusters: Clusters,
  logger: Logger,
  watchInactivityMs: number,
  registry = false,
): Promise<KonfidenceConnection> {
  const options = { logger, inactivityMs: watchInactivityMs, trusts: providerTrust(config.providers) };
  const registeredId = registry && "clusterId" in config.cluster && clusters.get(config.cluster.clusterId) === undefined ? config.cluster.clusterId : undefined;
  const registered = registeredId === undefined ? undefined : new RegisteredProjects(registeredId, options);
  const projects = registered ?? new ProjectIndex(await projectCluster(config, clusters), options);
  const verifiers = connectVerifiers(config);
  if (projects instanceof ProjectIndex) projects.start().catch((err: unknown) => logger.error({ err }, "konfidence project index failed to start"));
  return {
    ports: { projects, workloadTokens: verifiers.workloadTokens, ...(verifiers.sessions === undefined ? {} : { sessions: verifiers.sessions }) },
    projects,
    registered,
    async stop() {
      await projects.stop();
      await verifiers.close();
    },
  };
}

export interface Verifiers {
  readonly workloadTokens: OidcProviders;
  readonly sessions: OidcSessions | undefined;
  close(): Promise<void>;
}

/** The OIDC providers' discovery, JWKS and verified-token cache, as `konfidence.providers` configures them, over `http`. */
export function oidcProviders(p: KonfidenceConfig["providers"], http: ProviderHttp): OidcProviders {
  return new OidcProviders({
    http,
    discoveryTtlMs: p.discoveryTtlMs,
    jwksCooldownMs: p.jwksCooldownMs,
    jwksMaxAgeMs: p.jwksMaxAgeMs,
    timeoutMs: p.timeoutMs,
    clockToleranceSeconds: p.clockToleranceSeconds,
    verifiedCacheMaxEntries: p.verifiedCacheMaxEntries,
    failureBackoffInitialMs: p.failureBackoffInitialMs,
    failureBackoffMaxMs: p.failureBackoffMaxMs,
  });
}

/** Token verification over the configured providers: one connection pool, limits and CA for all of them. */
export function connectVerifiers(config: KonfidenceConfig): Verifiers {
  const { providers: p } = config;
  const http = new ProviderHttp({
    ...(p.caFile === undefined ? {} : { ca: readCa(p.caFile) }),
    timeoutMs: p.timeoutMs,
    maxResponseBytes: p.maxResponseBytes,
  });
  const oidc = oidcProviders(p, http);
  const s = config.session;
  const sessions =
    s === undefined
      ? undefined
      : new OidcSessions(oidc, http, {
          endpoint: discoveryEndpoint(s.discoveryUrl)!,
          audience: s.audience,
          groupsClaim: s.groupsClaim,
          userInfo: s.userInfo,
          userInfoTtlMs: s.userInfoTtlMs,
          cacheMaxEntries: p.verifiedCacheMaxEntries,
        });
  return { workloadTokens: oidc, sessions, close: () => http.close() };
}

/** ADR-0028 open question 1: providers named on a Project are trusted only if the platform lists them, unless `any-https`. */
export function providerTrust(providers: KonfidenceConfig["providers"]): ProviderTrust {
  if (providers.trust === "any-https") return () => true;
  const listed = new Set(providers.allowList.map((url) => discoveryEndpoint(url)!));
  return (endpoint) => listed.has(endpoint);
}

async function projectCluster(config: KonfidenceConfig, clusters: Clusters): Promise<Cluster> {
  if ("clusterId" in config.cluster) {
    const cluster = clusters.get(config.cluster.clusterId);
    if (cluster === undefined) throw new ConfigError(`konfidence.cluster.clusterId: ${config.cluster.clusterId} is not in clusters[]`);
    return cluster;
  }
  const own = await Clusters.load([{ id: "konfidence", ...config.cluster }]);
  return own.get("konfidence")!;
}

function readCa(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`konfidence.providers.caFile: cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
}
