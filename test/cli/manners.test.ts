/**
 * CLI manners (issue 13): every command answers --help with its own usage and exit 0; `check`
 * says in plain words why it cannot reach a server, and exits 2.
 */
import { describe, expect, it } from "vitest";
import { freePort } from "../harness/ports.ts";
import { cli } from "./run.ts";

describe("--help on every command", () => {
  it.each([
    { args: ["--help"], usage: /^usage:\n  portcullis --config FILE/ },
    { args: ["-h"], usage: /^usage:\n  portcullis --config FILE/ },
    { args: ["--config", "x.yaml", "--help"], usage: /^usage: portcullis --config FILE\n/ },
    { args: ["validate-config", "--help"], usage: /^usage: portcullis validate-config \[--file-only\] FILE\n/ },
    { args: ["validate-config", "some.yaml", "-h"], usage: /^usage: portcullis validate-config \[--file-only\] FILE\n/ },
    { args: ["config-schema", "--help"], usage: /^usage: portcullis config-schema\n/ },
    { args: ["envoy-config", "--help"], usage: /^usage: portcullis envoy-config --config FILE \[--output FILE\]\n/ },
    { args: ["check", "--help"], usage: /^usage: portcullis check --server HOST:PORT --policy P --path PATH/ },
    { args: ["revoke", "--help"], usage: /^usage: portcullis revoke / },
    { args: ["unrevoke", "--help"], usage: /^usage: portcullis unrevoke / },
  ])("$args", async ({ args, usage }) => {
    const res = await cli(args);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(usage);
    expect(res.stdout).toMatch(/exit status/);
  });
});

describe("check: connection errors in plain words", () => {
  it.each([
    {
      name: "nothing listening on the gRPC port",
      args: (port: number) => ["check", "--server", `127.0.0.1:${port}`, "--policy", "kube-api-proxy", "--path", "/version"],
      stderr: (port: number) => `portcullis check: cannot reach portcullis at 127.0.0.1:${port}: connection refused (is it running, on that port?)\n`,
    },
    {
      name: "nothing listening on the admin port (--explain)",
      args: (port: number) => ["check", "--explain", "--admin", `127.0.0.1:${port}`, "--policy", "kube-api-proxy", "--path", "/version"],
      stderr: (port: number) => `portcullis check: cannot reach portcullis's admin port at 127.0.0.1:${port}: connection refused (is it running, on that port?)\n`,
    },
    {
      name: "a token file that is not there",
      args: (port: number) => ["check", "--server", `127.0.0.1:${port}`, "--policy", "kube-api-proxy", "--path", "/version", "--token-file", "/nonexistent/alice.jwt"],
      stderr: () => "portcullis check: cannot read the token file /nonexistent/alice.jwt: no such file\n",
    },
  ])("$name", async ({ args, stderr }) => {
    const port = await freePort();
    const res = await cli(args(port));
    expect(res).toEqual({ code: 2, stdout: "", stderr: stderr(port) });
  });
});
