/**
 * The README's first lines (issue 13): the prerequisites, then the two commands. The prerequisites
 * say what scripts/deps/install.sh needs (the Go version the go.mod files declare, Debian's apt for
 * etcd, root or sudo); the validate-config command it shows passes as printed.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import { cli } from "../cli/run.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const readme = readFileSync(resolve(ROOT, "README.md"), "utf8");
const install = readFileSync(resolve(ROOT, "scripts/deps/install.sh"), "utf8");

describe("README", () => {
  const firstBlock = readme.indexOf("```sh\n");
  const beforeCommands = readme.slice(0, firstBlock);

  it("opens with the prerequisites, then exactly the two commands", () => {
    expect(readme.slice(firstBlock).split("\n").slice(0, 4)).toEqual([
      "```sh",
      expect.stringMatching(/^npm install && npm start {3}# /),
      expect.stringMatching(/^npm install && npm test {4}# /),
      "```",
    ]);
    expect(beforeCommands.split("\n")[0]).toBe("# portcullis");
  });

  it("names the Go version the dependency builds declare", () => {
    const declared = new Set(
      ["scripts/deps/kube-apiserver/go.mod", "scripts/deps/requestinfo-oracle/go.mod"].map((f) => /^go (\d+\.\d+)/m.exec(readFileSync(resolve(ROOT, f), "utf8"))![1]),
    );
    expect(declared.size).toBe(1);
    expect(beforeCommands).toContain(`**Go ≥ ${[...declared][0]}**`);
    expect(install).toContain("command -v go");
  });

  it("names Debian's apt for etcd and tini and root or sudo, as install.sh uses them", () => {
    expect(install).toMatch(/apt-get download [^\n]*"\$1"/);
    expect([...install.matchAll(/^\s*unpack_debian_package (\S+) /gm)].map((m) => m[1])).toEqual(["etcd-server", "tini"]);
    expect(install).toMatch(/sudo=\(sudo\)/);
    expect(beforeCommands).toMatch(/Debian's apt, `etcd-server` and `tini`/);
    expect(beforeCommands).toMatch(/root or `sudo`/);
  });

  it("its Tests section names every tool install.sh compiles for the tests", () => {
    const tests = readme.slice(readme.indexOf("## Tests"));
    const tools = [...install.matchAll(/^\s*go_install_cached ([\w-]+) /gm)].map((m) => m[1]!);
    expect(tools).toEqual(expect.arrayContaining(["egctl", "pilot-discovery"]));
    for (const tool of tools) expect(tests, tool).toMatch(new RegExp(`\\b${tool}\\b`, "i"));
  });

  it("names the ports the configuration defaults to", () => {
    const listen = configSchema.parse({ openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01JBENCHST0RE0000000000000" }, tokens: { secrets: [{ env: "S" }] } }).listen;
    const port = (address: string) => address.slice(address.lastIndexOf(":") + 1);
    const line = readme.slice(readme.indexOf("Ports: "), readme.indexOf("SIGTERM turns"));
    expect(line).toMatch(new RegExp(`ext_authz gRPC \\+ \`grpc\\.health\\.v1\` \\(${port(listen.grpc)}\\)`));
    expect(line).toMatch(new RegExp(`admin HTTP [^(]+\\(${port(listen.admin)}\\)`));
    expect(line).toMatch(new RegExp(`GetInstallationManifest\` for authn-api only \\(${port(listen.internal)}\\)`));
  });

  it("its validate-config command passes as printed", async () => {
    const line = readme.split("\n").find((l) => l.startsWith("npm start -- validate-config"))!;
    const args = line.replace(/\s+#.*$/, "").split(/\s+/).slice(3);
    expect(args[0]).toBe("validate-config");
    expect(await cli(args)).toMatchObject({ code: 0, stderr: "" });
  });
});
