/**
 * The `sub` of an OIDC token (workload and session) is bounded as OpenID Connect Core §2 bounds it:
 * it becomes x-konfidence-subject and a log field. Signed by a real local provider, verified for real.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_SUB_LENGTH, OidcProviders } from "../../src/konfidence/oidc.ts";
import { ProviderHttp } from "../../src/konfidence/provider-http.ts";
import { type LocalProvider, startLocalProvider } from "./oidc-provider.ts";
import { TEST_OIDC_OPTIONS } from "../support/oidc-providers.ts";

let p: LocalProvider;
let http: ProviderHttp;
let providers: OidcProviders;
let key: ReturnType<LocalProvider["addKey"]>;

beforeAll(async () => {
  p = await startLocalProvider();
  key = p.addKey();
  http = new ProviderHttp({ ca: p.ca, timeoutMs: 1_000, maxResponseBytes: 65_536 });
  providers = new OidcProviders({ http, ...TEST_OIDC_OPTIONS });
});
afterAll(async () => {
  await http.close();
  await p.stop();
});

describe("sub length", () => {
  it.each([
    { sub: "a", accepted: true },
    { sub: "repo:acme/app:ref:refs/heads/main", accepted: true },
    { sub: "s".repeat(MAX_SUB_LENGTH), accepted: true },
    { sub: "s".repeat(MAX_SUB_LENGTH + 1), accepted: false },
    { sub: "s".repeat(8_000), accepted: false },
    { sub: "", accepted: false },
  ])("a sub of $sub.length characters: accepted $accepted", async ({ sub, accepted }) => {
    const token = await p.sign(key, { sub, aud: "https://konfidence.example/api" });
    const result = await providers.verify(p.endpoint, token);
    if (accepted) expect(result).toMatchObject({ ok: true, token: { sub } });
    else expect(result).toEqual({ ok: false, detail: `sub is empty or longer than ${MAX_SUB_LENGTH} characters` });
  });
});
