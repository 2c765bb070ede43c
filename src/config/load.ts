/**
 * Reads, validates and resolves the configuration: a bad config never starts a server, and the
 * error names the offending field and what it expects.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { type Config, configSchema, type SecretSource } from "./schema.ts";

export class ConfigError extends Error {
  readonly code = "invalid-config";
}

export function parseConfig(text: string, source = "config"): Config {
  let raw: unknown;
  try {
    raw = parseYaml(text, { uniqueKeys: true });
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${(err as Error).message}`);
  }
  const result = configSchema.safeParse(raw ?? {});
  if (!result.success) throw new ConfigError(`${source}:\n${formatIssues(result.error)}`);
  return result.data;
}

export function loadConfig(path: string): Config {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
  return parseConfig(text, path);
}

/** One line per problem: `  tokens.secrets[0]: expected exactly one of env or file`. */
export function formatIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => `  ${issue.path.length === 0 ? "(root)" : issue.path.map((p, i) => (typeof p === "number" ? `[${p}]` : `${i === 0 ? "" : "."}${String(p)}`)).join("")}: ${issue.message}`)
    .join("\n");
}

/** The secret's bytes; an unset variable or unreadable file is a configuration error naming the field. */
export function readSecret(source: SecretSource, field: string, env: NodeJS.ProcessEnv = process.env): string {
  if (source.env !== undefined) {
    const value = env[source.env];
    if (value === undefined || value === "") throw new ConfigError(`${field}: environment variable ${source.env} is not set`);
    return value;
  }
  try {
    const value = readFileSync(source.file!, "utf8").replace(/\r?\n$/, "");
    if (value === "") throw new ConfigError(`${field}: file ${source.file} is empty`);
    return value;
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${field}: cannot read ${source.file} (${(err as NodeJS.ErrnoException).code ?? "error"})`);
  }
}
