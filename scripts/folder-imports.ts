/**
 * The folders of src/ and which import which (static imports, `import type` included: a type is a
 * dependency a reader follows too), with the import circles between folders, and the same between
 * files (dynamic imports included). Run it to see them:
 * `node scripts/folder-imports.ts [src]`; test/folder-imports.test.ts holds the layering it must keep.
 */

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";

/** One folder importing another, with the file imports that make the edge (`kube-fleet/clusters.ts -> ports/policy-ports.ts`). */
export interface FolderEdge {
  readonly from: string;
  readonly to: string;
  readonly imports: readonly string[];
}

const STATIC_IMPORT = /^\s*(?:import|export)\s[^'"]*?\sfrom\s+["']([^"']+)["']|^\s*import\s+["']([^"']+)["']/gm;
/** `await import("./x.ts")`: loaded later, still a file the importer needs (a circle through one is a circle). */
const DYNAMIC_IMPORT = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

/** The edges between the top-level folders of `root` (a file directly in `root` counts as folder "."). */
export function folderImports(root: string): FolderEdge[] {
  const top = (file: string) => relative(root, dirname(file)).split(sep)[0] || ".";
  const edges = new Map<string, string[]>();
  for (const file of sourceFiles(root)) {
    for (const match of readFileSync(file, "utf8").matchAll(STATIC_IMPORT)) {
      const specifier = match[1] ?? match[2] ?? "";
      if (!specifier.startsWith(".")) continue;
      const target = resolve(dirname(file), specifier);
      if (top(file) === top(target)) continue;
      const key = `${top(file)} ${top(target)}`;
      edges.set(key, [...(edges.get(key) ?? []), `${relative(root, file)} -> ${relative(root, target)}`]);
    }
  }
  return [...edges].map(([key, imports]) => {
    const [from = "", to = ""] = key.split(" ");
    return { from, to, imports };
  });
}

/** The edges between the files of `root` (paths relative to it), dynamic imports included. */
export function fileImports(root: string): FolderEdge[] {
  const edges: FolderEdge[] = [];
  for (const file of sourceFiles(root)) {
    const text = readFileSync(file, "utf8");
    for (const match of [...text.matchAll(STATIC_IMPORT), ...text.matchAll(DYNAMIC_IMPORT)]) {
      const specifier = match[1] ?? match[2] ?? "";
      if (!specifier.startsWith(".")) continue;
      const target = relative(root, resolve(dirname(file), specifier));
      edges.push({ from: relative(root, file), to: target, imports: [`${relative(root, file)} -> ${target}`] });
    }
  }
  return edges;
}

/** The import circles: the sets of two or more folders each reachable from the others (Tarjan's strongly connected components). */
export function folderCircles(edges: readonly FolderEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) next.set(from, [...(next.get(from) ?? []), to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const circles: string[][] = [];
  const visit = (folder: string): void => {
    index.set(folder, index.size);
    low.set(folder, index.get(folder)!);
    stack.push(folder);
    for (const to of next.get(folder) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(folder, Math.min(low.get(folder)!, low.get(to)!));
      } else if (stack.includes(to)) {
        low.set(folder, Math.min(low.get(folder)!, index.get(to)!));
      }
    }
    if (low.get(folder) !== index.get(folder)) return;
    const circle = stack.splice(stack.indexOf(folder));
    if (circle.length > 1) circles.push(circle.sort());
  };
  for (const folder of new Set(edges.flatMap(({ from, to }) => [from, to]))) if (!index.has(folder)) visit(folder);
  return circles;
}

/** The edges that import upwards in `layers` (lowest first): every import circle goes through at least one of them. */
export function upwardImports(edges: readonly FolderEdge[], layers: readonly string[]): FolderEdge[] {
  const layer = (folder: string) => {
    const at = layers.indexOf(folder);
    if (at === -1) throw new Error(`folder src/${folder} has no place in the layers`);
    return at;
  };
  return edges.filter(({ from, to }) => layer(from) < layer(to));
}

if (import.meta.main) {
  const root = resolve(process.argv[2] ?? "src");
  for (const edges of [folderImports(root), fileImports(root)]) {
    for (const circle of folderCircles(edges)) {
      console.log(`circle: ${circle.join(" ")}`);
      for (const { from, to, imports } of edges) if (circle.includes(from) && circle.includes(to)) console.log(`  ${from} -> ${to}: ${imports.join("; ")}`);
    }
  }
}
