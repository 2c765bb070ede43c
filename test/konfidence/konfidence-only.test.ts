/**
 * A Konfidence-only deployment (issue 13): no tokens, openfga or clusters. Only konfidence-api is
 * served; a route naming a Fundament policy is denied 403 `no-policy` (a routing mistake no retry
 * fixes), never allowed and never a 503; the Konfidence routes work as ever. Over real gRPC.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import { policiesFor } from "../../src/server/policies.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { ids } from "../support/tokens.ts";
import { KonfidenceWorld, mintToken, PLATFORM, PLATFORM_ISSUER, project } from "./fakes.ts";

const konfidence = { session: { discoveryUrl: PLATFORM, audience: "konfidence-ui", cookie: "kden-session" } };
const config = testConfig({ tokens: undefined, openfga: undefined, clusters: [], konfidence });

let world: KonfidenceWorld;
let server: TestServer;
beforeAll(async () => {
  world = new KonfidenceWorld();
  world.konfidence.store.put(project("alpha", { dev: [{ session: { memberOf: ["alpha-devs"] } }] }));
  server = await startTestServer(world, config);
});
afterAll(async () => server.stop());

describe("a Konfidence-only deployment", () => {
  it("parses without the Fundament sections", () => {
    expect(configSchema.parse({ konfidence })).toMatchObject({ clusters: [], platform: { services: [] } });
    expect(config.tokens).toBeUndefined();
    expect(config.openfga).toBeUndefined();
  });

  it("serves konfidence-api only", () => {
    expect(policiesFor(config, world).map((p) => p.name)).toEqual(["konfidence-api"]);
  });

  it.each([
    { policy: "kube-api-proxy", path: `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods` },
    { policy: "plugin-proxy", path: `/installations/${ids.installation}/runtime/index.html` },
    { policy: "plugin-assets", path: "/plugins/cert-manager/1.0.0/console/index.js" },
    { policy: "platform-api", path: "/organization.v1.OrganizationService/List" },
    { policy: "public", path: "/login" },
  ])("a $policy route is 403 no-policy", async ({ policy, path }) => {
    const res = await server.check({ method: "GET", path, headers: { authorization: "Bearer x" }, policy });
    expect(res).toMatchObject({ allowed: false, grpc: 7, http: 403, reason: "no-policy" });
  });

  it("a Konfidence request is decided as ever", async () => {
    const cookie = `kden-session=${await mintToken({ iss: PLATFORM_ISSUER, sub: "ada", groups: ["alpha-devs"], aud: "konfidence-ui" })}`;
    const res = await server.check({ method: "GET", path: "/api/v1/projects/alpha/stages", headers: { cookie, "sec-fetch-site": "same-origin" }, policy: "konfidence-api" });
    expect(res).toMatchObject({ allowed: true, set: { "x-konfidence-subject": "ada", "x-konfidence-roles": "dev" } });
  });
});
