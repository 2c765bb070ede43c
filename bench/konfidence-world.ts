/**
 * Scenario 5's world: the 1,000-Project Konfidence scenario (test/konfidence/scenario.ts) whose jwks
 * subjects name three local OIDC providers (test/konfidence/oidc-provider.ts: https on 127.0.0.1,
 * ES256 keys), run by the benchmark runner. The server under test verifies workload tokens with the
 * real OidcProviders (discovery, JWKS, verified-token cache); the providers are only asked during
 * the warm-up pass, after which every check is answered from the caches.
 */
import { startLocalProvider, type LocalProvider } from "../test/konfidence/oidc-provider.ts";
import { konfidenceScenario } from "../test/konfidence/scenario.ts";
import { envoyCheck } from "./workload.ts";

export interface KonfidenceBenchWorld {
  readonly providers: string[];
  readonly ca: string;
  readonly projects: number;
}

export interface KonfidenceBench {
  readonly world: KonfidenceBenchWorld;
  /** One workload per Project: its CI reading its own Project's stages (role dev). */
  requests(count: number): Promise<Array<Record<string, unknown>>>;
  stop(): Promise<void>;
}

export async function startKonfidenceBench(projects: number): Promise<KonfidenceBench> {
  const providers: LocalProvider[] = await Promise.all([startLocalProvider(), startLocalProvider(), startLocalProvider()]);
  const keys = providers.map((p) => p.addKey());
  const scenario = konfidenceScenario({ projects, providers: providers.map((p) => p.endpoint) });
  return {
    world: { providers: providers.map((p) => p.endpoint), ca: providers[0]!.ca, projects },
    async requests(count) {
      return Promise.all(
        Array.from({ length: count }, async (_, k) => {
          const i = k % projects;
          const workload = scenario.appWorkload(i);
          const p = providers.findIndex((x) => x.endpoint === workload.endpoint);
          const token = await providers[p]!.sign(keys[p]!, { ...workload.claims }, { expiresInSeconds: 3600 });
          const { method, path } = scenario.readStages(i);
          return envoyCheck(method, path, { authorization: `Bearer ${token}`, "user-agent": "konfidence-cli/0.9" }, "konfidence-api");
        }),
      );
    },
    async stop() {
      await Promise.all(providers.map((p) => p.stop()));
    },
  };
}
