#!/usr/bin/env node
/**
 * portcullis command line.
 *   portcullis --config FILE                 run the ext_authz server
 *   portcullis validate-config FILE          run the server's start checks on a configuration file and exit
 *   portcullis config-schema                 print the configuration's JSON Schema
 *   portcullis envoy-config --config FILE [--output FILE]   print (or write) the Envoy configuration for a configuration file
 *   portcullis check …                       ask a running server for one decision
 *   portcullis revoke / unrevoke …           write or delete a Revocation (the sub-TTL kill switch)
 *   portcullis can-i …                       what a plugin can do for a user (user ∩ plugin), from the admin port
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config/load.ts";

// Each command imports what it needs when it runs, so the small ones start fast.
const USAGE = `usage:
  portcullis --config FILE                 run the ext_authz server
  portcullis validate-config [--file-only] FILE   run the server's start checks on FILE and exit
  portcullis config-schema                 print the configuration file's JSON Schema
  portcullis envoy-config --config FILE [--output FILE]   print (or write) the Envoy configuration generated from FILE
  portcullis check --server HOST:PORT --policy P --path PATH [--method GET] [-H 'name: value']... [--token TOKEN | --token-file FILE] [--json]
  portcullis check --explain --admin HOST:PORT ...   same, through the admin port (admin.explain, loopback only), with the gates' trace
      exit status: 0 allowed, 1 denied, 2 usage or connection error
  portcullis revoke (--installation UID | --plugin NAME [--plugin-version V] [--definition-hash sha256:H] | --user UUID) --reason TEXT [--kubeconfig FILE] [--context C] [--dry-run]
  portcullis unrevoke (the same target flags) [--kubeconfig FILE] [--context C]
  portcullis can-i --admin HOST:PORT --user U --installation I --cluster C [-n NS] (--list | VERB RESOURCE[.GROUP][/NAME] [--subresource S] | VERB /PATH) [--json]
  portcullis COMMAND --help                one command's help`;

/** `portcullis COMMAND --help`: what the command does, its arguments, its exit statuses. */
const HELP: Readonly<Record<string, string>> = {
  serve: `usage: portcullis --config FILE
  Runs the ext_authz server (gRPC Check and health, admin HTTP, internal RPC) until SIGTERM or SIGINT.
  The configuration is checked first, exactly as validate-config checks it; nothing starts unless it passes.
  exit status: 0 after a graceful stop, 2 invalid configuration, 1 failed to start`,
  "validate-config": `usage: portcullis validate-config [--file-only] FILE
  Runs the checks the server runs at start, and nothing else: the file (keys, formats, ports, durations,
  URLs, the OpenFGA store id) and what the server would read (secrets present and at least 32 bytes,
  files readable, kubeconfigs with their context, in-cluster credentials). Then it asks each configured
  cluster's API server whether the credential may list and watch what the change feeds follow, and warns
  (stderr, exit status still 0) of every grant missing: the server starts without them, on the short TTLs.
  --file-only   only the file: for a file meant for another machine (CI, before a rollout)
  exit status: 0 valid, 2 invalid (one line per problem, naming the field and what it expects)`,
  "config-schema": `usage: portcullis config-schema
  Prints the configuration file's JSON Schema (deploy/portcullis.schema.json).
  exit status: 0`,
  "envoy-config": `usage: portcullis envoy-config --config FILE [--output FILE]
  Prints the Envoy configuration generated from FILE's envoy section (deploy/examples/envoy.yaml).
  --output FILE   write it to FILE instead: the data-plane Envoy's init container, on the mounted configuration
  exit status: 0, 2 invalid configuration or no envoy section`,
  check: `usage: portcullis check --server HOST:PORT --policy P --path PATH [--method GET] [-H 'name: value']... [--token TOKEN | --token-file FILE] [--json]
                        [--ca FILE [--cert FILE --key FILE] [--server-name NAME]]
       portcullis check --explain --admin HOST:PORT --policy P --path PATH ...
  Asks a running portcullis for one decision with a CheckRequest built as Envoy builds it, and prints it
  (credentials redacted). --explain asks the admin port's POST /explain instead (admin.explain, loopback
  only), which adds the gates' trace. With listen.tls: --ca is the CA of portcullis's certificate, --cert and
  --key a client certificate (requireClientCert), --server-name the name to check when HOST is an address.
  exit status: 0 allowed, 1 denied, 2 usage or connection error`,
  revoke: `usage: portcullis revoke (--installation UID | --plugin NAME [--plugin-version V] [--definition-hash sha256:H] | --user UUID) --reason TEXT [--kubeconfig FILE] [--context C] [--dry-run]
  The sub-TTL kill switch (docs/operations.md, incident runbook): writes the Revocation for that target on the
  cluster portcullis's \`revocations\` setting names, with your kubeconfig (as kubectl). Every replica refuses
  the PluginToken requests it covers (403 revoked) within a second, and authn-api can no longer mint for a
  revoked installation or plugin. Revoking the same target again changes nothing. --dry-run prints the
  object instead, for kubectl apply -f -.
  exit status: 0 written (or already in force), 1 the API server refused, 2 usage`,
  unrevoke: `usage: portcullis unrevoke (--installation UID | --plugin NAME [--plugin-version V] [--definition-hash sha256:H] | --user UUID) [--kubeconfig FILE] [--context C]
  Deletes the Revocation that \`portcullis revoke\` wrote for the same target flags; requests are answered as before within a second.
  exit status: 0 deleted (or there was none), 1 the API server refused, 2 usage`,
  "can-i": `usage: portcullis can-i --admin HOST:PORT --user U --installation I --cluster C [-n NS] --list [--json]
       portcullis can-i --admin HOST:PORT --user U --installation I --cluster C [-n NS] VERB RESOURCE[.GROUP][/NAME] [--subresource S] [--json]
       portcullis can-i … VERB /PATH
  What plugin installation I (its uid or name) can do for user U on cluster C: the rules of the user's
  ServiceAccount (fundament-system/fundament-U) intersected with the plugin's (plugin-NAME/plugin-NAME), each
  from the cluster's own SelfSubjectRulesReview made with that ServiceAccount's token, and whether OpenFGA's
  can_view(user, cluster) holds. Without -n only cluster-wide rules (ClusterRoleBindings) are listed.
  INCOMPLETE marks a review the API server could not finish (an authorizer that cannot list its rules).
  Only the paths the gateway forwards are listed (/api, /apis, /version, /openapi).
  With VERB RESOURCE: yes or no, and the gate that decides it (path, can_view, user, plugin).
  Asks the admin port's POST /can-i (admin.explain, loopback only), which makes the TokenRequests and reviews.
  exit status: 0 listed, or yes; 1 no or unknown; 2 usage or connection error`,
};

