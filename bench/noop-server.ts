/**
 * The ceiling of this stack: an ext_authz server on @grpc/grpc-js that answers every Check with OK.
 * It loads the same vendored protos with the same proto-loader options as portcullis
 * (src/envoy/protos.ts), so it pays the same CheckRequest decoding and CheckResponse encoding:
 * whatever portcullis costs above this is its own work.
 *
 *   node bench/noop-server.ts --ready-file FILE [--address 127.0.0.1:0]
 */
import * as grpc from "@grpc/grpc-js";
import { authorizationService } from "../src/envoy/protos.ts";
import { announceReady, serverArgs } from "./servers/common.ts";

const OK = { status: { code: 0, message: "" }, ok_response: { headers: [], headers_to_remove: [] } };

export async function startNoopServer(address: string): Promise<{ server: grpc.Server; port: number }> {
  const server = new grpc.Server();
  server.addService(authorizationService(), {
    Check(_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) {
      callback(null, OK);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, port };
}

if (import.meta.main) {
  const args = serverArgs();
  const { server, port } = await startNoopServer(args.address);
  announceReady(args.readyFile, { port });
  process.on("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
}
