/**
 * client-node's bundle, `#kubernetes-client` (src/kube/kubernetes-client.ts says why): built from
 * the installed client-node and the entry as it is now; client-node's own code and nothing else,
 * its dependencies left as imports; exactly the classes the entry names, each client-node's own;
 * the only way src/ reaches client-node; and what the image's build stage copies is all the
 * bundler needs. That the bundled code works is every kube test's business: src/ runs on it.
 */
import { spawnSync } from "node:child_process";
import { builtinModules } from "node:module";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { BUNDLE, bundleBanner, clientNodeDependencies, ENTRY } from "../../scripts/bundle-kubernetes-client.ts";
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

/** Every module specifier the bundle imports, static or dynamic. */
function importedSpecifiers(text: string): string[] {
  const found = new Set<string>();
  for (const m of text.matchAll(/^import\s[^;]*?\sfrom\s*"([^"]+)";?$/gm)) found.add(m[1]!);
  for (const m of text.matchAll(/^import\s*"([^"]+)";?$/gm)) found.add(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g)) found.add(m[1]!);
  return [...found].sort();
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

  it("holds client-node's files only: its dependencies and Node's modules stay imports", () => {
    const text = bundle();
    // esbuild names the file each module came from in a comment before it.
    const files = [...text.matchAll(/^\/\/ (node_modules\/\S+\.js)$/gm)].map((m) => m[1]!);
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((f) => !f.startsWith("node_modules/@kubernetes/client-node/dist/"))).toEqual([]);
    // Of the generated clients of every API group, only the three src/ uses.
    expect(files.filter((f) => /\/dist\/gen\/apis\/\w+Api\.js$/.test(f)).sort()).toEqual(
      ["AuthorizationV1Api", "CoreV1Api", "CustomObjectsApi"].map((api) => `node_modules/@kubernetes/client-node/dist/gen/apis/${api}.js`),
    );
    const allowed = new Set([...clientNodeDependencies(), ...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
    const specifiers = importedSpecifiers(text);
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
    expect(copies.sort()).toEqual(["scripts/bundle-kubernetes-client.ts", "src/kube/kubernetes-client.ts"]);
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
      // The path comments name files as seen from each tree; the code must be the same.
      const code = (text: string) => text.split("\n").filter((line) => !line.startsWith("// ")).join("\n");
      expect(code(readFileSync(join(dir, "build/kubernetes-client.js"), "utf8"))).toBe(code(bundle()));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
