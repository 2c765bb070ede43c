/**
 * The shipped Node flags (src/cli/node-flags.ts) are what every way of starting portcullis runs:
 * `npm start`, the Dockerfile's ENTRYPOINT (and ENV), the Deployment (which must not override the
 * ENTRYPOINT), and the benchmark, which imports the list. No other file spells a flag of its own.
 */
import { execFile } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { isAbsolute, join, posix, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { NODE_ENV, NODE_FLAGS } from "../../src/cli/node-flags.ts";
import { measuredMemory } from "./measured-memory.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const read = (path: string) => readFileSync(resolve(ROOT, path), "utf8");
const envPrefix = Object.entries(NODE_ENV)
  .map(([k, v]) => `${k}=${v} `)
  .join("");

describe("the shipped Node flags", () => {
  it("npm start runs node with them", () => {
    const scripts = (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts;
    expect(scripts["start"]).toBe(`${envPrefix}node ${NODE_FLAGS.join(" ")} scripts/start.ts`);
  });

  it("npm start with them starts (node accepts every flag): validate-config through the npm script exits 0", { timeout: 60_000 }, async () => {
    const run = await new Promise<{ code: number | null; stderr: string }>((done) =>
      execFile("npm", ["start", "--silent", "--", "validate-config", "--file-only", "deploy/examples/portcullis.yaml"], { cwd: ROOT, timeout: 50_000 }, (err, _out, stderr) =>
        done({ code: err === null ? 0 : typeof err.code === "number" ? err.code : null, stderr }),
      ),
    );
    expect(run, run.stderr).toMatchObject({ code: 0 });
    expect(run.stderr).not.toMatch(/bad option/);
  });

  it("the Dockerfile's ENTRYPOINT runs node with them under tini, and its ENV carries the shipped environment", () => {
    const dockerfile = read("Dockerfile");
    const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile);
    expect(entrypoint).not.toBeNull();
    expect(JSON.parse(entrypoint![1]!)).toEqual(["tini", "--", "node", ...NODE_FLAGS, "src/cli/main.ts"]);
    for (const [k, v] of Object.entries(NODE_ENV)) expect(dockerfile).toMatch(new RegExp(`^ENV ${k}=${v}$`, "m"));
    // docs/deployment.md quotes the ENTRYPOINT and the ENV as the image has them.
    const doc = read("docs/deployment.md");
    expect(doc).toContain(`\`ENTRYPOINT ${JSON.stringify(["tini", "--", "node", ...NODE_FLAGS, "src/cli/main.ts"]).replaceAll(",", ", ")}\``);
    for (const [k, v] of Object.entries(NODE_ENV)) expect(doc).toContain(`\`ENV ${k}=${v}\``);
  });

  it("the Dockerfile fills the compile cache at build with the ENTRYPOINT's flags, as the USER, after copying src/", () => {
    const dockerfile = read("Dockerfile");
    const user = /^USER (\d+):(\d+)$/m.exec(dockerfile);
    expect(user).not.toBeNull();
    const run = /^RUN mkdir -p "\$NODE_COMPILE_CACHE"(?:[^\n]*\\\n)*[^\n]*/m.exec(dockerfile);
    expect(run).not.toBeNull();
    const asUser = `setpriv --reuid=${user![1]} --regid=${user![2]} --clear-groups node ${NODE_FLAGS.join(" ")}`;
    expect(run![0]).toContain(`chown ${user![1]}:${user![2]} "$NODE_COMPILE_CACHE"`);
    expect(run![0]).toContain(`${asUser} src/cli/main.ts --help`);
    expect(run![0]).toContain(`${asUser} src/cli/warm-compile-cache.ts`);
    // Node writes its entries owner-only: root-owned, they must be made readable to the USER.
    expect(run![0]).toMatch(/&& chown -R root:root "\$NODE_COMPILE_CACHE" && chmod -R a\+rX "\$NODE_COMPILE_CACHE"$/);
    expect(dockerfile.indexOf("COPY src ./src")).toBeLessThan(run!.index);
    expect(dockerfile.indexOf(`ENV NODE_COMPILE_CACHE=`)).toBeLessThan(run!.index);
    expect(run!.index).toBeLessThan(user!.index);
  });

  it("the compile cache is inside the image's WORKDIR, where the Deployment runs and mounts no volume over it", () => {
    const cache = NODE_ENV["NODE_COMPILE_CACHE"];
    expect(cache).toBeDefined();
    // Relative: the package root for npm start and the benchmark, /app in the image.
    expect(isAbsolute(cache!)).toBe(false);
    const workdir = /^WORKDIR (\S+)$/m.exec(read("Dockerfile"))![1]!;
    const deployment = parseAllDocuments(read("deploy/k8s/deployment.yaml"))
      .map((d) => d.toJS() as Record<string, any>)
      .find((d) => d["kind"] === "Deployment")!;
    const container = deployment["spec"].template.spec.containers[0];
    expect(container.workingDir).toBeUndefined();
    const inImage = posix.join(workdir, cache!);
    for (const mount of container.volumeMounts as Array<{ mountPath: string }>) expect(`${inImage}/`.startsWith(`${mount.mountPath}/`), mount.mountPath).toBe(false);
  });

  it("the Deployment keeps the image's ENTRYPOINT (no command of its own) and sets the shipped environment", () => {
    const deployment = parseAllDocuments(read("deploy/k8s/deployment.yaml"))
      .map((d) => d.toJS() as Record<string, any>)
      .find((d) => d["kind"] === "Deployment")!;
    const container = deployment["spec"].template.spec.containers[0];
    expect(container.command).toBeUndefined();
    const env = Object.fromEntries((container.env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]));
    for (const [k, v] of Object.entries(NODE_ENV)) expect(env[k]).toBe(v);
    expect(env["NODE_OPTIONS"]).toBeUndefined();
  });

  it("the old generation's cap fits in the Deployment's memory limit beside the young generation and the idle RSS bench/RESULTS.md measured", () => {
    const flag = (name: string) => {
      const given = NODE_FLAGS.find((f) => f.startsWith(`--${name}=`));
      expect(given, name).toBeDefined();
      return Number(given!.split("=")[1]);
    };
    const deployment = parseAllDocuments(read("deploy/k8s/deployment.yaml"))
      .map((d) => d.toJS() as Record<string, any>)
      .find((d) => d["kind"] === "Deployment")!;
    const limit = /^(\d+)Mi$/.exec(deployment["spec"].template.spec.containers[0].resources.limits.memory as string);
    expect(limit).not.toBeNull();
    // The idle row already holds some old generation, so this over-counts: a bound, not an estimate.
    // V8's young generation: two semi-spaces and the new large-object space, at most 3 × the semi-space.
    expect(flag("max-old-space-size") + 3 * flag("max-semi-space-size") + measuredMemory().idleMiB).toBeLessThanOrEqual(Number(limit![1]));
  });

  it("no source, script or benchmark spells a V8 heap flag of its own: they import the list", () => {
    const files = ["src", "scripts", "bench"].flatMap(function walk(dir: string): string[] {
      return readdirSync(resolve(ROOT, dir)).flatMap((name) => {
        const path = join(dir, name);
        return statSync(resolve(ROOT, path)).isDirectory() ? walk(path) : path.endsWith(".ts") ? [path] : [];
      });
    });
    const spelled = files.filter((f) => /--max-(semi|old)-space-size/.test(read(f))).map((f) => relative(ROOT, resolve(ROOT, f)));
    expect(spelled).toEqual(["src/cli/node-flags.ts"]);
    expect(read("bench/run.ts")).toMatch(/import \{[^}]*NODE_FLAGS[^}]*\} from "\.\.\/src\/cli\/node-flags\.ts"/);
  });
});
