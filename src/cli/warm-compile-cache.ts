/**
 * Fills Node's compile cache (NODE_COMPILE_CACHE, src/cli/node-flags.ts) at image build: imports
 * every module under src/ once and exits, so Node writes each one's stripped source and code cache.
 * The pod's root filesystem is read-only, so the cache a pod reads is the one the image holds. Run
 * with the shipped flags and as the uid the server runs as (both name the cache's subdirectory),
 * after `src/cli/main.ts --help`, which caches the entry point itself (importing it here would run
 * the command line).
 * src/kube-fleet/kubernetes-client.ts is left out: the server never loads it (it loads the bundle built
 * from it, which the modules importing `#kubernetes-client` cache), and it would load the whole
 * unbundled client-node into the cache.
 */
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const SRC = resolve(import.meta.dirname, "..");
const ENTRY_POINT = join(SRC, "cli", "main.ts");
const BUNDLE_ENTRY = join(SRC, "kube", "kubernetes-client.ts");

const modules = readdirSync(SRC, { recursive: true, encoding: "utf8" })
  .filter((path) => path.endsWith(".ts"))
  .map((path) => join(SRC, path))
  .filter((path) => path !== ENTRY_POINT && path !== BUNDLE_ENTRY && path !== import.meta.filename)
  .sort();
for (const path of modules) await import(pathToFileURL(path).href);

process.stdout.write(`compile cache: ${modules.length} modules loaded\n`);
