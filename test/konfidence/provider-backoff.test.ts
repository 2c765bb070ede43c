/**
 * A broken OIDC provider is not fetched once per check (issue 11): after a failed discovery or JWKS
 * fetch, fetches to that provider pause (1 s, doubled per further failure, at most 30 s; reset by a
 * success) while its checks answer 503 at once. Against the LOCAL provider (https on 127.0.0.1),
 * with the verifier's clock frozen and moved by the test, so the fetch counts are exact.
 */
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { afterEach, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import type { KonfidencePorts } from "../../src/konfidence/ports.ts";
import { backoffDelayMs } from "../../src/konfidence/provider-backoff.ts";
import { ProjectStore } from "../../src/konfidence/project-index.ts";
import { OidcProviders } from "../../src/konfidence/oidc.ts";
import { ProviderHttp } from "../../src/konfidence/provider-http.ts";
import type { ProviderBackoffChange } from "../../src/metrics/events.ts";
import { createMetrics } from "../../src/server/prometheus.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, testConfig } from "../support/server.ts";
import { project } from "./fakes.ts";
import { type LocalProvider, type SigningKey, startLocalProvider } from "./oidc-provider.ts";

const AUD = "https://konfidence.example/api";
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((c) => c()));
});

async function provider(): Promise<{ p: LocalProvider; key: SigningKey }> {
  const p = await startLocalProvider();
  cleanups.push(() => p.stop());
  return { p, key: p.addKey() };
}

/** A verifier whose clock only the test moves. */
function clockedVerifier(ca: string, options: { timeoutMs?: number; jwksCooldownMs?: number } = {}) {
  let now = Date.now();
  const http = new ProviderHttp({ ca, timeoutMs: options.timeoutMs ?? 1_000, maxResponseBytes: 65_536 });
  cleanups.push(() => http.close());
  const providers = new OidcProviders({
    http,
    discoveryTtlMs: 3_600_000,
    jwksCooldownMs: options.jwksCooldownMs ?? 30_000,
    jwksMaxAgeMs: 3_600_000,
    timeoutMs: options.timeoutMs ?? 1_000,
    clockToleranceSeconds: 5,
    verifiedCacheMaxEntries: 1_000,
    failureBackoffInitialMs: 1_000,
    failureBackoffMaxMs: 30_000,
    now: () => now,
  });
  return { providers, advance: (ms: number) => void (now += ms) };
}

/** The backoff changes published while `run` runs, as `provider seconds`. */
async function backoffEvents(run: () => Promise<void>): Promise<number[]> {
  const seen: number[] = [];
  const record = (m: unknown) => seen.push((m as ProviderBackoffChange).seconds);
  subscribe("portcullis:oidc-provider-backoff", record);
  try {
    await run();
  } finally {
    unsubscribe("portcullis:oidc-provider-backoff", record);
  }
  return seen;
}

const unavailable = (promise: Promise<unknown>) => expect(promise).rejects.toBeInstanceOf(DependencyUnavailable);

describe("the pause", () => {
  it("doubles from the initial pause up to the bound", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 60, 2_000].map((n) => backoffDelayMs(n, 1_000, 30_000))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000, 30_000,
    ]);
    expect(backoffDelayMs(3, 250, 600)).toBe(600);
  });
});

