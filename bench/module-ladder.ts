/**
 * The ladder of bench/module-memory.ts, run in a fresh process by it: each part portcullis loads,
 * in turn, with RSS and V8 heap after a full GC (`--expose-gc`). Prints one JSON object: the steps,
 * and whether Node loaded its type stripper (amaro) for any .ts file, which a warm compile cache
 * spares. It imports nothing itself, so "node itself" is Node with this one .ts file.
 */

type Gc = (options?: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void;

/** RSS and V8 heap after a full GC: a regular one, or the memory-reducing one the idle GC runs (src/server/idle-gc.ts). */
function figures(memoryReduced: boolean) {
  const gc = (globalThis as { gc?: Gc }).gc!;
  if (memoryReduced) gc({ type: "major", execution: "sync", flavor: "last-resort" });
  else gc();
  const u = process.memoryUsage();
  return { rssBytes: u.rss, heapUsedBytes: u.heapUsed, heapTotalBytes: u.heapTotal, ...(memoryReduced ? { memoryReduced } : {}) };
}

async function ladder() {
  const steps: Array<{ step: string } & ReturnType<typeof figures>> = [];
  const measure = (step: string, memoryReduced = false) => steps.push({ step, ...figures(memoryReduced) });
  measure("node itself");
  await import("pino");
  measure("+ pino");
  await import("@grpc/grpc-js");
  await import("@grpc/proto-loader");
  // As the server loads them: its Check service and gRPC health (app.ts), not the client's definition.
  const protos = await import("../src/envoy/protos.ts");
  protos.checkService();
  protos.healthService();
  measure("+ grpc-js, proto-loader, the Envoy protos");
  await import("@openfga/sdk");
  measure("+ @openfga/sdk");
  await import("undici");
  measure("+ undici");
  // As portcullis loads it: the bundle of the parts it uses (src/kube-fleet/kubernetes-client.ts).
  await import("#kubernetes-client");
  measure("+ @kubernetes/client-node (bundled)");
  await import("../src/server/app.ts");
  measure("+ the rest of portcullis (zod, jose, lru-cache, prom-client, OpenTelemetry's API, src/)");
  // What an idle replica's code holds once the idle GC has run, before it holds any data.
  measure("the same, after the idle GC's memory-reducing collection", true);
  return steps;
}

const steps = await ladder();
// Node's own list of the internal modules it has loaded; amaro is loaded on the first .ts file it strips.
const typeStripperLoaded = (process as unknown as { moduleLoadList: string[] }).moduleLoadList.some((m) => m.includes("amaro"));
process.stdout.write(JSON.stringify({ steps, typeStripperLoaded }));
