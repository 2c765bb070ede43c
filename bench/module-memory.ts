/**
 * What portcullis holds before it holds any data: RSS and V8 heap after a full GC, as each
 * dependency is loaded in turn, in a fresh process (`node --expose-gc bench/module-memory.ts`).
 * Prints one JSON array.
 *
 * "node itself" runs this .ts file, so it includes Node's type stripping (amaro, a WebAssembly
 * build of swc: ~17 MiB of RSS over the same file as .js). undici is its own step: portcullis's
 * pools use it directly, and client-node's fetch is the same copy. client-node's KubeConfig
 * (dist/config.js) imports dist/gen/index.js, which loads the generated models and API classes of
 * every API group, so importing its parts one by one loads no less than the package root.
 */
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

export interface ModuleStep {
  readonly step: string;
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly heapTotalBytes: number;
}

const steps: ModuleStep[] = [];
const measure = (step: string) => {
  gc();
  const u = process.memoryUsage();
  steps.push({ step, rssBytes: u.rss, heapUsedBytes: u.heapUsed, heapTotalBytes: u.heapTotal });
};

measure("node itself");
await import("pino");
measure("+ pino");
await import("@grpc/grpc-js");
await import("@grpc/proto-loader");
(await import("../src/envoy/protos.ts")).authorizationService();
measure("+ grpc-js, proto-loader, the Envoy protos");
await import("@openfga/sdk");
measure("+ @openfga/sdk");
await import("undici");
measure("+ undici");
await import("@kubernetes/client-node");
measure("+ @kubernetes/client-node");
await import("../src/server/app.ts");
measure("+ the rest of portcullis (zod, jose, lru-cache, prom-client, OpenTelemetry, src/)");
process.stdout.write(`${JSON.stringify(steps)}\n`);
