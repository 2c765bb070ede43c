/**
 * What portcullis holds before it holds any data: RSS and V8 heap after a full GC, as each
 * dependency is loaded in turn, each figure from fresh processes started with this process's Node
 * flags and environment (`node <shipped flags> bench/module-memory.ts`, as bench/run.ts runs it; the
 * shipped flags include --expose-gc). Prints one JSON array of ModuleStep on stdout (bench/report.ts
 * renders it) and the same as a table on stderr.
 *
 * The main figures are the shipped setting: Node's compile cache warm (NODE_COMPILE_CACHE,
 * src/cli/node-flags.ts; the image fills it at build). A fresh cache directory is filled by one
 * untimed run first, so the figures do not depend on what an earlier run left behind. Beside them:
 * - `cold`: the same step without a compile cache. Node then strips the types of each .ts file
 *   itself, with amaro (a WebAssembly build of swc), ~17 MiB of RSS from the first .ts file on;
 *   the code cache costs some back on the .js packages, whose cached functions are deserialized
 *   eagerly.
 * - `alone`: the floor, from a `node -e` process (no TypeScript at all): bare Node beside "node
 *   itself", client-node's bundle (`#kubernetes-client`) imported alone beside its step, and beside
 *   the last step (everything, after the idle GC's memory-reducing collection) the stack the project
 *   was given and nothing else, after the same collection: what no portcullis code can go below.
 * - `unbundled`: beside client-node's step, a `node -e` process that imports the package root, as
 *   portcullis did before the bundle: client-node's KubeConfig (dist/config.js) imports
 *   dist/gen/index.js, which loads the generated models and API classes of every API group, so
 *   Node's loader cannot load less than all of it (src/kube-fleet/kubernetes-client.ts).
 *
 * undici is its own step: portcullis's pools use it directly, and client-node's fetch is the same
 * copy.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export interface MemoryFigures {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly heapTotalBytes: number;
}

export interface ModuleStep extends MemoryFigures {
  readonly step: string;
  /** Measured after V8's memory-reducing collection (as the idle GC runs it), not a regular full GC. */
  readonly memoryReduced?: boolean;
  /** The same step in a process without a compile cache (Node strips the .ts sources itself). */
  readonly cold?: MemoryFigures;
  /** The floor beside this step: a `node -e` process (no TypeScript) that loads only what `what` says. */
  readonly alone?: MemoryFigures & { readonly what: string };
  /** Beside client-node's step: a `node -e` process that imports the package root alone, unbundled. */
  readonly unbundled?: MemoryFigures;
}

const ROOT = resolve(import.meta.dirname, "..");
const LADDER = join(import.meta.dirname, "module-ladder.ts");

/** A fresh process with this one's Node flags; `compileCache` undefined runs it without one. */
function fresh<T>(args: readonly string[], compileCache: string | undefined): T {
  const env = { ...process.env };
  if (compileCache === undefined) delete env["NODE_COMPILE_CACHE"];
  else env["NODE_COMPILE_CACHE"] = compileCache;
  const run = spawnSync(process.execPath, [...process.execArgv, ...args], { cwd: ROOT, env, encoding: "utf8", timeout: 120_000 });
  if (run.status !== 0) throw new Error(`${args.join(" ")} exited ${run.status ?? run.signal}: ${run.stderr}`);
  return JSON.parse(run.stdout) as T;
}

/** `node -e`: no TypeScript, so no type stripping whatever the cache. `gcArgs`: the arguments of the one GC before the reading. */
const measureJs = (gcArgs = "") =>
  `globalThis.gc(${gcArgs}); const u = process.memoryUsage(); process.stdout.write(JSON.stringify({ rssBytes: u.rss, heapUsedBytes: u.heapUsed, heapTotalBytes: u.heapTotal }));`;
