import type * as grpc from "@grpc/grpc-js";

/**
 * What every gRPC server of portcullis runs with. channelz off: portcullis serves no channelz
 * service, and with it on grpc-js keeps for every call what only that service could read (a
 * timestamp per call and per message, four closures per call).
 */
export const GRPC_SERVER_OPTIONS = { "grpc.enable_channelz": 0 } as const satisfies grpc.ServerOptions;
