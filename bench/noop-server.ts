/**
 * The ceiling of this stack: the plain ext_authz server on @grpc/grpc-js, answering every Check with
 * OK. It loads the same vendored protos through @grpc/proto-loader (src/envoy/protos.ts
 * authorizationService), so it pays the same gRPC, HTTP/2 and protobuf decoding as portcullis, plus
 * proto-loader's copy of each message into a plain object and back, which portcullis's server skips
 * (checkService): whatever portcullis costs above this is its own work, less that copy.
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
