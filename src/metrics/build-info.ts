import { createRequire } from "node:module";

/** What the build-info metric reports: package.json's version, and the Node version running it. */
export const BUILD = {
  version: (createRequire(import.meta.url)("../../package.json") as { version: string }).version,
  node: process.version,
};
