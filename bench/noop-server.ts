/**
 * The ceilings of this stack: plain ext_authz servers on @grpc/grpc-js that decide nothing.
 *  - the no-op answers every Check with an empty OK. It loads the same vendored protos through
 *    @grpc/proto-loader (src/envoy/protos.ts authorizationService), so it pays the same gRPC, HTTP/2
 *    and protobuf decoding as portcullis, plus proto-loader's copy of each message into a plain
 *    object and back, which portcullis's server skips (checkService);
 *  - the same-bytes no-op (`--scenario same-bytes`) decodes each CheckRequest as portcullis's server
 *    does (checkService) and answers scenario 3's allow, encoded once at start
 *    (bench/scenario3-allow.ts): the ~1 KB ServiceAccount token and the header mutations are the job's
 *    own bytes, which no server doing this job avoids. What portcullis costs above it is its own work.
 * Both run with the options of portcullis's servers (src/server/grpc-server-options.ts: channelz off).
 *
 *   node bench/noop-server.ts --ready-file FILE [--address 127.0.0.1:0] [--scenario same-bytes]
 */
import * as grpc from "@grpc/grpc-js";
import { authorizationService, checkService } from "../src/envoy/protos.ts";
import { GRPC_SERVER_OPTIONS } from "../src/server/grpc-server-options.ts";
import { encodedScenario3Allow } from "./scenario3-allow.ts";
import { announceReady, profileOnSignal, serverArgs } from "./servers/common.ts";

const OK = { status: { code: 0, message: "" }, ok_response: { headers: [], headers_to_remove: [] } };

/** The Check service as portcullis's server decodes it, answering bytes already encoded. */
function preEncodedCheckService(): grpc.ServiceDefinition {
  const check = checkService()["Check"]!;
  return { Check: { ...check, responseSerialize: (bytes: Buffer) => bytes } };
}

export async function startNoopServer(address: string, answer: "ok" | "same-bytes" = "ok"): Promise<{ server: grpc.Server; port: number }> {
  const server = new grpc.Server(GRPC_SERVER_OPTIONS);
  const response = answer === "ok" ? OK : encodedScenario3Allow();
  server.addService(answer === "ok" ? authorizationService() : preEncodedCheckService(), {
    Check(_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) {
      callback(null, response);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, port };
}

if (import.meta.main) {
  const args = serverArgs();
  if (args.scenario !== "" && args.scenario !== "same-bytes") throw new Error(`--scenario: ${args.scenario}; the no-op knows same-bytes only`);
  const { server, port } = await startNoopServer(args.address, args.scenario === "same-bytes" ? "same-bytes" : "ok");
  const profiler = profileOnSignal(args.profileFile);
  announceReady(args.readyFile, { port });
  process.on("SIGTERM", () => void profiler.stop().then(() => server.tryShutdown(() => process.exit(0))));
}
