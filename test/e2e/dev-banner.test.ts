/**
 * The `npm start` banner's commands are copy-pasteable as printed (issue 13): each command block is
 * pasted, as is, into bash at the repository's root against the demo world (real kube-apiserver and
 * OpenFGA), and answers what its `# →` line says.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEMO_TOKEN_SECONDS, devStackBanner, writeDemoTokens } from "../../scripts/dev-banner.ts";
import { freePort } from "../harness/ports.ts";
import { type FundamentWorld, startFundamentWorld } from "./fundament-world.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const dir = mkdtempSync(join(tmpdir(), "portcullis-banner-"));
let world: FundamentWorld;
let banner: string;

beforeAll(async () => {
  const listen = { grpc: `127.0.0.1:${await freePort()}`, admin: `127.0.0.1:${await freePort()}`, internal: `127.0.0.1:${await freePort()}` };
  world = await startFundamentWorld({ listen, pluginTokenMaxLifetimeSeconds: DEMO_TOKEN_SECONDS });
  await writeDemoTokens(dir, world.installationUid);
  banner = devStackBanner({ root: ROOT, dir, listen, apiServerUrl: world.api.url, openfgaUrl: world.fga.apiUrl });
});
afterAll(async () => {
  await world?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The blocks of the banner that begin with `# →`: the expectation line and the command under it. */
function blocks(text: string): Array<{ expected: string; command: string }> {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("# → "))
    .map((block) => ({ expected: block.slice(4, block.indexOf(":")), command: block }));
}

function bash(command: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    execFile("bash", ["-c", command], { cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) => {
      resolveRun({ status: err === null ? 0 : typeof err.code === "number" ? err.code : null, stdout, stderr });
    });
  });
}

describe("the npm start banner", () => {
  it("prints four whole commands, none abbreviated", () => {
    expect(blocks(banner)).toHaveLength(4);
    expect(banner).not.toContain("…  --path");
    for (const { command } of blocks(banner)) expect(command).not.toMatch(/^…|\n…/);
  });

  it("each command, pasted into bash at the repository root, answers what the banner says", { timeout: 180_000 }, async () => {
    for (const { expected, command } of blocks(banner)) {
      // The whole block, comment line included, exactly as a terminal receives a paste. Not
      // spawnSync: portcullis runs in this process and must keep answering.
      const run = await bash(command);
      const out = run.stdout;
      if (expected === "allowed") {
        expect(run.status, `${command}\n${out}${run.stderr}`).toBe(0);
        expect(out).toContain("decision: allow\n");
      } else {
        const [status, reason] = expected.split(" ");
        expect(run.status, `${command}\n${out}${run.stderr}`).toBe(1);
        expect(out).toContain(`status:   ${status}\nreason:   ${reason}\n`);
      }
    }
  });
});
