/**
 * konfidence-api over real gRPC with REAL token verification: two local OIDC providers (a CI
 * provider for workloads, the platform's for sessions), trusted through `konfidence.providers.caFile`
 * and the allow-list exactly as a deployment configures them. Only the Project index is the
 * in-memory store, loaded the way the watch loads it.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KonfidencePorts } from "../../src/konfidence/ports.ts";
import { ProjectStore } from "../../src/konfidence/project-index.ts";
import { connectVerifiers, providerTrust, type Verifiers } from "../../src/server/konfidence-ports.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { project } from "./fakes.ts";
import { newSigningKey, type SigningKey, startLocalProvider, type LocalProvider } from "./oidc-provider.ts";

const AUD = "https://konfidence.example/api";

class RealOidcWorld extends FakeWorld {
  konfidence: KonfidencePorts;
  constructor(konfidence: KonfidencePorts) {
    super();
    this.konfidence = konfidence;
  }
}

let ci: LocalProvider;
let platform: LocalProvider;
let ciKey: SigningKey;
let platformKey: SigningKey;
let verifiers: Verifiers;
let server: TestServer;
let dir: string;

beforeAll(async () => {
  [ci, platform] = await Promise.all([startLocalProvider(), startLocalProvider()]);
  ciKey = ci.addKey();
  platformKey = platform.addKey();
  dir = mkdtempSync(join(tmpdir(), "portcullis-konfidence-"));
  // Both providers serve the same self-signed certificate; the file is what an operator would mount.
  writeFileSync(join(dir, "providers-ca.pem"), ci.ca);
  const config = testConfig({
    konfidence: {
      providers: { allowList: [ci.endpoint], caFile: join(dir, "providers-ca.pem"), jwksCooldownMs: 60_000 },
      session: { discoveryUrl: platform.endpoint, audience: "konfidence-ui", cookie: "kden-session" },
    },
  });
  const konfidence = config.konfidence!;
  verifiers = connectVerifiers(konfidence);
  const store = new ProjectStore(providerTrust(konfidence.providers));
  store.put(
    project("alpha", {
      pm: [{ session: { memberOf: ["alpha-pms"] } }],
      dev: [{ jwks: { endpoint: ci.endpoint, audience: AUD, claims: { sub: "repo:acme/app:*" } } }],
    }),
  );
  const world = new RealOidcWorld({
    projects: { byName: (name) => store.byName(name), namesProvider: (e) => store.namesProvider(e), namesAudience: (e, a) => store.namesAudience(e, a) },
    workloadTokens: verifiers.workloadTokens,
    sessions: verifiers.sessions!,
  });
  server = await startTestServer(world, config);
});

afterAll(async () => {
  await server.stop();
  await verifiers.close();
  await Promise.all([ci.stop(), platform.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const check = (path: string, headers: Record<string, string>, method = "GET") => server.check({ method, path, headers, policy: "konfidence-api" });

describe("konfidence-api with real OIDC providers", () => {
  it("allows a CI workload whose token the allow-listed provider signed", async () => {
    const token = await ci.sign(ciKey, { sub: "repo:acme/app:ref:refs/heads/main", aud: AUD });
    expect(await check("/api/v1/projects/alpha/stages", { authorization: `Bearer ${token}` })).toEqual({
      allowed: true,
      grpc: 0,
      set: { "x-konfidence-issuer": ci.issuer, "x-konfidence-subject": "repo:acme/app:ref:refs/heads/main", "x-konfidence-roles": "dev" },
      appendActions: ["OVERWRITE_IF_EXISTS_OR_ADD"],
      removed: [],
    });
  });

  it("allows an interactive user whose session the platform provider signed", async () => {
    const token = await platform.sign(platformKey, { sub: "ada", aud: "konfidence-ui", groups: ["alpha-pms"] });
    expect(await check("/api/v1/projects/alpha/vectorPromotions/p-1/approve", { cookie: `kden-session=${token}`, "sec-fetch-site": "same-origin" }, "POST")).toMatchObject({
      allowed: true,
      set: { "x-konfidence-issuer": `session:${platform.issuer}`, "x-konfidence-subject": "ada", "x-konfidence-roles": "pm" },
    });
  });

  it.each([
    { name: "a key the provider never published", mint: () => ci.sign(newSigningKey(), { sub: "repo:acme/app:x", aud: AUD }), reason: "invalid-token", http: 401 },
    { name: "an expired token", mint: () => ci.sign(ciKey, { sub: "repo:acme/app:x", aud: AUD }, { expiresInSeconds: -120 }), reason: "invalid-token", http: 401 },
    { name: "the platform's session token sent as Bearer (no Project names it)", mint: () => platform.sign(platformKey, { sub: "ada", aud: AUD }), reason: "invalid-token", http: 401 },
    { name: "a valid token of another repository", mint: () => ci.sign(ciKey, { sub: "repo:acme/other:x", aud: AUD }), reason: "no-role", http: 403 },
  ])("denies $name → $http $reason", async ({ mint, reason, http }) => {
    expect(await check("/api/v1/projects/alpha/stages", { authorization: `Bearer ${await mint()}` })).toMatchObject({ allowed: false, reason, http });
  });

  it("never asks the provider for keys once per forged kid", async () => {
    const before = ci.fetches.jwks;
    const forged = newSigningKey();
    for (let i = 0; i < 100; i++) {
      const token = await ci.sign(forged, { sub: "repo:acme/app:x", aud: AUD }, { kid: `forged-${i}` });
      expect(await check("/api/v1/projects/alpha/stages", { authorization: `Bearer ${token}` })).toMatchObject({ reason: "invalid-token" });
    }
    expect(ci.fetches.jwks - before).toBeLessThanOrEqual(1);
  });
});
