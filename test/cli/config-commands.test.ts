/**
 * The configuration subcommands as an operator runs them: exit statuses, messages naming the
 * field, and the generators printing exactly the committed files.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { cli, ROOT } from "./run.ts";

const dir = mkdtempSync(join(tmpdir(), "portcullis-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, config: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof config === "string" ? config : stringify(config));
  return path;
}

const valid = {
  tokens: { secrets: [{ env: "PORTCULLIS_JWT_SECRET" }] },
  openfga: { apiUrl: "http://openfga:8080", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
  clusters: [{ id: "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b" }],
};

describe("portcullis validate-config", () => {
  it("exits 0 and says ok for a valid file, with what it reads present", async () => {
    const path = file("ok.yaml", valid);
    const env = { PORTCULLIS_JWT_SECRET: "s".repeat(32), KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" };
    expect(await cli(["validate-config", "--file-only", path], env)).toEqual({ code: 0, stdout: `${path}: ok\n`, stderr: "" });
    // Without --file-only, the start checks: this machine is no pod.
    const res = await cli(["validate-config", path], env);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("  clusters[0]: in-cluster configuration (no kubeconfig) needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set");
  });

  it("exits 2 and names every bad field", async () => {
    const path = file("bad.yaml", { ...valid, listen: { grcp: "x" }, check: { timeoutMs: -1 } });
    const res = await cli(["validate-config", path]);
    expect(res.code).toBe(2);
    expect(res.stdout).toBe("");
    expect(res.stderr).toBe(
      `invalid configuration: ${path}:\n  listen: Unrecognized key: "grcp"\n  check.timeoutMs: expected whole milliseconds from 1 to 60000 (60 s)\n`,
    );
  });

  it.each([
    { name: "a missing file", args: () => ["validate-config", join(dir, "nope.yaml")], stderr: /^invalid configuration: cannot read .*nope\.yaml: ENOENT\n$/ },
    { name: "invalid YAML", args: () => ["validate-config", file("broken.yaml", "listen: [")], stderr: /^invalid configuration: .*broken\.yaml: not valid YAML: / },
    { name: "no file argument", args: () => ["validate-config"], stderr: /^usage:/ },
  ])("exits 2 for $name", async ({ args, stderr }) => {
    const res = await cli(args());
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(stderr);
  });
});

describe("a cookie origin that serves plugin code (issue 42 §5)", () => {
  const envoy = {
    origins: { console: "https://console.example", kubeApiProxy: "https://kube.example", pluginProxy: "https://plugins.example" },
    clusters: [{ id: valid.clusters[0]!.id, apiServer: "https://10.0.0.1:6443", caFile: "/ca.crt" }],
    upstreams: { assets: { url: "http://assets:8080" } },
  };
  const session = { discoveryUrl: "https://idp.example/.well-known/openid-configuration", audience: "konfidence", cookie: "session" };
  it.each([
    { name: "tokens.cookieOrigins: plugin-proxy's origin", config: { ...valid, tokens: { ...valid.tokens, cookieOrigins: ["https://plugins.example"] }, envoy }, field: "tokens.cookieOrigins[0]: https://plugins.example is on the host plugin-proxy's" },
    { name: "tokens.cookieOrigins: kube-api-proxy's host on another port", config: { ...valid, tokens: { ...valid.tokens, cookieOrigins: ["https://console.example", "https://KUBE.example:8443"] }, envoy }, field: "tokens.cookieOrigins[1]: https://KUBE.example:8443 is on the host kube-api-proxy's" },
    { name: "konfidence.session.cookieOrigins: plugin-proxy's origin", config: { ...valid, envoy, konfidence: { session: { ...session, cookieOrigins: ["https://plugins.example"] } } }, field: "konfidence.session.cookieOrigins[0]: https://plugins.example is on the host plugin-proxy's" },
  ])("$name: the server and validate-config exit 2 naming the field", async ({ name, config, field }) => {
    const path = file(`${name.replace(/[^a-z]+/gi, "-")}.yaml`, config);
    const env = { PORTCULLIS_JWT_SECRET: "s".repeat(32) };
    for (const args of [["validate-config", "--file-only", path], ["--config", path]]) {
      const res = await cli(args, env);
      expect(res).toMatchObject({ code: 2, stdout: "" });
      expect(res.stderr).toContain(`invalid configuration: ${path}:\n`);
      expect(res.stderr).toContain(`\n  ${field}`);
    }
  });
});

describe("portcullis envoy-config", () => {
  it("prints exactly deploy/examples/envoy.yaml for deploy/examples/portcullis.yaml", async () => {
    const res = await cli(["envoy-config", "--config", "deploy/examples/portcullis.yaml"]);
    expect(res.code).toBe(0);
    expect(res.stdout).toBe(readFileSync(resolve(ROOT, "deploy/examples/envoy.yaml"), "utf8"));
  });

  it("--output writes the same bytes to the file and prints nothing (the data-plane's init container)", async () => {
    const output = join(dir, "envoy.yaml");
    const res = await cli(["envoy-config", "--config", "deploy/examples/portcullis.yaml", "--output", output]);
    expect(res).toMatchObject({ code: 0, stdout: "", stderr: "" });
    expect(readFileSync(output, "utf8")).toBe(readFileSync(resolve(ROOT, "deploy/examples/envoy.yaml"), "utf8"));
  });

  it.each([
    ["--output without a value", ["--config", "deploy/examples/portcullis.yaml", "--output"]],
    ["--output without --config", ["--output", "x.yaml"]],
    ["an unknown flag", ["--config", "deploy/examples/portcullis.yaml", "--out", "x.yaml"]],
  ])("exits 2 for %s", async (_, args) => {
    const res = await cli(["envoy-config", ...args]);
    expect(res).toMatchObject({ code: 2, stdout: "" });
    expect(res.stderr).toMatch(/^usage:/m);
  });

  it("exits 2 for a configuration without an envoy section", async () => {
    const res = await cli(["envoy-config", "--config", file("no-envoy.yaml", valid)]);
    expect(res).toMatchObject({ code: 2, stdout: "" });
    expect(res.stderr).toBe("portcullis: the configuration has no envoy section; add one (docs/configuration.md)\n");
  });

  it("exits 2 for an invalid configuration, naming the field", async () => {
    const res = await cli(["envoy-config", "--config", file("bad-envoy.yaml", { ...valid, envoy: { origins: {} } })]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("  envoy.origins.console: Invalid input: expected string, received undefined\n");
  });
});

describe("portcullis config-schema", () => {
  it("prints exactly deploy/portcullis.schema.json", async () => {
    const res = await cli(["config-schema"]);
    expect(res.code).toBe(0);
    expect(res.stdout).toBe(readFileSync(resolve(ROOT, "deploy/portcullis.schema.json"), "utf8"));
  });
});

describe("portcullis (no or unknown command)", () => {
  it.each([[[]], [["frobnicate"]], [["--config"]]])("%j prints usage and exits 2", async (args) => {
    const res = await cli(args);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/^usage:\n  portcullis --config FILE/);
  });
});
