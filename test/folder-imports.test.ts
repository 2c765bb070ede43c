import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { fileImports, folderCircles, folderImports, upwardImports } from "../scripts/folder-imports.ts";

/**
 * src/'s folders from the lowest to the highest, the reverse of the order a request meets them
 * (cli → server → authz → the domains and their Kubernetes rooms → the helpers → Envoy's wire,
 * the configuration, metrics and redaction): a folder imports only folders before it, types
 * included (issue 53). A new folder must take its place here; ARCHITECTURE.md reads the same list.
 */
const LAYERS = [
  "redaction",
  "konfidence-model",
  "config",
  "metrics",
  "envoy",
  "audit",
  "tracing",
  "dependencies",
  "cache",
  "tokens",
  "headers",
  "ports",
  "kube-reading",
  "kube-fleet",
  "kube-watch",
  "kube-calls",
  "fga",
  "konfidence",
  "authz",
  "deploy",
  "server",
  "cli",
];

describe("imports between src/'s folders", () => {
  const src = resolve(import.meta.dirname, "../src");
  const edges = folderImports(src);

  it("go down the layers only: no folder imports one after it, not even a type", () => {
    expect(upwardImports(edges, LAYERS).map(({ from, to, imports }) => `${from} -> ${to}: ${imports.join("; ")}`)).toEqual([]);
  });

  it("form no circle", () => {
    expect(folderCircles(edges)).toEqual([]);
  });

  it("every folder of src/ has its place in the layers, and every layer is a folder", () => {
    const folders = new Set(edges.flatMap(({ from, to }) => [from, to]));
    expect([...folders].sort()).toEqual([...LAYERS].sort());
  });

  it("no two files import each other through any chain (dynamic imports and types included)", () => {
    expect(folderCircles(fileImports(src))).toEqual([]);
  });

  it("dependency calls and error redaction import nothing from authz, tokens, konfidence or the adapters", () => {
    const importedBy = (folder: string) => edges.filter(({ from }) => from === folder).map(({ to }) => to).sort();
    expect(importedBy("redaction")).toEqual([]);
    expect(importedBy("dependencies")).toEqual(["metrics", "redaction", "tracing"]);
  });
});

describe("ARCHITECTURE.md, the reader's map", () => {
  const map = readFileSync(resolve(import.meta.dirname, "../ARCHITECTURE.md"), "utf8");
  const listed = [...map.matchAll(/^- `src\/([a-z-]+)\/` — \S/gm)].map((m) => m[1]);

  it("names every folder of src/, once, one line each", () => {
    const folders = readdirSync(resolve(import.meta.dirname, "../src"), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    expect([...listed].sort()).toEqual(folders.sort());
  });

  it("in the order a request meets them: the layers from the highest down", () => {
    expect(listed).toEqual([...LAYERS].reverse());
  });
});
