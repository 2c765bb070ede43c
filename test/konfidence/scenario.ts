/**
 * A benchmark-ready Konfidence scenario: many Projects, each with several subjects (sessions and
 * jwks subjects spread over a few providers), and the requests their members make. Benchmarks
 * load `projects` into a ProjectStore (or a real API server), mint tokens with the identities
 * below, and send the requests; tests use it to show that a check's cost does not grow with the
 * number of Projects.
 */
import type { ProjectObject } from "../../src/konfidence/project-index.ts";

export interface ScenarioOptions {
  /** Default 1,000. */
  readonly projects?: number;
  /** Discovery URLs of the workload providers; default three made-up ones. */
  readonly providers?: readonly string[];
  /** The audience every jwks subject requires. */
  readonly audience?: string;
}

export interface WorkloadIdentity {
  /** The discovery URL of the provider that issues the token; its issuer is this URL less the well-known suffix. */
  readonly endpoint: string;
  readonly claims: Readonly<Record<string, unknown>>;
}

export interface ScenarioRequest {
  readonly method: string;
  readonly path: string;
}

export interface KonfidenceScenario {
  readonly projects: readonly ProjectObject[];
  readonly providers: readonly string[];
  readonly audience: string;
  projectName(i: number): string;
  /** The groups of a developer of project i (the session subjects' memberOf). */
  developerGroups(i: number): readonly string[];
  /** The CI workload of project i's app repository, granted `dev`. */
  appWorkload(i: number): WorkloadIdentity;
  /** A read every role may make, and an approval only pm and admin may make, in project i. */
  readStages(i: number): ScenarioRequest;
  approvePromotion(i: number): ScenarioRequest;
}

const DEFAULT_PROVIDERS = [
  "https://token.actions.githubusercontent.com/.well-known/openid-configuration",
  "https://gitlab.example.com/.well-known/openid-configuration",
  "https://ci.example.net/oidc/.well-known/openid-configuration",
];

export function konfidenceScenario(options: ScenarioOptions = {}): KonfidenceScenario {
  const count = options.projects ?? 1_000;
  const providers = options.providers ?? DEFAULT_PROVIDERS;
  const audience = options.audience ?? "https://konfidence.example/api";
  const projectName = (i: number) => `project-${String(i).padStart(4, "0")}`;
  const providerOf = (i: number) => providers[i % providers.length]!;
  const issuerOf = (endpoint: string) => endpoint.replace(/\/\.well-known\/openid-configuration$/, "");

  const projects = Array.from({ length: count }, (_, i): ProjectObject => {
    const name = projectName(i);
    return {
      apiVersion: "konfidence.cloud/v1alpha1",
      kind: "Project",
      metadata: { name },
      spec: {
        roleBindings: {
          admin: [
            { session: { memberOf: ["platform-admins", `${name}-admins`] } },
            { jwks: { endpoint: providerOf(i), audience, claims: { sub: `repo:acme/${name}-infra:*`, ref: "refs/heads/main" } } },
          ],
          pm: [{ session: { memberOf: [`${name}-pms`] } }],
          dev: [
            { session: { memberOf: [`${name}-devs`, `${name}-oncall`] } },
            { jwks: { endpoint: providerOf(i), audience, claims: { sub: `repo:acme/${name}-app:*`, ref: "refs/heads/*" } } },
            { jwks: { endpoint: providerOf(i + 1), audience, claims: { project_path: `acme/${name}-*` } } },
          ],
        },
      },
    };
  });

  return {
    projects,
    providers,
    audience,
    projectName,
    developerGroups: (i) => [`${projectName(i)}-devs`, "staff"],
    appWorkload: (i) => ({
      endpoint: providerOf(i),
      claims: { iss: issuerOf(providerOf(i)), aud: audience, sub: `repo:acme/${projectName(i)}-app:ref:refs/heads/main`, ref: "refs/heads/main" },
    }),
    readStages: (i) => ({ method: "GET", path: `/api/v1/projects/${projectName(i)}/stages` }),
    approvePromotion: (i) => ({ method: "POST", path: `/api/v1/projects/${projectName(i)}/vectorPromotions/p-1/approve` }),
  };
}
