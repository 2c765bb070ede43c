/**
 * The memory figures bench/RESULTS.md's "Sizing the pod from this run" table gives (MiB), which the
 * shipped manifests and Node flags are held to.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

export interface MeasuredMemory {
  /** Idle, 10,000 installations indexed, default cache sizes, after a full GC. */
  readonly idleMiB: number;
  /** At the default cache sizes (50,000 users on the fill's curve). */
  readonly defaultCachesMiB: number;
  /** The request the run derives from it. */
  readonly request: string;
  /** At the scale target (100,000 users cached), the highest of its readings. */
  readonly scaleTargetMiB: number;
}

export function measuredMemory(): MeasuredMemory {
  const results = readFileSync(resolve(import.meta.dirname, "../../bench/RESULTS.md"), "utf8");
  const row = (label: string) => {
    const m = new RegExp(`^\\| ${label}[^|]* \\| (\\d+) \\|([^|]*)\\|`, "m").exec(results);
    if (m === null) throw new Error(`bench/RESULTS.md has no sizing row "${label}"`);
    return { mib: Number(m[1]), request: m[2]!.replaceAll("*", "").trim() };
  };
  const defaultCaches = row("default cache sizes \\(");
  return { idleMiB: row("idle, ").mib, defaultCachesMiB: defaultCaches.mib, request: defaultCaches.request, scaleTargetMiB: row("scale target \\(").mib };
}
