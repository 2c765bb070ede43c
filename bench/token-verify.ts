/**
 * Fundament token verification, HS256 beside authn-api's asymmetric keys (FUN-17 §9), in one run:
 * the REAL TokenVerifier, per algorithm, on this process's CPU time.
 *  - cold: every token distinct (a first sight: signature and claims verified);
 *  - warm: the same tokens again (the verified-token cache answers, as on the warm check path).
 * The key set is jose's local JWKS (what the remote set holds once fetched), so no network is
 * measured. Each figure is also given as a ratio to HS256 in the same run.
 *
 *   node bench/token-verify.ts [--tokens 5000] [--json]
 */
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { createLocalJWKSet, SignJWT } from "jose";
import { type AsymmetricAlgorithm, TokenVerifier } from "../src/tokens/fundament.ts";
import { newAuthnKey } from "../test/support/jwks-server.ts";
import { pluginClaims, SECRET, sign } from "../test/support/tokens.ts";

const { values } = parseArgs({ options: { tokens: { type: "string", default: "5000" }, json: { type: "boolean", default: false } }, strict: true });
const n = Number(values.tokens);
const ASYMMETRIC = ["EdDSA", "ES256", "RS256"] as const;
const keys = Object.fromEntries(ASYMMETRIC.map((alg) => [alg, newAuthnKey(alg)])) as Record<AsymmetricAlgorithm, ReturnType<typeof newAuthnKey>>;

const verifier = new TokenVerifier({
  mode: "migration",
  secrets: [new TextEncoder().encode(SECRET)],
  publicKeys: {
    keys: createLocalJWKSet({ keys: ASYMMETRIC.map((alg) => keys[alg].jwk) }),
    algorithms: [...ASYMMETRIC],
    cacheMaxAgeMs: 600_000,
  },
  issuer: "fundament-authn-api",
  clockToleranceSeconds: 5,
  maxLifetimeSeconds: { user: 86_400, plugin: 900 },
  cacheMaxEntries: n * 5,
});

async function tokensFor(alg: "HS256" | AsymmetricAlgorithm): Promise<string[]> {
  const now = Math.floor(Date.now() / 1000);
  return Promise.all(
    Array.from({ length: n }, () =>
      alg === "HS256"
        ? sign(pluginClaims())
        : new SignJWT({ ...pluginClaims(), jti: randomUUID() }).setProtectedHeader({ alg, kid: keys[alg].kid }).setIssuer("fundament-authn-api").setIssuedAt(now).setExpirationTime(now + 900).sign(keys[alg].privateKey),
    ),
  );
}

/** CPU microseconds per verification over `tokens`, all of which must verify. */
async function cpuPerVerification(tokens: string[]): Promise<number> {
  const start = process.cpuUsage();
  for (const token of tokens) {
    const result = await verifier.verify(token);
    if (!result.ok) throw new Error(`a benchmark token did not verify: ${result.detail}`);
  }
  const used = process.cpuUsage(start);
  return (used.user + used.system) / tokens.length;
}

const rows: Array<{ alg: string; coldUs: number; warmUs: number }> = [];
for (const alg of ["HS256", ...ASYMMETRIC] as const) {
  const tokens = await tokensFor(alg);
  await cpuPerVerification((await tokensFor(alg)).slice(0, Math.min(500, n))); // JIT warm-up on other tokens
  const coldUs = await cpuPerVerification(tokens);
  const warmUs = await cpuPerVerification(tokens);
  rows.push({ alg, coldUs, warmUs });
}

const hs = rows[0]!;
if (values.json) {
  process.stdout.write(`${JSON.stringify({ tokens: n, rows })}\n`);
} else {
  process.stdout.write(`token verification, ${n} distinct PluginTokens per algorithm, CPU µs per verification (ratio to HS256)\n`);
  process.stdout.write(`| alg | cold (first sight) | warm (verified-token cache) |\n| --- | --- | --- |\n`);
  for (const r of rows) {
    process.stdout.write(`| ${r.alg} | ${r.coldUs.toFixed(1)} µs (${(r.coldUs / hs.coldUs).toFixed(2)}×) | ${r.warmUs.toFixed(2)} µs (${(r.warmUs / hs.warmUs).toFixed(2)}×) |\n`);
  }
}