const MEASURE_JS = measureJs();
/** The idle GC's memory-reducing collection (src/server/idle-gc.ts). */
const MEASURE_REDUCED_JS = measureJs(`{ type: "major", execution: "sync", flavor: "last-resort" }`);
/** The dependencies the project was given (its developers' guide), as portcullis imports them. */
const GIVEN_STACK = ["@grpc/grpc-js", "@grpc/proto-loader", "jose", "@openfga/sdk", "#kubernetes-client", "lru-cache", "pino"] as const;
const givenStackAlone = (cache: string | undefined) =>
  fresh<MemoryFigures>(["--input-type=module", "-e", `${GIVEN_STACK.map((m) => `await import(${JSON.stringify(m)});`).join(" ")} ${MEASURE_REDUCED_JS}`], cache);
const bareNode = (cache: string | undefined) => fresh<MemoryFigures>(["--input-type=module", "-e", MEASURE_JS], cache);
const clientNodeAlone = (cache: string | undefined) => fresh<MemoryFigures>(["--input-type=module", "-e", `await import("#kubernetes-client"); ${MEASURE_JS}`], cache);
const packageRootAlone = (cache: string | undefined) => fresh<MemoryFigures>(["--input-type=module", "-e", `await import("@kubernetes/client-node"); ${MEASURE_JS}`], cache);
const ladderIn = (cache: string | undefined) => fresh<{ steps: Array<MemoryFigures & { step: string; memoryReduced?: boolean }>; typeStripperLoaded: boolean }>([LADDER], cache);

/**
 * The ladder with the cache warm, checked: a .ts file edited since the cache was filled (someone
 * working in the tree) is stripped again, which loads amaro and would pass a cold figure off as warm.
 */
function warmLadder(cache: string) {
  for (let attempt = 1; attempt <= 3; attempt++) {
    const run = ladderIn(cache);
    if (!run.typeStripperLoaded) return run.steps;
  }
  throw new Error("the compile cache missed a .ts file three times: are sources being edited?");
}

function coldLadder() {
  const run = ladderIn(undefined);
  if (!run.typeStripperLoaded) throw new Error("without a compile cache Node did not load amaro: is NODE_COMPILE_CACHE the only way it is enabled?");
  return run.steps;
}

if ((globalThis as { gc?: unknown }).gc === undefined) throw new Error("run with --expose-gc");
const cache = mkdtempSync(join(tmpdir(), "portcullis-module-memory-"));
try {
  // Untimed: fills the cache (Node writes it as each process exits).
  ladderIn(cache);
  clientNodeAlone(cache);
  packageRootAlone(cache);
  givenStackAlone(cache);
  const warm = warmLadder(cache);
  const cold = coldLadder();
  const bare = bareNode(cache);
  const clientNode = clientNodeAlone(cache);
  const unbundled = packageRootAlone(cache);
  const givenStack = givenStackAlone(cache);
  const steps: ModuleStep[] = warm.map((s, i) => {
    const { step, ...coldFigures } = cold[i]!;
    if (step !== s.step) throw new Error(`ladders differ: ${step} vs ${s.step}`);
    if (s.step.startsWith("+ @kubernetes/client-node")) return { ...s, cold: coldFigures, alone: { what: "client-node's bundle alone (node -e)", ...clientNode }, unbundled };
    if (s.memoryReduced === true) return { ...s, cold: coldFigures, alone: { what: `the given stack alone, same collection (node -e: ${GIVEN_STACK.join(", ")})`, ...givenStack } };
    return { ...s, cold: coldFigures, ...(i === 0 ? { alone: { what: "bare Node (node -e)", ...bare } } : {}) };
  });
  process.stdout.write(`${JSON.stringify(steps)}\n`);
  const mib = (b: number) => (b / 2 ** 20).toFixed(1);
  process.stderr.write(
    [
      "RSS MiB after a full GC | compile cache warm (shipped) | cold (no cache) | alone, node -e",
      ...steps.map((s) => `${s.step} | ${mib(s.rssBytes)} | ${mib(s.cold!.rssBytes)} | ${s.alone === undefined ? "" : `${mib(s.alone.rssBytes)} (${s.alone.what})`}${s.unbundled === undefined ? "" : `; the package root unbundled: ${mib(s.unbundled.rssBytes)}`}`),
      "",
    ].join("\n"),
  );
} finally {
  rmSync(cache, { recursive: true, force: true });
}
