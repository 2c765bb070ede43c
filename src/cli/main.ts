#!/usr/bin/env node
/**
 * portcullis command line.
 *   portcullis --config FILE          run the ext_authz server
 *   portcullis validate-config FILE   check a configuration file and exit
 */
import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config/load.ts";
import { serve } from "./serve.ts";

const USAGE = `usage:
  portcullis --config FILE            run the ext_authz server
  portcullis validate-config FILE     check a configuration file and exit`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "validate-config": {
      const file = rest[0];
      if (file === undefined) return usage();
      loadConfig(file);
      process.stdout.write(`${file}: ok\n`);
      return 0;
    }
    case "--help":
    case "-h":
      process.stdout.write(`${USAGE}\n`);
      return 0;
    default: {
      const { values } = parseArgs({ args: argv, options: { config: { type: "string" } }, strict: true });
      if (values.config === undefined) return usage();
      await serve(values.config);
      return -1;
    }
  }
}

function usage(): number {
  process.stderr.write(`${USAGE}\n`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(err instanceof ConfigError ? `invalid configuration: ${err.message}\n` : `portcullis: ${(err as Error).message}\n`);
    process.exitCode = err instanceof ConfigError ? 2 : 1;
  },
);
