/**
 * What a verified token costs in the cache (issue 47): an HS256 token's claims are cached alone,
 * without a wrapper naming the algorithm, and the claims its installation shares are held once.
 * Measured in a child process after a full GC (the runner's heap is not counted): 30,000 PluginTokens
 * of 3,000 installations, as the memory scenario's users (bench/memory.ts). 321 bytes per token with
 * the wrapper, 281 without; the table lru-cache preallocates for 30,000 is counted too.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const ENTRIES = 30_000;

it("a cached HS256 PluginToken costs less than 300 bytes of heap", { timeout: 120_000 }, async () => {
  const verifier = resolve(import.meta.dirname, "../../src/tokens/fundament.ts");
  const tokens = resolve(import.meta.dirname, "../support/tokens.ts");
  const script = `
    const { TokenVerifier } = await import(${JSON.stringify(verifier)});
    const { sign, pluginClaims, SECRET } = await import(${JSON.stringify(tokens)});
    // Timers and the loader's pending work settle before each reading.
    const live = async () => { await new Promise((r) => setTimeout(r, 50)); gc(); gc(); return process.memoryUsage().heapUsed; };
    const make = () => new TokenVerifier({ mode: "hs256", secrets: [new TextEncoder().encode(SECRET)], issuer: "fundament-authn-api",
      clockToleranceSeconds: 5, maxLifetimeSeconds: { user: 3600, plugin: 3600 }, cacheMaxEntries: ${ENTRIES} });
    const exp = Math.floor(Date.now() / 1000) + 3000;
    const uuid = (space, i) => "5eed000" + space + "-0000-4000-8000-" + i.toString(16).padStart(12, "0");
    const fill = async (v, from, count) => {
      for (let i = from; i < from + count; i++) {
        const k = i % ${ENTRIES / 10};
        const r = await v.verify(await sign(pluginClaims({ sub: uuid(2, i), installation_id: uuid(3, k), installation_name: "plugin-" + k }), { exp }));
        if (!r.ok) throw new Error(r.detail);
      }
    };
    // A first verifier compiles and warms the path, so the reading holds cached tokens only.
    const warm = make();
    await fill(warm, ${ENTRIES}, 1000);
    const before = await live();
    const v = make();
    await fill(v, 0, ${ENTRIES});
    process.stdout.write(String(((await live()) - before) / ${ENTRIES}));
    // Referenced after the reading, so neither is collected before it.
    globalThis.kept = [v, warm];
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], { timeout: 110_000 });
  const bytesPerToken = Number(stdout);
  console.log(`verified-token cache: ${bytesPerToken.toFixed(1)} bytes of heap per cached PluginToken`);
  expect(bytesPerToken).toBeGreaterThan(0);
  expect(bytesPerToken).toBeLessThan(300);
});
