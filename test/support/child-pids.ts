/** The processes a process started, from /proc: the watchdog beside a server (bench RSS, the watchdog tests). */
import { readdirSync, readFileSync } from "node:fs";

/** The pids whose parent is `pid`, from each /proc/<pid>/stat. */
export function childPids(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // ended meanwhile
    }
    // The command name, in parentheses, may hold spaces; the parent pid is the second field after it.
    if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) children.push(Number(entry));
  }
  return children;
}
