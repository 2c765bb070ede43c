#!/usr/bin/env node
/**
 * portcullis command line.
 *   portcullis --config FILE                 run the ext_authz server
 *   portcullis validate-config FILE          check a configuration file and exit
 *   portcullis config-schema                 print the configuration's JSON Schema
 *   portcullis envoy-config --config FILE    print the Envoy configuration for a configuration file
 *   portcullis check …                       ask a running server for one decision
 */
import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config/load.ts";

// Each command imports what it needs when it runs, so the small ones start fast.
const USAGE = `usage:
  portcullis --config FILE                 run the ext_authz server
  portcullis validate-config FILE          check a configuration file and exit
  portcullis config-schema                 print the configuration file's JSON Schema
  portcullis envoy-config --config FILE    print the Envoy configuration generated from FILE
  portcullis check --server HOST:PORT --policy P --path PATH [--method GET] [-H 'name: value']... [--token TOKEN | --token-file FILE] [--json]
  portcullis check --explain --admin HOST:PORT ...   same, through the admin port (admin.explain, loopback only), with the gates' trace
      exit status: 0 allowed, 1 denied, 2 usage or connection error`;

/** The configuration has no `envoy` section; `envoy-config` needs one. */
const MISSING_ENVOY_SECTION = "missing-envoy-section";

const out = (text: string) => void process.stdout.write(text);

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "validate-config": {
      const file = rest[0];
      if (file === undefined || rest.length > 1) return usage();
      loadConfig(file);
      out(`${file}: ok\n`);
      return 0;
    }
    case "config-schema": {
      if (rest.length > 0) return usage();
      const { renderConfigJsonSchema } = await import("../config/json-schema.ts");
      out(renderConfigJsonSchema());
      return 0;
    }
    case "envoy-config": {
      const file = configFlag(rest);
      if (file === undefined) return usage();
      const { renderEnvoyYaml } = await import("../deploy/envoy-config.ts");
      out(renderEnvoyYaml(loadConfig(file)));
      return 0;
    }
    case "check": {
      const { runCheck, UsageError } = await import("./check.ts");
      try {
        return await runCheck(rest, { out });
      } catch (err) {
        if (err instanceof UsageError || String((err as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_")) return usage((err as Error).message);
        process.stderr.write(`portcullis check: ${(err as Error).message}\n`);
        return 2;
      }
    }
    case "--help":
    case "-h":
      out(`${USAGE}\n`);
      return 0;
    default: {
      const file = configFlag(argv);
      if (file === undefined) return usage();
      const { serve } = await import("./serve.ts");
      await serve(file);
      return -1;
    }
  }
}

function configFlag(args: string[]): string | undefined {
  try {
    return parseArgs({ args, options: { config: { type: "string" } }, strict: true }).values.config;
  } catch {
    return undefined;
  }
}

function usage(problem?: string): number {
  process.stderr.write(`${problem === undefined ? "" : `${problem}\n`}${USAGE}\n`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: unknown) => {
    const missingEnvoy = (err as { code?: unknown }).code === MISSING_ENVOY_SECTION;
    if (err instanceof ConfigError) process.stderr.write(`invalid configuration: ${err.message}\n`);
    else if (missingEnvoy) process.stderr.write(`portcullis: ${(err as Error).message}; add one (docs/configuration.md)\n`);
    else process.stderr.write(`portcullis: ${(err as Error).message}\n`);
    // exit(), not exitCode: a server that failed to start may still hold watches and timers.
    process.exit(err instanceof ConfigError || missingEnvoy ? 2 : 1);
  },
);
