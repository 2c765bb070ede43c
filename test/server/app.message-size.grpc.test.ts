/**
 * The ext_authz port refuses a CheckRequest over MAX_CHECK_MESSAGE_BYTES (1 MiB) unread, over real
 * gRPC: grpc-js answers RESOURCE_EXHAUSTED, which Envoy (failure_mode_allow false) turns into a
 * denial. No shipped Envoy config sends the body, and Envoy's default header limit is 60 KiB, so
 * nothing Envoy forwards by default comes near it; one just under is decided as usual.
 */
import { status as grpcStatus } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_CHECK_MESSAGE_BYTES } from "../../src/server/app.ts";
import { FakeWorld } from "../support/fakes.ts";
import { envoyCheckRequest } from "../support/envoy.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer(new FakeWorld());
});
afterAll(async () => server?.stop());

const padded = (bytes: number) => envoyCheckRequest({ path: "/clusters/not-a-uuid/api/v1/pods", headers: { "x-padding": "x".repeat(bytes) }, policy: "kube-api-proxy" });

describe("the ext_authz port's message size", () => {
  it("a CheckRequest just under 1 MiB is decided", async () => {
    const res = await server.checkRaw(padded(MAX_CHECK_MESSAGE_BYTES - 64 * 1024));
    expect(res.status).toBeDefined();
  });

  it("one over 1 MiB is refused RESOURCE_EXHAUSTED, unread", async () => {
    await expect(server.checkRaw(padded(MAX_CHECK_MESSAGE_BYTES + 1024))).rejects.toMatchObject({ code: grpcStatus.RESOURCE_EXHAUSTED });
    // The server goes on answering.
    expect((await server.checkRaw(padded(16))).status).toBeDefined();
  });
});
