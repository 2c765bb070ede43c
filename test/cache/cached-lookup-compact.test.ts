/**
 * CachedLookup holds its entries compactly (issue 47): the answer's start and TTL live in
 * lru-cache's own tables, a boolean answer shares one held object, and keys are stored flat. What
 * that must not change: an answer's TTL runs from when its question was asked. What it buys: a
 * cached boolean costs its key and lru-cache's slot, measured in a child process after a full GC.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { CachedLookup } from "../../src/cache/cached-lookup.ts";

describe("CachedLookup, compact entries", () => {
  it("an answer's TTL runs from when its question was asked, not from when the answer came", async () => {
    let now = 1_000;
    let release: (() => void) | undefined;
    let asked = 0;
    const cache = new CachedLookup<string, undefined>({
      metric: "test",
      dependency: "test",
      question: "Question",
      maxEntries: 10,
      ttlMs: 5_000,
      now: () => now,
      ask: async () => {
        asked += 1;
        if (asked === 1) await new Promise<void>((resolve) => (release = resolve));
        return { value: `answer ${asked}` };
      },
    });
    const first = cache.lookup("k", undefined);
    await Promise.resolve();
    now += 3_000;
    release?.();
    expect(await first).toBe("answer 1");
    now += 2_000;
    expect(await cache.lookup("k", undefined)).toBe("answer 1");
    now += 1;
    expect(await cache.lookup("k", undefined)).toBe("answer 2");
  });

  it("a cached boolean answer under a 100-character concatenated key costs less than 190 bytes of heap", { timeout: 60_000 }, async () => {
    // 50,000 entries as OpenFGA's gate keys them (store, user, cluster): the key (~120 bytes flat), lru-cache's
    // Map entry (~37) and nothing per entry beside them; a wrapper per entry and the key's concatenation tree
    // held as built cost ~60–100 bytes more (217 in this test before issue 47).
    const module = resolve(import.meta.dirname, "../../src/cache/cached-lookup.ts");
    const script = `
      const { CachedLookup } = await import(${JSON.stringify(module)});
      // Timers and the loader's pending work settle before each reading.
      const live = async () => { await new Promise((r) => setTimeout(r, 50)); gc(); gc(); return process.memoryUsage().heapUsed; };
      const cache = new CachedLookup({ metric: "m", dependency: "d", question: "q", maxEntries: 50000, ttlMs: 3600000, ask: async () => ({ value: true }) });
      const user = (i) => JSON.parse(JSON.stringify("5eed0002-0000-4000-8000-" + i.toString(16).padStart(12, "0")));
      for (let i = 0; i < 1000; i++) await cache.lookup("warm " + user(i), undefined);
      const before = await live();
      for (let i = 0; i < 50000; i++) await cache.lookup(\`01JBENCHST0RE0000000000000 \${user(i)} 5eed0001-0001-4000-8000-000001000001\`, undefined);
      process.stdout.write(String(((await live()) - before) / 50000));
      // Referenced after the reading, so the cache is not collected before it.
      globalThis.kept = cache;
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], { timeout: 55_000 });
    const bytesPerEntry = Number(stdout);
    console.log(`CachedLookup: ${bytesPerEntry.toFixed(1)} bytes of heap per cached boolean`);
    expect(bytesPerEntry).toBeGreaterThan(0);
    expect(bytesPerEntry).toBeLessThan(190);
  });
});
