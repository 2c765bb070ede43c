/**
 * public: the platform endpoints that carry no token by design, listed per service
 * (`platform.services[].public`): FUN-19 §5's GetPluginDefinition ("the controller fetching a
 * definition has no user session to present … so the fetch carries no token"), the API-key exchange
 * (the key itself is the credential, in Authorization), login and its callback. No token is read or
 * required, and no Fundament token goes on to the service, whichever carrier it came in:
 *  - the fundament_auth cookie is removed (the caller's other cookies go on: /callback reads its
 *    OAuth state from its own session cookie), and so is a WebSocket bearer subprotocol;
 *  - Authorization goes on unless it holds a token authn-api minted or one for a Fundament audience
 *    (read from its claims, unverified: a token portcullis cannot verify may still verify behind
 *    it) — so the API key (`Bearer fun_…`) reaches ExchangeToken, and a workload's own token
 *    reaches ExchangeWorkloadToken, but a PluginToken or UserToken reaches no public endpoint.
 * Nothing is refused for what it carries: none of these endpoints reads a Fundament token
 * (fundament-oss/fundament: organization-api skips authentication for GetPluginDefinition,
 * ExchangeToken reads an API key from Authorization only, login and callback read no token), so a
 * cookie a plugin page planted cannot lock a user out of login, and no key set is consulted: login
 * works while authn-api's JWKS cannot be fetched. Header hygiene still applies: a client-sent
 * x-fundament-* header never reaches the upstream, whatever route it came in on.
 *
 * Only the exact paths the configuration lists are public: a route that names this policy for
 * anything else (a hand-edited Envoy config) is refused, so a method not listed never becomes public.
 */
import { allow, deny } from "../decision.ts";
import { FUNDAMENT_COOKIE } from "../fundament-identity.ts";
import type { Policy } from "../policy.ts";
import { trace, traceVerdict } from "../trace.ts";
import { cookieDropped, mutations, websocketBearerDropped } from "../../headers/mutations.ts";
import { holdsTokenOf } from "../../tokens/credentials.ts";
import { PLUGIN_AUDIENCE, USER_AUDIENCE } from "../../tokens/fundament.ts";
import { platformService } from "./platform-api.ts";

export interface PublicDeps {
  /** Per service name, its public paths. */
  readonly publicPaths: ReadonlyMap<string, ReadonlySet<string>>;
  /** `tokens.issuer`: the `iss` of every token authn-api mints. */
  readonly issuer: string;
}

const FUNDAMENT_AUDIENCES = [USER_AUDIENCE, PLUGIN_AUDIENCE] as const;

export function publicRoutes(deps: PublicDeps): Policy {
  const services = new Set(deps.publicPaths.keys());
  return {
    name: "public",
    bodyShape: "json",
    async decide(request) {
      const service = platformService(request, services);
      if (!traceVerdict("platform-service", service !== undefined)) return deny("no-policy", "no platform service is configured for this route");
      if (!traceVerdict("listed-public", deps.publicPaths.get(service!)!.has(request.path))) return deny("no-policy", "this path is not public");
      const cookie = cookieDropped(request.headers, FUNDAMENT_COOKIE);
      const ws = websocketBearerDropped(request.headers);
      const fundamentBearer = holdsTokenOf(request.headers["authorization"], deps.issuer, FUNDAMENT_AUDIENCES);
      trace("authorization", fundamentBearer ? "a Fundament token: removed" : "goes on");
      return allow(
        mutations(request.headers, {
          set: { ...cookie.set, ...ws.set },
          remove: [...cookie.remove, ...ws.remove, ...(fundamentBearer ? ["authorization"] : [])],
        }),
      );
    },
  };
}
