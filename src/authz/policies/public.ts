/**
 * public: the platform endpoints that carry no token by design, listed per service
 * (`platform.services[].public`): FUN-19 §5's GetPluginDefinition ("the controller fetching a
 * definition has no user session to present"), the API-key exchange (the key itself is the
 * credential, in Authorization), login and its callback. No token is read or required; whatever the
 * caller sent goes on to the service, which authenticates it itself. Header hygiene still applies: a
 * client-sent x-fundament-* header never reaches the upstream, whatever route it came in on.
 *
 * Only the exact paths the configuration lists are public: a route that names this policy for
 * anything else (a hand-edited Envoy config) is refused, so a method not listed never becomes public.
 */
import { allow, deny } from "../decision.ts";
import type { Policy } from "../policy.ts";
import { passed } from "../trace.ts";
import { mutations } from "../../headers/mutations.ts";
import { platformService } from "./platform-api.ts";

export interface PublicDeps {
  /** Per service name, its public paths. */
  readonly publicPaths: ReadonlyMap<string, ReadonlySet<string>>;
}

export function publicRoutes(deps: PublicDeps): Policy {
  const services = new Set(deps.publicPaths.keys());
  return {
    name: "public",
    bodyShape: "json",
    async decide(request) {
      const service = platformService(request, services);
      if (!passed("platform-service", service !== undefined)) return deny("no-policy", "no platform service is configured for this route");
      if (!passed("listed-public", deps.publicPaths.get(service!)!.has(request.path))) return deny("no-policy", "this path is not public");
      return allow(mutations(request.headers, {}));
    },
  };
}
