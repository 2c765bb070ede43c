/**
 * Attacker-sized cache keys (issue 11): a SubjectAccessReview cache keyed by the raw review held
 * every name, namespace and path a caller sent (up to ~60 KB each), kept after expiry until
 * eviction. Keyed by a hash, the cache's heap is bounded by its entry count whatever the names:
 * 100,000 distinct 50 KB names grow the heap by a few MB (raw keys: 50,000 entries × 50 KB ≈ 2.5 GB).
 * Measured after a full GC in a child process (heap/sar-cache-fill.ts), so the runner's heap is not counted.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const run = promisify(execFile);
const FILL = resolve(import.meta.dirname, "support/sar-cache-fill.ts");
/** Generous: the hashed cache grows ~7 MB here; raw keys would need ~2.5 GB and die at the heap cap. */
const MAX_GROWTH_BYTES = 64 * 1024 * 1024;

it("100,000 distinct 50 KB names grow the SubjectAccessReview cache's heap by less than 64 MB", { timeout: 240_000 }, async () => {
  const { stdout } = await run(process.execPath, ["--expose-gc", "--max-old-space-size=512", FILL, "100000", "50000"], {
    timeout: 230_000,
    maxBuffer: 1024 * 1024,
  });
  const measured = JSON.parse(stdout.trim()) as { before: number; after: number; growth: number };
  console.log(`SAR cache, 100,000 distinct 50 KB names: heap ${(measured.before / 2 ** 20).toFixed(1)} MB → ${(measured.after / 2 ** 20).toFixed(1)} MB after GC`);
  expect(measured.growth).toBeLessThan(MAX_GROWTH_BYTES);
});
