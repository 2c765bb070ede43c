/**
 * The TokenRequest adapter checks a ServiceAccount token once, when it caches it: the token becomes
 * the Authorization header of every allowed request, and no response checks it again
 * (src/headers/mutations.ts SafeHeaderValue). A token that is not a safe header value — CR/LF that
 * would split the header, control characters, non-ASCII — is a broken answer: 503, never cached,
 * never forwarded. Against the wire fake of kube-apiserver.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { Clusters } from "../../src/kube-fleet/clusters.ts";
import { TokenRequests, UNPROVEN_TOKEN_TTL_MS } from "../../src/kube-calls/service-account-tokens.ts";
import { FakeKubeApi } from "../support/wire-fakes/kube-apiserver.ts";

const CLUSTER = "c1";
let kube: FakeKubeApi;
let clusters: Clusters;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-sa-tokens-"));
  kube = await new FakeKubeApi().start();
  kube.serviceAccounts.add("plugin-x/plugin-x");
  clusters = await Clusters.load([{ id: CLUSTER, kubeconfig: kube.writeKubeconfig(dir) }]);
});
afterAll(async () => {
  await clusters.close();
  await kube.stop();
  rmSync(dir, { recursive: true, force: true });
});

function tokens(): TokenRequests {
  return new TokenRequests(clusters, { expirationSeconds: 3600, audiences: [], timeoutMs: 2_000, maxEntries: 100 });
}

describe("a token that is not a safe header value", () => {
  it.each([
    { name: "CR LF (a second header)", token: "abc\r\nx-fundament-user-id: admin" },
    { name: "LF", token: "abc\ndef" },
    { name: "NUL", token: "abc\u0000" },
    { name: "DEL", token: "abc\u007f" },
    { name: "a tab", token: "abc\tdef" },
    { name: "non-ASCII", token: "abcé" },
    { name: "U+2028", token: "abc\u2028" },
    { name: "a lone surrogate", token: "abc\ud800" },
  ])("$name: DependencyUnavailable, asked again next time (not cached)", async ({ token }) => {
    kube.tokenText = token;
    const port = tokens();
    const before = kube.issuedTokens.length;
    await expect(port.token(CLUSTER, "plugin-x", "plugin-x", "uid-1")).rejects.toBeInstanceOf(DependencyUnavailable);
    await expect(port.token(CLUSTER, "plugin-x", "plugin-x", "uid-1")).rejects.toBeInstanceOf(DependencyUnavailable);
    expect(kube.issuedTokens.length - before).toBe(2);
  });
});

describe("a safe token", () => {
  it.each([
    { name: "a JWT", token: "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln" },
    { name: "spaces and every visible ASCII character", token: " !\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~ " },
  ])("$name: returned as issued, as the Bearer credential, and cached", async ({ token }) => {
    kube.tokenText = token;
    const port = tokens();
    const before = kube.issuedTokens.length;
    expect((await port.token(CLUSTER, "plugin-x", "plugin-x", "uid-1"))?.authorization).toBe(`Bearer ${token}`);
    expect((await port.token(CLUSTER, "plugin-x", "plugin-x", "uid-1"))?.authorization).toBe(`Bearer ${token}`);
    expect(kube.issuedTokens.length - before).toBe(1);
  });

  it("a ServiceAccount that does not exist: undefined, not an error", async () => {
    kube.tokenText = undefined;
    expect(await tokens().token(CLUSTER, "plugin-y", "plugin-y")).toBeUndefined();
  });
});

describe("a token past its short TTL (UNPROVEN_TOKEN_TTL_MS) is served only while the ServiceAccount feed proves its cluster", () => {
  // The cache's clock and the feed's proof, moved by the test.
  let clock = 1_000_000;
  let proven: number | undefined;
  const port = () =>
    new TokenRequests(clusters, { expirationSeconds: 3600, audiences: [], timeoutMs: 2_000, maxEntries: 100, now: () => clock, serviceAccountFeed: { provenUntil: () => proven } });

  it.each([
    { name: "the feed proving within the short TTL: kept up to its refresh", provenAgoMs: 1_000, minted: 1 },
    { name: "the feed stuck (a hung watch) since before the TTL: minted again", provenAgoMs: UNPROVEN_TOKEN_TTL_MS + 1, minted: 2 },
    { name: "the feed never synced: minted again", provenAgoMs: undefined, minted: 2 },
  ])("$name", async ({ provenAgoMs, minted }) => {
    kube.tokenText = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
    const tokens = port();
    const before = kube.issuedTokens.length;
    proven = clock;
    await tokens.token(CLUSTER, "plugin-x", "plugin-x", "uid-1");
    clock += 30_000;
    proven = provenAgoMs === undefined ? undefined : clock - provenAgoMs;
    await tokens.token(CLUSTER, "plugin-x", "plugin-x", "uid-1");
    expect(kube.issuedTokens.length - before).toBe(minted);
  });

  it("without a feed, a token is kept for the short TTL only", async () => {
    kube.tokenText = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
    const tokens = new TokenRequests(clusters, { expirationSeconds: 3600, audiences: [], timeoutMs: 2_000, maxEntries: 100, now: () => clock });
    const before = kube.issuedTokens.length;
    await tokens.token(CLUSTER, "plugin-x", "plugin-x", "uid-1");
    clock += UNPROVEN_TOKEN_TTL_MS - 1;
    await tokens.token(CLUSTER, "plugin-x", "plugin-x", "uid-1");
    expect(kube.issuedTokens.length - before).toBe(1);
    clock += 2;
    await tokens.token(CLUSTER, "plugin-x", "plugin-x", "uid-1");
    expect(kube.issuedTokens.length - before).toBe(2);
  });
});
