/**
 * The same-bytes no-op (bench/noop-server.ts --scenario same-bytes, and bench/hot-path.ts's
 * noop-same-bytes) answers the bytes of scenario 3's allow: the CheckResponse portcullis's real check
 * answers a warm PluginToken request with, byte for byte — the ~1 KB ServiceAccount token and the same
 * header mutations. Runs no benchmark: one check through the real policies over the bench's warm
 * ports, and one call to the no-op server.
 */
import * as grpc from "@grpc/grpc-js";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { startNoopServer } from "../../bench/noop-server.ts";
import { encodedScenario3Allow } from "../../bench/scenario3-allow.ts";
import { warmPorts } from "../../bench/warm-ports.ts";
import { BENCH_TOKEN_LIFETIMES, benchWorld, pluginTokenRequests } from "../../bench/workload.ts";
import { createChecker } from "../../src/authz/check.ts";
import { configSchema } from "../../src/config/schema.ts";
import { checkService } from "../../src/envoy/protos.ts";
import { policiesFor } from "../../src/server/policies.ts";
import { SECRET } from "../support/tokens.ts";

const method = checkService()["Check"]!;

/** Scenario 3's allow as the server encodes it: one warm PluginToken check, as bench/hot-path.ts makes it. */
async function realScenario3Allow(): Promise<Buffer> {
  const world = benchWorld(250);
  const [request] = await pluginTokenRequests(world, 1);
  // ghz's JSON Timestamp, which the protobuf encoder does not take (bench/hot-path.ts drops it too).
  delete ((request!["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
  process.env["PORTCULLIS_BENCH_SECRET"] = SECRET;
  const config = configSchema.parse({
    tokens: { secrets: [{ env: "PORTCULLIS_BENCH_SECRET" }], maxLifetimeSeconds: BENCH_TOKEN_LIFETIMES },
    openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01HVMMBCMGZNT3SED4Z17ECXCA" },
    clusters: world.clusterIds.map((id) => ({ id, kubeconfig: "/nonexistent" })),
  });
  const audit = { pluginRequest: () => {}, pluginTokenReplay: () => {} };
  const check = createChecker({ policies: policiesFor(config, warmPorts(world)), audit, timeoutMs: 800, retryAfterSeconds: 1, logger: pino({ enabled: false }) });
  const response = await check(method.requestDeserialize(method.requestSerialize(request)));
  expect(response.status.code).toBe(0);
  expect(response.ok_response?.headers.map((h) => h.header.key)).toContain("authorization");
  return method.responseSerialize(response);
}

const servers: grpc.Server[] = [];
afterAll(() => {
  for (const s of servers) s.forceShutdown();
});

describe("the same-bytes no-op", () => {
  it("answers exactly the bytes of scenario 3's allow (hot-path's noop-same-bytes answers the same buffer)", async () => {
    const real = await realScenario3Allow();
    expect(real.length).toBeGreaterThan(1024);
    expect(encodedScenario3Allow().length).toBe(real.length);
    expect(encodedScenario3Allow().equals(real)).toBe(true);
  });

  it("sends those bytes on the wire, for a CheckRequest decoded as portcullis's server decodes it", async () => {
    const real = await realScenario3Allow();
    const { server, port } = await startNoopServer("127.0.0.1:0", "same-bytes");
    servers.push(server);
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const [request] = await pluginTokenRequests(benchWorld(1), 1);
    delete ((request!["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
    const answered = await new Promise<Buffer>((resolve, reject) =>
      client.makeUnaryRequest(
        method.path,
        (r: object) => method.requestSerialize(r),
        (bytes: Buffer) => bytes,
        request!,
        (err, bytes) => (err ? reject(err) : resolve(bytes!)),
      ),
    );
    client.close();
    expect(answered.length).toBe(real.length);
    expect(answered.equals(real)).toBe(true);
  });

  it("leaves the plain no-op answering an empty OK", async () => {
    const { server, port } = await startNoopServer("127.0.0.1:0");
    servers.push(server);
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const [request] = await pluginTokenRequests(benchWorld(1), 1);
    delete ((request!["attributes"] as Record<string, Record<string, unknown>>)["request"]!)["time"];
    const answered = await new Promise<Buffer>((resolve, reject) =>
      client.makeUnaryRequest(method.path, (r: object) => method.requestSerialize(r), (bytes: Buffer) => bytes, request!, (err, bytes) => (err ? reject(err) : resolve(bytes!))),
    );
    client.close();
    expect(method.responseDeserialize(answered)).toMatchObject({ status: { code: 0 } });
    expect(answered.length).toBeLessThan(64);
  });
});
