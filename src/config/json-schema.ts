/**
 * The configuration file's JSON Schema, for editors and CI linting (`portcullis config-schema`,
 * committed as deploy/portcullis.schema.json). Derived from the zod schema, so it cannot drift;
 * cross-field rules (envoy.clusters ↔ clusters, timeouts) are checked by `validate-config` only.
 */
import { z } from "zod";
import { configSchema } from "./schema.ts";

export function configJsonSchema(): Record<string, unknown> {
  return {
    title: "portcullis configuration",
    ...z.toJSONSchema(configSchema, { io: "input", target: "draft-2020-12" }),
  };
}

/** The committed file's exact text. */
export function renderConfigJsonSchema(): string {
  return `${JSON.stringify(configJsonSchema(), null, 2)}\n`;
}
