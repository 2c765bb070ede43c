/**
 * gRPC server metrics without touching the handlers: `instrumented(definition, handlers)` wraps each
 * unary handler's callback to publish, once per call, the method, the status code it answered with
 * and the time since the call arrived (portcullis_grpc_server_handled_total and
 * portcullis_grpc_server_handling_seconds in prometheus.ts). Streaming methods (health Watch) are
 * passed through unchanged: a stream lives as long as its client, so its duration says nothing.
 */
import { channel } from "node:diagnostics_channel";
import * as grpc from "@grpc/grpc-js";

/** A unary gRPC call answered. */
export interface GrpcCallHandled {
  /** `package.Service/Method`: a closed set, the services the servers register. */
  readonly method: string;
  /** The gRPC status code's name: OK, INTERNAL, … */
  readonly code: string;
  readonly seconds: number;
}

export const grpcCallsHandled = channel("portcullis:grpc-handled");

const CODE_NAMES: ReadonlyMap<number, string> = new Map(
  Object.entries(grpc.status)
    .filter((entry): entry is [string, number] => typeof entry[1] === "number")
    .map(([name, code]) => [code, name]),
);

/** The status code a unary callback was given: OK for an answer, the error's code (UNKNOWN when it has none) otherwise. */
export function codeName(err: grpc.ServiceError | Partial<grpc.StatusObject> | null | undefined): string {
  if (err === null || err === undefined) return "OK";
  return CODE_NAMES.get(err.code ?? grpc.status.UNKNOWN) ?? "UNKNOWN";
}

export function instrumented(definition: grpc.ServiceDefinition, handlers: grpc.UntypedServiceImplementation): grpc.UntypedServiceImplementation {
  const wrapped: grpc.UntypedServiceImplementation = { ...handlers };
  for (const [name, method] of Object.entries(definition)) {
    const handler = handlers[name];
    if (handler === undefined || method.requestStream || method.responseStream) continue;
    const label = method.path.replace(/^\//, "");
    const unary = handler as grpc.handleUnaryCall<unknown, unknown>;
    wrapped[name] = ((call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      const started = performance.now();
      unary(call, (err, value, trailer, flags) => {
        if (grpcCallsHandled.hasSubscribers) {
          grpcCallsHandled.publish({ method: label, code: codeName(err), seconds: (performance.now() - started) / 1000 } satisfies GrpcCallHandled);
        }
        callback(err, value, trailer, flags);
      });
    }) as grpc.handleUnaryCall<unknown, unknown>;
  }
  return wrapped;
}

/** Every unary method of every service later added to `server` is instrumented. */
export function withCallMetrics(server: grpc.Server): grpc.Server {
  const addService = server.addService.bind(server);
  server.addService = (definition, handlers) => addService(definition, instrumented(definition, handlers));
  return server;
}
