/**
 * `portcullis check` against a running server (fakes behind real gRPC and a real admin port), and
 * the admin port's `POST /explain` it uses: decisions, statuses, redaction, the gates' trace.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
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
  server = await startTestServer(world);
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
        "  3. no-impersonation: pass",
        "  4. cluster-binding: pass",
        "  5. can_view: pass",
        "  6. cluster-known: pass",
        "  7. kube-path: ok",
        "  8. user-sar: pass",
        "  9. installation: usable",
        "  10. plugin-serviceaccount-token: issued",
        "",
      ].join("\n"),
    );
    expect(res.stdout).not.toContain(SA_PLUGIN);
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
    expect(body.trace.map((s) => s.gate)).toEqual(["plugin-route", "token", "installation-binding", "can_view", "cluster-known", "installation"]);
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
