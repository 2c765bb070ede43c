// Loads the vendored Envoy ext_authz and gRPC health protos (protos/envoy).
import { resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

/** Include root of the vendored protos: `import "envoy/..."` resolves from here. */
export const PROTO_ROOT = resolve(import.meta.dirname, "../../protos/envoy");

// Proto field names (keepCase) so messages look like Envoy's YAML/JSON and docs.
export const LOAD_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

let packageDefinition: protoLoader.PackageDefinition | undefined;

/** Package definition of the ext_authz Check service and gRPC health, loaded once. */
export function loadAuthorizationPackage(): protoLoader.PackageDefinition {
  packageDefinition ??= protoLoader.loadSync(
    ["envoy/service/auth/v3/external_auth.proto", "grpc/health/v1/health.proto"],
    LOAD_OPTIONS,
  );
  return packageDefinition;
}

function serviceConstructor(fullName: string): grpc.ServiceClientConstructor {
  let node: unknown = grpc.loadPackageDefinition(loadAuthorizationPackage());
  for (const part of fullName.split(".")) node = (node as grpc.GrpcObject)[part];
  if (typeof node !== "function") throw new Error(`service ${fullName} not found in loaded protos`);
  return node as grpc.ServiceClientConstructor;
}

/** `envoy.service.auth.v3.Authorization`, for `server.addService`. */
export function authorizationService(): grpc.ServiceDefinition {
  return serviceConstructor("envoy.service.auth.v3.Authorization").service;
}

/** `grpc.health.v1.Health`, for `server.addService`. */
export function healthService(): grpc.ServiceDefinition {
  return serviceConstructor("grpc.health.v1.Health").service;
}

export interface AuthorizationClient extends grpc.Client {
  /** Unary `Check` as a promise (CheckRequest in, CheckResponse out, proto field names). */
  check(req: object, options?: grpc.CallOptions): Promise<object>;
}

/** A client for the Authorization service at `address` (host:port); plaintext unless given credentials. */
export function authorizationClient(
  address: string,
  credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  options: grpc.ChannelOptions = {},
): AuthorizationClient {
  const Client = serviceConstructor("envoy.service.auth.v3.Authorization");
  const client = new Client(address, credentials, options);
  const call = client["Check"] as (
    req: object,
    options: grpc.CallOptions,
    callback: (err: grpc.ServiceError | null, res?: object) => void,
  ) => grpc.ClientUnaryCall;
  // Shadows the generated callback-style `check` alias with the promise form.
  return Object.assign(client, {
    check: (req: object, options: grpc.CallOptions = {}) =>
      new Promise<object>((resolvePromise, reject) => {
        call.call(client, req, options, (err, res) => (err ? reject(err) : resolvePromise(res ?? {})));
      }),
  });
}
