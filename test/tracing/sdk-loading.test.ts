/**
 * The OpenTelemetry SDK is loaded when tracing is on and never otherwise: a replica without
 * tracing (the default) carries only @opentelemetry/api, which the span wrappers test against.
 * Each case is a fresh process, whose module graph is the server's own: a resolve hook records
 * every @opentelemetry package the server's modules and startTracing() load.
 */
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { expect, it } from "vitest";
import { NODE } from "../support/portcullis-process.ts";

const ROOT = resolve(import.meta.dirname, "../..");

function openTelemetryPackagesLoaded(enabled: boolean): string[] {
  const script = `
    import { registerHooks } from "node:module";
    const seen = new Set();
    registerHooks({ resolve(specifier, context, next) {
      const resolved = next(specifier, context);
      const name = /node_modules\\/(@opentelemetry\\/[^/]+)\\//.exec(resolved.url);
      if (name !== null) seen.add(name[1]);
      return resolved;
    } });
    await import("./src/server/app.ts");
    const { startTracing } = await import("./src/tracing/setup.ts");
    const { configSchema } = await import("./src/config/schema.ts");
    const { default: pino } = await import("pino");
    const tracing = await startTracing(configSchema.shape.tracing.parse({ enabled: ${enabled} }), pino({ level: "silent" }));
    await tracing.shutdown();
    process.stdout.write(JSON.stringify([...seen].sort()));
  `;
  const run = spawnSync(NODE, ["--input-type=module", "-e", script], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as string[];
}

it("tracing off: only @opentelemetry/api is loaded", { timeout: 70_000 }, () => {
  expect(openTelemetryPackagesLoaded(false)).toEqual(["@opentelemetry/api"]);
});

it("tracing on: the SDK, the OTLP exporter and the context manager are loaded", { timeout: 70_000 }, () => {
  expect(openTelemetryPackagesLoaded(true)).toEqual(
    expect.arrayContaining([
      "@opentelemetry/api",
      "@opentelemetry/context-async-hooks",
      "@opentelemetry/core",
      "@opentelemetry/exporter-trace-otlp-http",
      "@opentelemetry/resources",
      "@opentelemetry/sdk-trace",
    ]),
  );
});
