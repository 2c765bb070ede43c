/**
 * `portcullis check` against a running server (fakes behind real gRPC and a real admin port), and
 * the admin port's `POST /explain` it uses: decisions, statuses, redaction, the gates' trace.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { ServerResponse, type IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { isLoopbackPeer } from "../../src/server/admin.ts";
import { startTestServer, testConfig, type TestServer } from "../support/server.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { ids, pluginToken, userToken } from "../support/tokens.ts";
import { cli } from "./run.ts";

const SA_USER = `sa-token-for-fundament-system-fundament-${ids.user}`;
const SA_PLUGIN = "sa-token-for-plugin-cert-manager-plugin-cert-manager";
const kubePath = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let world: FakeWorld;
let server: TestServer;
let grpcAddress: string;
let adminAddress: string;

beforeAll(async () => {
  world = new FakeWorld();
  server = await startTestServer(world, testConfig({ admin: { explain: true } }));
  grpcAddress = `127.0.0.1:${server.server.grpcPort}`;
  adminAddress = `127.0.0.1:${server.server.adminPort}`;
});
afterAll(async () => server.stop());
beforeEach(() => {
  Object.assign(world, new FakeWorld());
});

describe("portcullis check --server (the ext_authz gRPC port)", () => {
  it("prints an allow with the injected credential redacted, and exits 0", async () => {
    const token = await userToken();
    const res = await cli(["check", "--server", grpcAddress, "--policy", "kube-api-proxy", "--path", kubePath, "--token", token, "-H", "Cookie: theme=dark"]);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(0);
    expect(res.stdout).toBe(
      [
        "decision: allow",
        "status:   200",
        "set on the upstream request:",
        "  authorization: Bearer <redacted>",
        `  x-fundament-kube-api-cluster: kube-api-${ids.cluster}`,
        "removed from the upstream request:",
        "  cookie",
        "",
      ].join("\n"),
    );
    expect(res.stdout).not.toContain(SA_USER);
    expect(res.stdout).not.toContain(token);
  });

  it("prints a denial's status, reason and response, and exits 1", async () => {
    const res = await cli(["check", "--server", grpcAddress, "--policy", "kube-api-proxy", "--path", kubePath, "--json"]);
    expect(res.code).toBe(1);
    const outcome = JSON.parse(res.stdout);
    expect(outcome).toMatchObject({
      decision: "deny",
      status: 401,
      reason: "missing-token",
      headers: { "x-portcullis-reason": "missing-token", "www-authenticate": "Bearer" },
    });
    expect(JSON.parse(outcome.body)).toMatchObject({ kind: "Status", code: 401 });
  });

  it("sends the request exactly as Envoy would: method, lower-cased headers, x-request-id, policy", async () => {
    const res = await cli([
      "check", "--server", grpcAddress, "--policy", "kube-api-proxy", "--method", "delete",
      "--path", `/clusters/${ids.cluster}/api/v1/namespaces/team-a/secrets/db`,
      "--token", await pluginToken(), "-H", "X-Request-Id: from-the-cli", "--json",
    ]);
    expect(res.code).toBe(0);
    expect(world.sarRequests).toEqual([
      { kind: "resource", verb: "delete", group: "", version: "v1", resource: "secrets", subresource: "", namespace: "team-a", name: "db" },
    ]);
    await new Promise((r) => setTimeout(r, 50));
    expect(server.logs.filter((l) => l["audit"] === "plugin_request").at(-1)).toMatchObject({ request_id: "from-the-cli", decision: "allowed" });
  });

  it("shows the bearer subprotocol dropped and the credential in Authorization, redacted", async () => {
    const token = await pluginToken();
    const res = await cli([
      "check", "--server", grpcAddress, "--policy", "kube-api-proxy",
      "--path", `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods/web/exec?command=sh`,
      "-H", "Upgrade: websocket", "-H", "Connection: Upgrade",
      "-H", `Sec-WebSocket-Protocol: v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.${Buffer.from(token).toString("base64url")}`,
      "--json",
    ]);
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).mutations.set).toEqual({
      authorization: "Bearer <redacted>",
      "sec-websocket-protocol": "v5.channel.k8s.io",
      "x-fundament-kube-api-cluster": `kube-api-${ids.cluster}`,
      // Envoy ends the exec stream at the token's expiry, 15 minutes less the CLI's start (issue 54).
      "x-envoy-upstream-stream-duration-ms": expect.stringMatching(/^(8[5-9][0-9]|900)000$/),
    });
    expect(res.stdout).not.toContain(Buffer.from(SA_PLUGIN).toString("base64url"));
  });

  it.each([
    { name: "no --path", args: ["--server", "127.0.0.1:1", "--policy", "kube-api-proxy"], message: "--path /… is required" },
    { name: "no --policy", args: ["--server", "127.0.0.1:1", "--path", "/x"], message: "--policy is required" },
    { name: "no --server", args: ["--policy", "p", "--path", "/x"], message: "--server HOST:PORT is required" },
    { name: "--explain without --admin", args: ["--explain", "--policy", "p", "--path", "/x"], message: "--explain needs --admin HOST:PORT" },
    { name: "malformed -H", args: ["--server", "127.0.0.1:1", "--policy", "p", "--path", "/x", "-H", "nocolon"], message: "-H expects 'name: value'" },
    { name: "unknown flag", args: ["--server", "127.0.0.1:1", "--polcy", "p"], message: "Unknown option '--polcy'" },
  ])("usage error: $name → exit 2", async ({ args, message }) => {
    const res = await cli(["check", ...args]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain(message);
    expect(res.stderr).toContain("usage:");
  });

  it("shows the timeoutSeconds a PluginToken watch gets (issue 54)", async () => {
    const res = await cli(["check", "--server", grpcAddress, "--policy", "kube-api-proxy", "--path", `${kubePath}?watch=1`, "--token", await pluginToken()]);
    expect(res.code).toBe(0);
    expect(res.stdout).toContain(["query parameters set:", "  timeoutSeconds: 60", ""].join("\n"));
  });

  it("exits 2 when the server cannot be reached", async () => {
    const res = await cli(["check", "--server", "127.0.0.1:1", "--policy", "kube-api-proxy", "--path", kubePath]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/^portcullis check: /);
  });
});

describe("portcullis check --explain (the admin port)", () => {
  it("prints the gates a PluginToken request passed, in the seed's order", async () => {
    const res = await cli([
      "check", "--explain", "--admin", adminAddress, "--policy", "kube-api-proxy",
      "--path", `/clusters/${ids.cluster}/apis/cert-manager.io/v1/namespaces/team-a/certificates`, "--token", await pluginToken(),
    ]);
    expect(res.code).toBe(0);
    expect(res.stdout).toContain("authorization: Bearer <redacted>");
    expect(res.stdout).toContain(
      [
        "gates:",
        "  1. gateway-path: ok",
        "  2. token: plugin token from bearer",
        "  3. revocation: pass",
        "  4. no-impersonation: pass",
        "  5. cluster-binding: pass",
        "  6. can_view: pass",
        "  7. cluster-known: pass",
        "  8. kube-path: ok",
        "  9. user-sar: pass",
        "  10. installation: usable",
        "  11. revocation-pinned: pass",
        "  12. plugin-serviceaccount-token: issued",
        "",
      ].join("\n"),
    );
    expect(res.stdout).not.toContain(SA_PLUGIN);
  });

  it("its audit line says explain: true, with a request id no Envoy request can have", async () => {
    const res = await cli([
      "check", "--explain", "--admin", adminAddress, "--policy", "kube-api-proxy", "--json",
      "--path", kubePath, "--token", await pluginToken(), "-H", "X-Request-Id: 3f1c0a52-0000-4000-8000-000000000001",
    ]);
    expect(res.code).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    const audit = server.logs.filter((l) => l["audit"] === "plugin_request").at(-1);
    expect(audit).toMatchObject({ explain: true, request_id: "explain:3f1c0a52-0000-4000-8000-000000000001", decision: "allowed" });
  });

  it("a real Check's audit line is not marked", async () => {
    await cli(["check", "--server", grpcAddress, "--policy", "kube-api-proxy", "--path", kubePath, "--token", await pluginToken(), "-H", "X-Request-Id: real-1"]);
    await new Promise((r) => setTimeout(r, 50));
    const audit = server.logs.filter((l) => l["audit"] === "plugin_request").at(-1);
    expect(audit).toMatchObject({ request_id: "real-1" });
    expect(audit).not.toHaveProperty("explain");
  });

  it("shows where a denial stopped", async () => {
    world.sarAnswer = () => false;
    const res = await cli([
      "check", "--explain", "--admin", adminAddress, "--policy", "kube-api-proxy", "--json",
      "--path", `/clusters/${ids.cluster}/api/v1/namespaces/team-a/secrets`, "--token", await pluginToken(),
    ]);
    expect(res.code).toBe(1);
    const outcome = JSON.parse(res.stdout);
    expect(outcome).toMatchObject({ decision: "deny", status: 403, reason: "user-sar-denied" });
    expect(outcome.trace.at(-1)).toEqual({ gate: "user-sar", outcome: "fail" });
  });
});

describe("/explain off (the default)", () => {
  it("is not found, and check --explain says how to turn it on", async () => {
    const off = await startTestServer(new FakeWorld());
    try {
      const admin = `127.0.0.1:${off.server.adminPort}`;
      const request = envoyCheckRequest({ path: kubePath, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" });
      const res = await fetch(`http://${admin}/explain`, { method: "POST", body: JSON.stringify(request) });
      expect(res.status).toBe(404);
      const cliRes = await cli(["check", "--explain", "--admin", admin, "--policy", "kube-api-proxy", "--path", kubePath, "--token", await pluginToken()]);
      expect(cliRes.code).toBe(2);
      expect(cliRes.stderr).toContain("set admin.explain: true");
      expect(off.logs.filter((l) => l["audit"] === "plugin_request")).toEqual([]);
    } finally {
      await off.stop();
    }
  });
});

describe("/explain's peers", () => {
  it.each([
    { address: "127.0.0.1", loopback: true },
    { address: "127.8.9.10", loopback: true },
    { address: "::1", loopback: true },
    { address: "::ffff:127.0.0.1", loopback: true },
    { address: "10.0.0.5", loopback: false },
    { address: "::ffff:10.0.0.5", loopback: false },
    { address: "192.168.1.127", loopback: false },
    { address: "fe80::1", loopback: false },
    { address: "::", loopback: false },
    { address: "0.0.0.0", loopback: false },
    { address: "127.0.0.1.evil", loopback: false },
    { address: "", loopback: false },
    { address: undefined, loopback: false },
  ])("$address → loopback $loopback", ({ address, loopback }) => {
    expect(isLoopbackPeer(address)).toBe(loopback);
  });

  it("a peer that is not on loopback gets 403 and no decision is made, even with the port bound wider", async () => {
    // The admin server's own request handler, with a request whose socket is a remote peer's
    // (this machine has loopback only).
    const body = JSON.stringify(envoyCheckRequest({ path: kubePath, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" }));
    const { createAdminServer } = await import("../../src/server/admin.ts");
    let explained = 0;
    const handler = createAdminServer({ readiness: () => ({ ready: true, checks: [] }), metrics: undefined as never, explain: async () => ((explained++, { decision: "allow" }) as never) });
    const req = Object.assign(Readable.from([Buffer.from(body)]), {
      method: "POST",
      url: "/explain",
      headers: { "content-type": "application/json" },
      socket: { remoteAddress: "10.1.2.3" },
    }) as unknown as IncomingMessage;
    const res = new ServerResponse(req);
    const ended = new Promise<void>((r) => res.once("finish", () => r()));
    handler.emit("request", req, res);
    await Promise.race([ended, new Promise((r) => setTimeout(r, 200))]);
    expect(res.statusCode).toBe(403);
    expect(explained).toBe(0);

    const local = Object.assign(Readable.from([Buffer.from(body)]), { method: "POST", url: "/explain", headers: {}, socket: { remoteAddress: "127.0.0.1" } }) as unknown as IncomingMessage;
    const localRes = new ServerResponse(local);
    const localEnded = new Promise<void>((r) => localRes.once("finish", () => r()));
    handler.emit("request", local, localRes);
    await Promise.race([localEnded, new Promise((r) => setTimeout(r, 500))]);
    expect(explained).toBe(1);
  });
});

describe("POST /explain", () => {
  const explain = (body: string, method = "POST") => fetch(`http://${adminAddress}/explain`, { method, body: method === "GET" ? null : body });

  it("answers a CheckRequest with the outcome and trace, credentials redacted", async () => {
    const request = envoyCheckRequest({
      path: `/installations/${ids.installation}/runtime/api/status`,
      headers: { authorization: `Bearer ${await pluginToken()}` },
      policy: "plugin-proxy",
    });
    const res = await explain(JSON.stringify(request));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { trace: Array<{ gate: string }> };
    expect(body).toMatchObject({
      decision: "allow",
      status: 200,
      mutations: {
        set: { "x-fundament-cluster-id": ids.cluster, "x-fundament-upstream-namespace": "plugin-cert-manager", "x-fundament-upstream-service": "plugin-cert-manager" },
        remove: ["authorization"],
      },
    });
    expect(body.trace.map((s) => s.gate)).toEqual([
      "plugin-route",
      "token",
      "revocation",
      "no-impersonation",
      "installation-binding",
      "can_view",
      "cluster-known",
      "installation",
      "revocation-pinned",
    ]);
  });

  it("records nothing for checks that are not being explained", async () => {
    const before = await server.check({ path: `/plugins/sdk/1.0.0/sdk.js`, policy: "plugin-assets" });
    expect(before).toMatchObject({ allowed: true });
    const res = await explain(JSON.stringify(envoyCheckRequest({ method: "POST", path: "/plugins/sdk/1.0.0/sdk.js", policy: "plugin-assets" })));
    expect(await res.json()).toMatchObject({ decision: "deny", status: 405, reason: "method-not-allowed", trace: [{ gate: "asset-path", outcome: "pass" }, { gate: "read-only", outcome: "fail" }] });
  });

  it.each([
    { name: "not JSON", body: "{", status: 400 },
    { name: "not an object", body: "[]", status: 400 },
  ])("rejects $name with $status", async ({ body, status }) => {
    expect((await explain(body)).status).toBe(status);
  });

  it("accepts only POST", async () => {
    const res = await explain("", "GET");
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
  });

  it("denies a CheckRequest without HTTP attributes, like Check", async () => {
    const res = await explain(JSON.stringify({ attributes: { context_extensions: { policy: "kube-api-proxy" } } }));
    expect(await res.json()).toMatchObject({ decision: "deny", status: 400, reason: "bad-request", trace: [] });
  });
});
