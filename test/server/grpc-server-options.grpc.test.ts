/**
 * portcullis serves no channelz service, so its gRPC servers run with channelz off: with it on,
 * grpc-js keeps records of every call that only that service could read. grpc-js's own channelz
 * table is the witness: a server with channelz on is in it from its construction.
 */
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeWorld } from "../support/fakes.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

/** The ids of the servers in grpc-js's channelz table (this process's). */
function channelzServerIds(): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const call = { request: { start_server_id: "0", max_results: "1000" } } as never;
    grpc.getChannelzHandlers().GetServers(call, (err, answer) => (err ? reject(err) : resolve((answer?.server ?? []).map((s) => String(s.ref?.server_id)))));
  });
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer(new FakeWorld());
});
afterAll(async () => server?.stop());

describe("channelz", () => {
  it("is off on portcullis's servers: none is in the table after a check, while a grpc-js server with the default is", async () => {
    const response = await server.checkRaw(envoyCheckRequest({ path: "/clusters/not-a-uuid/api/v1/pods", policy: "kube-api-proxy" }));
    expect(response.status).toBeDefined();
    expect(await channelzServerIds()).toEqual([]);

    const withDefaults = new grpc.Server();
    try {
      expect(await channelzServerIds()).toHaveLength(1);
    } finally {
      withDefaults.forceShutdown();
    }
  });
});