describe("a provider whose discovery fails", () => {
  it("1,200 checks over 120 s (one per 100 ms): 8 discovery fetches, not 1,200; pauses 1, 2, 4, 8, 16, 30, 30, 30 s", async () => {
    const { p, key } = await provider();
    const { providers, advance } = clockedVerifier(p.ca);
    const token = await p.sign(key, { sub: "repo:acme/app:x", aud: AUD }, { expiresInSeconds: 3_600 });
    p.misbehave.discoveryStatus = 500;
    const fetchedAt: number[] = [];
    const events = await backoffEvents(async () => {
      for (let tick = 0; tick < 1_200; tick++) {
        const before = p.fetches.discovery;
        await unavailable(providers.verify(p.endpoint, token));
        if (p.fetches.discovery > before) fetchedAt.push(tick / 10);
        advance(100);
      }
    });
    // Fetches at 0, then after each pause: 0+1, 1+2, 3+4, 7+8, 15+16, 31+30, 61+30, 91+30 (= 121, past the run).
    expect(fetchedAt).toEqual([0, 1, 3, 7, 15, 31, 61, 91]);
    expect(p.fetches).toEqual({ discovery: 8, jwks: 0, userinfo: 0 });
    expect(events).toEqual([1, 2, 4, 8, 16, 30, 30, 30]);
  });

  it("recovers when the provider heals, and a later failure starts again from the initial pause", async () => {
    const { p, key } = await provider();
    const { providers, advance } = clockedVerifier(p.ca, { jwksCooldownMs: 0 });
    const token = await p.sign(key, { sub: "repo:acme/app:x", aud: AUD }, { expiresInSeconds: 3_600 });
    p.misbehave.discoveryStatus = 503;
    const events = await backoffEvents(async () => {
      await unavailable(providers.verify(p.endpoint, token)); // fetch 1, pause 1 s
      advance(1_000);
      await unavailable(providers.verify(p.endpoint, token)); // fetch 2, pause 2 s
      delete p.misbehave.discoveryStatus;
      // Healed, but still within the pause: answered 503 without a fetch.
      advance(1_999);
      await unavailable(providers.verify(p.endpoint, token));
      expect(p.fetches.discovery).toBe(2);
      advance(1);
      expect(await providers.verify(p.endpoint, token)).toMatchObject({ ok: true });
      expect(p.fetches).toEqual({ discovery: 3, jwks: 1, userinfo: 0 });
    });
    expect(events).toEqual([1, 2, 0]);

    // Broken again (a new JWKS is needed for an unknown kid past the cooldown): the pause is 1 s again.
    p.misbehave.jwksStatus = 500;
    const again = await backoffEvents(async () => {
      const rotated = p.addKey();
      await unavailable(providers.verify(p.endpoint, await p.sign(rotated, { sub: "y", aud: AUD }, { expiresInSeconds: 3_600 })));
    });
    expect(again).toEqual([1]);
  });

  it("a cold burst of 50 concurrent checks shares one fetch and is charged one failure", async () => {
    const { p, key } = await provider();
    const { providers } = clockedVerifier(p.ca);
    p.misbehave.discoveryStatus = 500;
    const tokens = await Promise.all(Array.from({ length: 50 }, (_, i) => p.sign(key, { sub: `w${i}`, aud: AUD })));
    const events = await backoffEvents(async () => {
      const results = await Promise.allSettled(tokens.map((t) => providers.verify(p.endpoint, t)));
      expect(results.every((r) => r.status === "rejected" && r.reason instanceof DependencyUnavailable)).toBe(true);
    });
    expect(p.fetches.discovery).toBe(1);
    expect(events).toEqual([1]);
  });
});

