/**
 * The shipped compile cache (NODE_COMPILE_CACHE, src/cli/node-flags.ts) never stops portcullis from
 * starting: a missing, uncreatable, unwritable, read-only or corrupted cache directory only means
 * no cache. And the image's way of warming it (Dockerfile: `main.ts --help`, then
 * src/cli/warm-compile-cache.ts, as the server's uid, the directory then read-only as in the pod)
 * covers every TypeScript module the server loads, so a pod never loads amaro to strip types.
 * Each case starts the real server (against the wire fakes) with the shipped flags and environment
 * and waits for /healthz; as root it runs as an unprivileged uid, for which permissions hold.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NODE_ENV, NODE_FLAGS } from "../../src/cli/node-flags.ts";
import { freeAddresses, MAIN, NODE, type ProcessWorld, startProcessWorld } from "../support/portcullis-process.ts";
import { ids, OLD_SECRET, SECRET } from "../support/tokens.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const NOBODY = 65534;
const asRoot = process.getuid?.() === 0;
/**
 * As the unprivileged uid when the tests run as root (a uid that permissions bind): the spawn's own
 * uid and gid, which drop the supplementary groups too. Not setpriv, as the Dockerfile's build step:
 * here it would run with the shipped environment, and on jemalloc with its background thread
 * `setpriv --regid` aborts (the Dockerfile warms the cache before it sets the allocator).
 */
const unprivileged = asRoot ? { uid: NOBODY, gid: NOBODY } : {};

let world: ProcessWorld;
beforeAll(async () => {
  world = await startProcessWorld("compile-cache");
  // The unprivileged uid reads the configuration and kubeconfig the world writes.
  chmodSync(world.dir, 0o755);
});
afterAll(async () => {
  await world.stop();
});

/** A configuration against the wire fakes, readable by the unprivileged uid; the watchdog is on by default. */
async function configFile(name: string) {
  const addresses = await freeAddresses();
  const config = join(world.dir, `${name}.yaml`);
  writeFileSync(
    config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
tokens:
  secrets: [{ env: PORTCULLIS_SECRET }, { env: PORTCULLIS_OLD_SECRET }]
openfga: { apiUrl: "${world.openfga.url}", storeId: "${world.openfga.storeId}" }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${world.kubeconfig}" }]
`,
    { mode: 0o644 },
  );
  chmodSync(world.kubeconfig, 0o644);
  return { config, addresses };
}

function startWithCache(cacheDir: string, config: string, extraEnv: Record<string, string> = {}) {
  const child = spawn(NODE, [...NODE_FLAGS, MAIN, "--config", config], {
    ...unprivileged,
    cwd: ROOT,
    env: { PATH: process.env["PATH"] ?? "", PORTCULLIS_SECRET: SECRET, PORTCULLIS_OLD_SECRET: OLD_SECRET, ...NODE_ENV, NODE_COMPILE_CACHE: cacheDir, ...extraEnv },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
  return { child, exited, stderr: () => stderr };
}

async function healthy(admin: string, child: ChildProcess, deadlineMs = 40_000): Promise<boolean> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline && child.exitCode === null) {
    const ok = await fetch(`http://${admin}/healthz`).then((r) => r.ok, () => false);
    if (ok) return true;
    await sleep(100);
  }
  return false;
}

/** The image's warm step (Dockerfile), as the unprivileged uid, into a directory it owns. */
function warm(cacheDir: string) {
  mkdirSync(cacheDir, { recursive: true });
  if (asRoot) chownSync(cacheDir, NOBODY, NOBODY);
  for (const script of [[MAIN, "--help"], [join(ROOT, "src/cli/warm-compile-cache.ts")]]) {
    const run = spawnSync(NODE, [...NODE_FLAGS, ...script], { ...unprivileged, cwd: ROOT, env: { PATH: process.env["PATH"] ?? "", ...NODE_ENV, NODE_COMPILE_CACHE: cacheDir }, encoding: "utf8", timeout: 60_000 });
    expect(run.status, run.stderr).toBe(0);
  }
}

