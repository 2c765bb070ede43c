/** Rewrites docs/configuration.md's generated Konfidence tables from src/konfidence-model/permissions.ts. */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { withKonfidenceDefaults } from "../src/konfidence-model/permission-tables.ts";

const file = resolve(import.meta.dirname, "../docs/configuration.md");
writeFileSync(file, withKonfidenceDefaults(readFileSync(file, "utf8")));
