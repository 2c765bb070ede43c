/**
 * Builds build/kubernetes-client.js, the `#kubernetes-client` of package.json's "imports", from
 * src/kube-fleet/kubernetes-client.ts (why: that file's comment). Run by npm's postinstall, by `npm test`,
 * by `npm run bench` and by the image's build stage; ~2 s.
 *
 * Only client-node's own files go into the bundle: its dependencies and Node's modules stay
 * imports, resolved from node_modules as without the bundle. Only whitespace is minified: V8 keeps
 * a module's source text in the heap for as long as the process runs, and the indentation alone was
 * 2.4 of its 4.2 MB. Identifiers and syntax are client-node's and names are kept, so stack traces
 * name client-node's functions (at a column of a long line). The first line names the client-node
 * version and the SHA-256 of the entry file it was built from
 * (test/deploy/kubernetes-client-bundle.test.ts checks both).
 *
 *   node scripts/bundle-kubernetes-client.ts
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { build, type BuildOptions } from "esbuild";

const ROOT = resolve(import.meta.dirname, "..");
export const ENTRY = resolve(ROOT, "src/kube-fleet/kubernetes-client.ts");
export const BUNDLE = resolve(ROOT, "build/kubernetes-client.js");
const PACKAGE = resolve(ROOT, "node_modules/@kubernetes/client-node/package.json");

interface ClientNodePackage {
  readonly version: string;
  readonly dependencies: Record<string, string>;
}

const clientNode = (): ClientNodePackage => JSON.parse(readFileSync(PACKAGE, "utf8")) as ClientNodePackage;

/** The bundle's first line: what it was built from. */
export function bundleBanner(): string {
  const entry = createHash("sha256").update(readFileSync(ENTRY)).digest("hex");
  return `// @kubernetes/client-node ${clientNode().version}, bundled from src/kube-fleet/kubernetes-client.ts sha256:${entry} by scripts/bundle-kubernetes-client.ts. Do not edit.`;
}

/** client-node's runtime dependencies: left as imports. */
export function clientNodeDependencies(): string[] {
  return Object.keys(clientNode().dependencies);
}

/** How the bundle is built (the test rebuilds with these to read esbuild's list of what went in). */
export function bundleOptions(): BuildOptions & { entryPoints: string[]; outfile: string } {
  return {
    entryPoints: [ENTRY],
    outfile: BUNDLE,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node24",
    external: clientNodeDependencies(),
    // Functions and classes keep their names (esbuild renames some, e.g. KubeConfig to _KubeConfig):
    // stack traces and anything that reads a constructor's name see client-node's.
    keepNames: true,
    minifyWhitespace: true,
    banner: { js: bundleBanner() },
    legalComments: "inline",
    logLevel: "warning",
  };
}

if (import.meta.main) await build(bundleOptions());
