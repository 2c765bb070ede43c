/** Top self-time functions of a V8 .cpuprofile (as `node --cpu-prof` writes it). */
import { readFileSync } from "node:fs";
import { relative } from "node:path";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  readonly fn: string;
  readonly where: string;
  readonly selfMs: number;
  readonly share: number;
}

/** Self time per function (summed over call sites), highest first; `idle` and `program` are kept visible. */
export function topSelfTime(file: string, root: string, limit = 20): { totalMs: number; rows: SelfTime[] } {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<string, { fn: string; where: string; us: number }>();
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!);
    // The delta before a sample is the time it stands for (V8's own convention in DevTools).
    const dt = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0;
    if (node === undefined) continue;
    total += dt;
    const { functionName, url, lineNumber } = node.callFrame;
    const fn = functionName === "" ? "(anonymous)" : functionName;
    const where = url === "" ? "" : `${shorten(url, root)}:${lineNumber + 1}`;
    const key = `${fn}@${where}`;
    const entry = selfUs.get(key) ?? { fn, where, us: 0 };
    entry.us += dt;
    selfUs.set(key, entry);
  }
  const rows = [...selfUs.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, limit)
    .map((e) => ({ fn: e.fn, where: e.where, selfMs: e.us / 1000, share: total === 0 ? 0 : e.us / total }));
  return { totalMs: total / 1000, rows };
}

function shorten(url: string, root: string): string {
  const path = url.startsWith("file://") ? new URL(url).pathname : url;
  if (path.startsWith("node:")) return path;
  const rel = relative(root, path);
  return rel.startsWith("node_modules/") ? rel.slice("node_modules/".length) : rel;
}
