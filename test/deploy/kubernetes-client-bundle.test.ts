/**
 * client-node's bundle, `#kubernetes-client` (src/kube-fleet/kubernetes-client.ts says why): built from
 * the installed client-node and the entry as it is now; client-node's own code and nothing else,
 * its dependencies left as imports; exactly the classes the entry names, each client-node's own;
 * the only way src/ reaches client-node; and what the image's build stage copies is all the
 * bundler needs. That the bundled code works is every kube test's business: src/ runs on it.
 */
import { spawnSync } from "node:child_process";
import { builtinModules } from "node:module";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { build } from "esbuild";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { BUNDLE, bundleBanner, bundleOptions, clientNodeDependencies, ENTRY } from "../../scripts/bundle-kubernetes-client.ts";
import { NODE } from "../support/portcullis-process.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const bundle = () => readFileSync(BUNDLE, "utf8");

/** The value names the entry exports from client-node (its `export { … } from` statement). */
function entryValueNames(): string[] {
  const source = ts.createSourceFile(ENTRY, readFileSync(ENTRY, "utf8"), ts.ScriptTarget.Latest);
  const names: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement) || statement.isTypeOnly || statement.exportClause === undefined) continue;
    if (!ts.isNamedExports(statement.exportClause)) continue;
    for (const element of statement.exportClause.elements) if (!element.isTypeOnly) names.push(element.name.text);
  }
  return names.sort();
}

/**
 * What esbuild put into the bundle (its metafile): every file that contributed code, and every
 * import left in the output, static or dynamic. Rebuilt with the script's options, and held to be the bundle on disk.
 */
async function bundleContents(): Promise<{ text: string; inputs: string[]; externalImports: string[] }> {
  const built = await build({ ...bundleOptions(), write: false, metafile: true, absWorkingDir: ROOT });
  const output = Object.values(built.metafile.outputs)[0]!;
  return {
    text: built.outputFiles[0]!.text,
    // The files that contributed code: esbuild reads modules it then leaves out (tree shaking).
    inputs: Object.entries(output.inputs).filter(([, input]) => input.bytesInOutput > 0).map(([path]) => path),
    externalImports: [...new Set(output.imports.filter((i) => i.external).map((i) => i.path))].sort(),
  };
}

describe("client-node's bundle", () => {
  it("was built from the installed client-node and the entry as it is now (else: node scripts/bundle-kubernetes-client.ts)", () => {
    expect(bundle().split("\n", 1)[0]).toBe(bundleBanner());
  });

  it("exports exactly the classes the entry names, each client-node's own", async () => {
    const names = entryValueNames();
    expect(names).toContain("KubeConfig");
    const bundled = (await import("#kubernetes-client")) as unknown as Record<string, unknown>;
    const unbundled = (await import("@kubernetes/client-node")) as unknown as Record<string, unknown>;
    expect(Object.keys(bundled).sort()).toEqual(names);
    const methods = (value: unknown) => Object.getOwnPropertyNames((value as { prototype: object }).prototype).sort();
    for (const name of names) {
      expect(typeof bundled[name], name).toBe("function");
      // Another copy of the same class (esbuild rewrites quotes, comments and clashing names, so
      // not the same source text): same name, same methods.
      expect(bundled[name]).not.toBe(unbundled[name]);
      expect((bundled[name] as { name: string }).name, name).toBe((unbundled[name] as { name: string }).name);
      expect(methods(bundled[name]), name).toEqual(methods(unbundled[name]));
    }
  });

  it("holds client-node's files only: its dependencies and Node's modules stay imports", async () => {
    const { text, inputs, externalImports: specifiers } = await bundleContents();
    expect(text).toBe(bundle());
    const files = inputs.filter((f) => f !== relative(ROOT, ENTRY));
    expect(files.length).toBeGreaterThan(100);
    // Its code, and the package.json it reads its own version from.
    expect(files.filter((f) => !f.startsWith("node_modules/@kubernetes/client-node/dist/") && f !== "node_modules/@kubernetes/client-node/package.json")).toEqual([]);
    // Of the generated clients of every API group, only the three src/ uses.
    expect(files.filter((f) => /\/dist\/gen\/apis\/\w+Api\.js$/.test(f)).sort()).toEqual(
      ["AuthorizationV1Api", "CoreV1Api", "CustomObjectsApi"].map((api) => `node_modules/@kubernetes/client-node/dist/gen/apis/${api}.js`),
    );
    const allowed = new Set([...clientNodeDependencies(), ...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
    expect(specifiers).toContain("undici");
    expect(specifiers.filter((s) => !allowed.has(s) && !allowed.has(s.split("/")[0]!))).toEqual([]);
  });

  it("is the only way src/ reaches client-node: no other module imports the package", () => {
    const offenders = readdirSync(join(ROOT, "src"), { recursive: true, encoding: "utf8" })
      .filter((path) => path.endsWith(".ts"))
      .map((path) => join(ROOT, "src", path))
      .filter((path) => path !== ENTRY)
      .filter((path) => /(?:from\s*|import\(\s*)"@kubernetes\/client-node(?:\/[^"]*)?"/.test(readFileSync(path, "utf8")));
    expect(offenders).toEqual([]);
  });
});

describe("the image builds it", () => {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const stage = /^FROM \S+ AS kubernetes-client\n([\s\S]*?)(?=^FROM )/m.exec(dockerfile);

  it("in a stage of its own, and copies build/ into the image before the compile cache is warmed", () => {
    expect(stage).not.toBeNull();
    expect(stage![1]).toMatch(/^RUN npm ci --ignore-scripts\b/m);
    expect(stage![1]).toMatch(/^RUN node scripts\/bundle-kubernetes-client\.ts$/m);
    const copy = dockerfile.indexOf("COPY --from=kubernetes-client /app/build ./build");
    expect(copy).toBeGreaterThan(stage!.index);
    expect(copy).toBeLessThan(dockerfile.indexOf('RUN mkdir -p "$NODE_COMPILE_CACHE"'));
  });

  it("from the files the stage copies (and .dockerignore lets through): the same code", { timeout: 60_000 }, () => {
    const copies = [...stage![1]!.matchAll(/^COPY (\S+) (\S+)$/gm)].map((m) => m[1]!).filter((source) => !source.startsWith("package"));
    expect(copies.sort()).toEqual(["scripts/bundle-kubernetes-client.ts", "src/kube-fleet/kubernetes-client.ts"]);
    const ignore = readFileSync(join(ROOT, ".dockerignore"), "utf8").split("\n");
    for (const source of copies) expect(ignore.some((line) => line === `!${source}` || line === `!${source.split("/")[0]}/`), source).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), "portcullis-bundle-stage-"));
    try {
      for (const source of copies) {
        mkdirSync(dirname(join(dir, source)), { recursive: true });
        copyFileSync(join(ROOT, source), join(dir, source));
      }
      symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
      const run = spawnSync(NODE, ["scripts/bundle-kubernetes-client.ts"], { cwd: dir, encoding: "utf8", timeout: 50_000 });
      expect(run.status, run.stderr).toBe(0);
      expect(readFileSync(join(dir, "build/kubernetes-client.js"), "utf8")).toBe(bundle());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
