/** A grpc.health.v1 client for the hardening suites: Check, and a Watch that records every status it is sent. */
import * as grpc from "@grpc/grpc-js";
import { loadAuthorizationPackage } from "../../src/envoy/protos.ts";

type HealthClient = grpc.Client & {
  Check(req: { service: string }, cb: (err: grpc.ServiceError | null, res?: { status: string }) => void): void;
  Watch(req: { service: string }): grpc.ClientReadableStream<{ status: string }>;
};

function healthClient(address: string): HealthClient {
  const pkg = grpc.loadPackageDefinition(loadAuthorizationPackage()) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  return new pkg.grpc.health.v1.Health(address, grpc.credentials.createInsecure()) as unknown as HealthClient;
}

/** The whole server's status ("" service), or the gRPC error code when the call itself fails. */
export async function healthStatus(address: string): Promise<string> {
  const client = healthClient(address);
  try {
    return await new Promise((resolveStatus) => {
      client.Check({ service: "" }, (err, res) => resolveStatus(err ? `error ${err.code}` : (res?.status ?? "none")));
    });
  } finally {
    client.close();
  }
}

export interface HealthWatch {
  /** Every status received, in order. */
  readonly statuses: string[];
  close(): void;
}

export function watchHealth(address: string): HealthWatch {
  const client = healthClient(address);
  const statuses: string[] = [];
  const stream = client.Watch({ service: "" });
  stream.on("data", (m: { status: string }) => statuses.push(m.status));
  // The server ends the stream when it stops; that is expected here, not a failure.
  stream.on("error", () => {});
  return {
    statuses,
    close() {
      stream.cancel();
      client.close();
    },
  };
}
