/** Runs the real CLI (`node src/cli/main.ts …`) in a child process, without blocking in-process servers. */
import { execFile } from "node:child_process";
import { resolve } from "node:path";

export const ROOT = resolve(import.meta.dirname, "../..");

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  return new Promise((resolveRun) => {
    execFile(process.execPath, ["src/cli/main.ts", ...args], { cwd: ROOT, env: { ...process.env, ...env }, timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : -1;
      resolveRun({ code, stdout, stderr });
    });
  });
}