describe("a provider whose JWKS fails", () => {
  it.each([
    { name: "an error status", breakIt: (p: LocalProvider) => void (p.misbehave.jwksStatus = 500), heal: (p: LocalProvider) => void delete p.misbehave.jwksStatus },
    { name: "garbage", breakIt: (p: LocalProvider) => void (p.misbehave.jwksBody = "<html>oops</html>"), heal: (p: LocalProvider) => void delete p.misbehave.jwksBody },
    { name: "a document that is no key set", breakIt: (p: LocalProvider) => void (p.misbehave.jwksBody = '{"keys":"none"}'), heal: (p: LocalProvider) => void delete p.misbehave.jwksBody },
    { name: "slowness past the deadline", breakIt: (p: LocalProvider) => void (p.misbehave.delayMs = 400), heal: (p: LocalProvider) => void delete p.misbehave.delayMs },
  ])("$name: 41 checks within the pause → one JWKS fetch, all 503; healed → verified", async ({ name, breakIt, heal }) => {
    const { p, key } = await provider();
    const { providers, advance } = clockedVerifier(p.ca, { timeoutMs: 200 });
    // Discovery first, healthy, so the JWKS is what fails (slowness would hit discovery too).
    await providers.metadata(p.endpoint);
    breakIt(p);
    const tokens = await Promise.all(Array.from({ length: 41 }, (_, i) => p.sign(key, { sub: `w${i}`, aud: AUD })));
    for (const token of tokens) await unavailable(providers.verify(p.endpoint, token));
    expect(p.fetches, name).toEqual({ discovery: 1, jwks: 1, userinfo: 0 });
    heal(p);
    advance(1_000);
    expect(await providers.verify(p.endpoint, tokens[0]!)).toMatchObject({ ok: true });
    expect(p.fetches.jwks).toBe(2);
  });

  it("keys already fetched keep verifying while a refetch is paused: only fetches are refused", async () => {
    const { p, key } = await provider();
    const { providers } = clockedVerifier(p.ca, { jwksCooldownMs: 0 });
    expect(await providers.verify(p.endpoint, await p.sign(key, { sub: "a", aud: AUD }))).toMatchObject({ ok: true });
    p.misbehave.jwksStatus = 500;
    // An unknown kid makes jose refetch; the refetch fails and the provider pauses ...
    const rotated = p.addKey();
    await unavailable(providers.verify(p.endpoint, await p.sign(rotated, { sub: "b", aud: AUD })));
    await unavailable(providers.verify(p.endpoint, await p.sign(rotated, { sub: "c", aud: AUD })));
    expect(p.fetches.jwks).toBe(2);
    // ... while a new token signed with the key already held verifies from the cached set.
    expect(await providers.verify(p.endpoint, await p.sign(key, { sub: "d", aud: AUD }))).toMatchObject({ ok: true });
    expect(p.fetches.jwks).toBe(2);
  });
});

describe("through the konfidence-api policy and the metrics", () => {
  it("answers 503 dependency-unavailable during the pause and shows it on portcullis_oidc_provider_backoff_seconds", async () => {
    const { p, key } = await provider();
    const { providers, advance } = clockedVerifier(p.ca);
    const store = new ProjectStore(() => true);
    store.put(project("alpha", { dev: [{ jwks: { endpoint: p.endpoint, audience: AUD, claims: { sub: "repo:acme/app:*" } } }] }));
    const konfidence: KonfidencePorts = { projects: store, workloadTokens: providers };
    const world = Object.assign(new FakeWorld(), { konfidence });
    const server = await startTestServer(world, testConfig({ konfidence: { providers: { allowList: [p.endpoint] } } }));
    cleanups.push(() => server.stop());
    const registry = createMetrics({ indexSizes: () => [] });
    const metric = async () =>
      (await registry.metrics()).split("\n").filter((l) => l.startsWith("portcullis_oidc_provider_") && l.includes(p.endpoint));
    const check = async (sub: string) =>
      server.check({
        path: "/api/v1/projects/alpha/stages",
        headers: { authorization: `Bearer ${await p.sign(key, { sub, aud: AUD })}` },
        policy: "konfidence-api",
      });

    p.misbehave.discoveryStatus = 500;
    for (let i = 0; i < 20; i++) {
      expect(await check(`repo:acme/app:${i}`)).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable" });
    }
    expect(p.fetches.discovery).toBe(1);
    expect(await metric()).toEqual([
      `portcullis_oidc_provider_backoff_seconds{provider="${p.endpoint}"} 1`,
      `portcullis_oidc_provider_fetches_refused_total{provider="${p.endpoint}"} 19`,
    ]);

    delete p.misbehave.discoveryStatus;
    advance(1_000);
    expect(await check("repo:acme/app:healed")).toMatchObject({ allowed: true, set: { "x-konfidence-roles": "dev" } });
    expect(await metric()).toEqual([
      `portcullis_oidc_provider_backoff_seconds{provider="${p.endpoint}"} 0`,
      `portcullis_oidc_provider_fetches_refused_total{provider="${p.endpoint}"} 19`,
    ]);
  });
});