/** Made unwritable: an empty directory here; the warm cache as the Dockerfile leaves it (root-owned, `chmod -R a+rX`). */
function readOnly(dir: string) {
  for (const path of [dir, ...readdirSync(dir, { recursive: true, encoding: "utf8" }).map((name) => join(dir, name))]) {
    // As in the image when root; otherwise the owner's write permission is what there is to take away.
    if (asRoot) chownSync(path, 0, 0);
    const mode = statSync(path).mode & 0o777;
    chmodSync(path, asRoot ? mode | (statSync(path).isDirectory() ? 0o555 : 0o444) : mode & ~0o222);
  }
}

const entries = (dir: string) => readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((n) => statSync(join(dir, n)).isFile());

describe("the server starts whatever state the compile cache directory is in", () => {
  const cases: Array<{ name: string; prepare: (dir: string) => string }> = [
    { name: "missing and cannot be created (under a regular file)", prepare: (dir) => (writeFileSync(join(dir, "file"), "x"), join(dir, "file", "cache")) },
    { name: "a regular file", prepare: (dir) => (writeFileSync(join(dir, "cache"), "x"), join(dir, "cache")) },
    { name: "an empty directory it cannot write", prepare: (dir) => (mkdirSync(join(dir, "cache")), readOnly(join(dir, "cache")), join(dir, "cache")) },
    {
      name: "warmed, with every entry overwritten by garbage",
      prepare: (dir) => {
        const cache = join(dir, "cache");
        warm(cache);
        for (const name of entries(cache)) writeFileSync(join(cache, name), "not a cache entry\0\xff");
        return cache;
      },
    },
  ];
  it.each(cases)("$name", { timeout: 120_000 }, async ({ name, prepare }) => {
    const dir = join(world.dir, name.replaceAll(/\W+/g, "-"));
    mkdirSync(dir, { mode: 0o755 });
    const cacheDir = prepare(dir);
    const { config, addresses } = await configFile(`${name.replaceAll(/\W+/g, "-")}-config`);
    const server = startWithCache(cacheDir, config);
    try {
      expect(await healthy(addresses.admin, server.child), server.stderr()).toBe(true);
    } finally {
      server.child.kill("SIGTERM");
      await server.exited;
    }
  });

  it("missing and creatable: created, and written when the server stops", { timeout: 120_000 }, async () => {
    const dir = join(world.dir, "creatable");
    mkdirSync(dir, { mode: 0o777 });
    chmodSync(dir, 0o777);
    const cacheDir = join(dir, "cache");
    const { config, addresses } = await configFile("creatable-config");
    const server = startWithCache(cacheDir, config);
    expect(await healthy(addresses.admin, server.child), server.stderr()).toBe(true);
    server.child.kill("SIGTERM");
    expect(await server.exited).toBe(0);
    expect(entries(cacheDir).length).toBeGreaterThan(50);
  });
});

describe("the image's warm cache", () => {
  it("serves every TypeScript module the server loads, read-only, as the server's uid", { timeout: 180_000 }, async () => {
    const cacheDir = join(world.dir, "image-cache");
    warm(cacheDir);
    readOnly(cacheDir);
    const { config, addresses } = await configFile("image-config");
    const server = startWithCache(cacheDir, config, { NODE_DEBUG_NATIVE: "COMPILE_CACHE" });
    try {
      expect(await healthy(addresses.admin, server.child), server.stderr().slice(-2000)).toBe(true);
    } finally {
      server.child.kill("SIGTERM");
      await server.exited;
    }
    const log = server.stderr();
    // Node's own trace of the cache: each module it had to strip again, and each one it took from the cache.
    const stripped = log.split("\n").filter((l) => l.includes("no transpile cache for StrippedTypeScript"));
    expect(stripped).toEqual([]);
    expect(log).toMatch(/retrieving transpile cache for StrippedTypeScript \S+src\/server\/app\.ts\.\.\.success/);
  });
});