const wantsHelp = (args: readonly string[]) => args.includes("--help") || args.includes("-h");

/** The configuration has no `envoy` section; `envoy-config` needs one. */
const MISSING_ENVOY_SECTION = "missing-envoy-section";

const out = (text: string) => void process.stdout.write(text);

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  // Every command answers --help; one without its own text prints the whole usage.
  if (command !== undefined && !command.startsWith("-") && wantsHelp(rest)) {
    out(`${HELP[command] ?? USAGE}\n`);
    return 0;
  }
  switch (command) {
    case "validate-config": {
      const fileOnly = rest[0] === "--file-only";
      const files = fileOnly ? rest.slice(1) : rest;
      const file = files[0];
      if (file === undefined || files.length > 1) return usage();
      if (fileOnly) loadConfig(file);
      else {
        const config = await (await import("../server/environment.ts")).loadConfigForStart(file);
        const { feedGrantWarnings } = await import("./feed-grants.ts");
        for (const warning of await feedGrantWarnings(config)) process.stderr.write(`${file}: ${warning}\n`);
      }
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
      const flags = envoyConfigFlags(rest);
      if (flags === undefined) return usage();
      const { renderEnvoyYaml } = await import("../deploy/envoy-config.ts");
      const yaml = renderEnvoyYaml(loadConfig(flags.config));
      if (flags.output === undefined) out(yaml);
      else writeFileSync(flags.output, yaml);
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
    case "revoke":
    case "unrevoke": {
      const { runRevoke, UsageError } = await import("./revoke.ts");
      try {
        return await runRevoke(command, rest, { out });
      } catch (err) {
        if (err instanceof UsageError || String((err as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_")) return usage((err as Error).message);
        process.stderr.write(`portcullis ${command}: ${(err as Error).message}\n`);
        return 1;
      }
    }
    case "can-i": {
      const { runCanI, UsageError } = await import("./can-i.ts");
      try {
        return await runCanI(rest, { out });
      } catch (err) {
        if (err instanceof UsageError || String((err as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_")) return usage((err as Error).message);
        process.stderr.write(`portcullis can-i: ${(err as Error).message}\n`);
        return 2;
      }
    }
    case "--help":
    case "-h":
      out(`${USAGE}\n`);
      return 0;
    default: {
      if (wantsHelp(argv)) {
        out(`${HELP["serve"]}\n`);
        return 0;
      }
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

/** `--config FILE [--output FILE]`; undefined when the arguments are not that. */
function envoyConfigFlags(args: string[]): { config: string; output: string | undefined } | undefined {
  try {
    const { config, output } = parseArgs({ args, options: { config: { type: "string" }, output: { type: "string" } }, strict: true }).values;
    return config === undefined ? undefined : { config, output };
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
