/**
 * glibc reads MALLOC_MMAP_THRESHOLD_ (src/cli/node-flags.ts) silently: a misspelt name, or a libc
 * that does not know it, changes nothing and says nothing. So this shows the effect in a Node child
 * process with the shipped environment: after a 1 MiB block is freed, glibc's dynamic threshold would
 * serve 300 KiB blocks from the brk heap (`[heap]` in smaps), whose freed pages stay resident; with
 * the threshold fixed at 256 KiB they are mmapped and go back to the kernel when freed. glibc is the
 * allocator only where jemalloc, preloaded as shipped, is absent, so the child runs without it.
 */
import { execFile } from "node:child_process";
import { describe, expect, it } from "vitest";
import { NODE_ENV } from "../../src/cli/node-flags.ts";

const HELD_KIB = 100 * 300;
const { LD_PRELOAD: _jemalloc, MALLOC_CONF: _jemallocConf, ...GLIBC_ENV } = NODE_ENV;

// Prints how much `[heap]`'s resident size grew while 100 blocks of 300 KiB were allocated and touched.
const CHILD = `
const { readFileSync } = require("node:fs");
const heapRssKiB = () => {
  const smaps = readFileSync("/proc/self/smaps", "utf8").split("\\n");
  const at = smaps.findIndex((l) => l.endsWith("[heap]"));
  if (at < 0) return 0;
  for (let i = at + 1; i < smaps.length; i++) { const m = /^Rss:\\s+(\\d+) kB/.exec(smaps[i]); if (m) return Number(m[1]); }
  return 0;
};
let freed = Buffer.allocUnsafe(1 << 20).fill(1);
freed = null;
globalThis.gc();
const before = heapRssKiB();
const held = [];
for (let i = 0; i < 100; i++) held.push(Buffer.allocUnsafe(300 * 1024).fill(1));
process.stdout.write(String(heapRssKiB() - before));
`;

const heapGrowthKiB = (env: Record<string, string>) =>
  new Promise<number>((done, fail) =>
    execFile(process.execPath, ["--expose-gc", "-e", CHILD], { env: { PATH: process.env["PATH"] ?? "", ...env }, timeout: 30_000 }, (err, out) =>
      err === null ? done(Number(out)) : fail(err),
    ),
  );

describe("glibc's mmap threshold, as shipped for a machine without jemalloc", () => {
  it("without it, 300 KiB blocks allocated after a 1 MiB one was freed land in the brk heap (the control)", async () => {
    const { MALLOC_MMAP_THRESHOLD_: _, ...without } = GLIBC_ENV;
    expect(await heapGrowthKiB(without)).toBeGreaterThan(HELD_KIB * 0.8);
  });

  it("with the shipped environment they are mmapped: the brk heap does not grow with them", async () => {
    expect(NODE_ENV["MALLOC_MMAP_THRESHOLD_"]).toBe("262144");
    expect(await heapGrowthKiB({ ...GLIBC_ENV })).toBeLessThan(HELD_KIB * 0.1);
  });
});
