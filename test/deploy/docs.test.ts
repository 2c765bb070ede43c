/**
 * The operator documentation covers what the code has: every configuration key, every reason
 * code, every metric.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { REASON_CODES, REASONS } from "../../src/authz/reasons.ts";
import { configJsonSchema } from "../../src/config/json-schema.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const read = (file: string) => readFileSync(resolve(ROOT, file), "utf8");

type Schema = { properties?: Record<string, Schema>; items?: Schema; anyOf?: Schema[]; oneOf?: Schema[]; type?: string };

/** Every key of the configuration file as `a.b`, `a[].b`; a record's own keys are data, not configuration. */
function keys(schema: Schema, path = ""): string[] {
  const out: string[] = [];
  for (const variant of [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) out.push(...keys(variant, path));
  if (schema.items !== undefined) out.push(...keys(schema.items, `${path}[]`));
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    const key = path === "" ? name : `${path}.${name}`;
    out.push(key, ...keys(child, key));
  }
  return [...new Set(out)];
}

describe("docs/configuration.md", () => {
  const doc = read("docs/configuration.md");
  const all = keys(configJsonSchema() as Schema);

  it("knows the schema (sanity: the walk finds nested, array and optional keys)", () => {
    expect(all).toEqual(expect.arrayContaining(["listen.grpc", "tokens.secrets[].env", "envoy.clusters[].serviceDomain", "envoy.origins.pluginProxy"]));
  });

  it.each(all)("documents `%s`", (key) => {
    expect(doc).toContain(`\`${key}\``);
  });
});

describe("docs/operations.md", () => {
  const doc = read("docs/operations.md");
  const troubleshooting = doc.slice(doc.indexOf("## Troubleshooting"));

  it.each(REASON_CODES)("has a troubleshooting row for `%s` with its status", (code) => {
    expect(troubleshooting).toMatch(new RegExp(`^\\| \`${code}\` \\| ${REASONS[code].http} \\| [^|]+ \\| [^|]+ \\|$`, "m"));
  });

  const metrics = [...read("src/server/prometheus.ts").matchAll(/name: "(portcullis_[a-z_]+)"/g)].map((m) => m[1]!);
  it("finds the metrics the server registers", () => {
    expect(metrics.length).toBeGreaterThan(5);
  });
  it.each(metrics)("lists the metric %s", (metric) => {
    expect(doc).toContain(`| \`${metric}\` |`);
  });

  it("lists every audit line field", () => {
    const fields = [...read("src/audit/plugin-request.ts").matchAll(/^\s+readonly ([a-z_]+): /gm)].map((m) => m[1]!);
    expect(fields).toContain("pinned_definition_hash");
    const audit = doc.slice(doc.indexOf("## The audit line"), doc.indexOf("## Asking portcullis"));
    for (const field of fields) expect(audit).toContain(`\`${field}\``);
  });
});
