// Loads the vendored Envoy ext_authz and gRPC health protos (protos/envoy).
import { join, resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";
// Also registers descriptor.proto (imported by the validate/udpa annotations) with protobufjs's
// bundled well-known types, which externalAuthRoot() relies on.
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

/** Include root of the vendored protos: `import "envoy/..."` resolves from here. */
export const PROTO_ROOT = resolve(import.meta.dirname, "../../protos/envoy");

const EXTERNAL_AUTH_PROTO = "envoy/service/auth/v3/external_auth.proto";
const HEALTH_PROTO = "grpc/health/v1/health.proto";

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

/** Package definition of the ext_authz Check service and gRPC health, loaded once: for clients and the bench's no-op. */
export function loadAuthorizationPackage(): protoLoader.PackageDefinition {
  packageDefinition ??= protoLoader.loadSync([EXTERNAL_AUTH_PROTO, HEALTH_PROTO], LOAD_OPTIONS);
  return packageDefinition;
}

function serviceConstructor(definition: protoLoader.PackageDefinition, fullName: string): grpc.ServiceClientConstructor {
  let node: unknown = grpc.loadPackageDefinition(definition);
  for (const part of fullName.split(".")) node = (node as grpc.GrpcObject)[part];
  if (typeof node !== "function") throw new Error(`service ${fullName} not found in loaded protos`);
  return node as grpc.ServiceClientConstructor;
}

/**
 * `envoy.service.auth.v3.Authorization` as @grpc/proto-loader defines it: plain objects with enum
 * names both ways. What a client (and the bench's no-op server) uses; the server uses checkService().
 */
export function authorizationService(): grpc.ServiceDefinition {
  return serviceConstructor(loadAuthorizationPackage(), "envoy.service.auth.v3.Authorization").service;
}

let healthDefinition: grpc.ServiceDefinition | undefined;

/** `grpc.health.v1.Health`, for `server.addService`: its own small package, so the server never loads proto-loader's ext_authz tree. */
export function healthService(): grpc.ServiceDefinition {
  healthDefinition ??= serviceConstructor(protoLoader.loadSync(HEALTH_PROTO, LOAD_OPTIONS), "grpc.health.v1.Health").service;
  return healthDefinition;
}

/** One vendored proto file and its imports as protobufjs reflection (proto field names), resolved. */
export function protoRoot(file: string): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => join(PROTO_ROOT, target);
  root.loadSync(file, { keepCase: true }).resolveAll();
  return root;
}

let externalAuth: protobuf.Root | undefined;

/** The ext_authz protos as protobufjs reflection, loaded once. */
export function externalAuthRoot(): protobuf.Root {
  externalAuth ??= protoRoot(EXTERNAL_AUTH_PROTO);
  return externalAuth;
}

/**
 * A service of `root` as grpc-js defines it, without proto-loader's copy of every message into a
 * plain object and back: a request arrives as protobufjs decoded it (an absent message field reads
 * null, an absent string ""), and a response is encoded as the handler built it (enums as numbers).
 */
export function protobufService(root: protobuf.Root, name: string): grpc.ServiceDefinition {
  const service = root.lookupService(name);
  const definition: Record<string, grpc.MethodDefinition<object, object>> = {};
  for (const method of service.methodsArray) {
    const request = method.resolvedRequestType!;
    const response = method.resolvedResponseType!;
    definition[method.name] = {
      path: `/${service.fullName.slice(1)}/${method.name}`,
      requestStream: method.requestStream === true,
      responseStream: method.responseStream === true,
      requestSerialize: (message: object) => encoded(request, message),
      requestDeserialize: (bytes: Buffer) => request.decode(bytes),
      responseSerialize: (message: object) => encoded(response, message),
      responseDeserialize: (bytes: Buffer) => response.decode(bytes),
      originalName: method.name.charAt(0).toLowerCase() + method.name.slice(1),
    };
  }
  return definition;
}

let checkDefinition: grpc.ServiceDefinition | undefined;

/**
 * `envoy.service.auth.v3.Authorization` as the server runs it (protobufService): the same wire
 * format as authorizationService(), read as check-request.ts's CheckRequestMessage and written from
 * check-response.ts's CheckResponseMessage. test/envoy/check-service.test.ts holds both directions
 * to proto-loader's reading byte for byte.
 */
export function checkService(): grpc.ServiceDefinition {
  checkDefinition ??= protobufService(externalAuthRoot(), "envoy.service.auth.v3.Authorization");
  return checkDefinition;
}

/** protobufjs's writer under Node is its BufferWriter: finish() is already the Buffer grpc-js sends. */
function encoded(type: protobuf.Type, message: object): Buffer {
  return type.encode(message).finish() as Buffer;
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
  const Client = serviceConstructor(loadAuthorizationPackage(), "envoy.service.auth.v3.Authorization");
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
