/**
 * Credentials of the ext_authz and internal gRPC listeners: plaintext h2c when `listen.tls` is
 * absent, TLS (and mTLS with a client CA) when it is set.
 *
 * Reload without restart is grpc-js's own: a FileWatcherCertificateProvider re-reads the files every
 * `reloadIntervalMs` and the server swaps the secure context of its listeners (`setSecureContext`),
 * so new handshakes use the new certificate while open connections keep theirs. Between a write of
 * the certificate and of its key (a non-atomic rotation) grpc-js refuses new connections for up to
 * one interval: a failed handshake, never a plaintext or unverified one. Kubernetes Secret volumes
 * swap both files at once.
 *
 * The files are read and checked once at start so a wrong path or a key that does not match its
 * certificate stops the process naming the field, instead of a listener that drops every connection.
 */
import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "pino";
import type { Config } from "../config/schema.ts";

type ListenTls = NonNullable<Config["listen"]["tls"]>;

export class TlsConfigError extends Error {
  readonly code = "tls-config";
  readonly field: string;
  constructor(field: string, message: string, options?: ErrorOptions) {
    super(`${field}: ${message}`, options);
    this.field = field;
  }
}

export interface ListenerCredentials {
  readonly credentials: grpc.ServerCredentials;
  /** Stops watching the certificate files (the listeners' own watch ends when they close). */
  stop(): void;
}

/**
 * Resolves once the certificate files have been read: grpc-js drops connections until its provider
 * has delivered them, and binding after the first read leaves no such window at start.
 */
export async function listenerCredentials(tls: ListenTls | undefined, logger: Logger): Promise<ListenerCredentials> {
  if (tls === undefined) return { credentials: grpc.ServerCredentials.createInsecure(), stop: () => {} };
  checkTlsFiles(tls);
  const provider = new grpc.experimental.FileWatcherCertificateProvider({
    certificateFile: tls.certFile,
    privateKeyFile: tls.keyFile,
    ...(tls.clientCaFile === undefined ? {} : { caCertificateFile: tls.clientCaFile }),
    refreshIntervalMs: tls.reloadIntervalMs,
  });
  // grpc-js's declaration names the parameters the other way round; its code takes the identity
  // provider first and the (optional) CA provider second.
  const credentials = grpc.experimental.createCertificateProviderServerCredentials(
    provider,
    tls.clientCaFile === undefined ? null : provider,
    tls.requireClientCert,
  );
  const watch = watchCertificate(logger);
  provider.addIdentityCertificateListener(watch.listener);
  const stop = () => provider.removeIdentityCertificateListener(watch.listener);
  if (!(await watch.firstRead)) {
    stop();
    throw new TlsConfigError("listen.tls", "the certificate files could not be read by the TLS provider");
  }
  return { credentials, stop };
}

/** Reads and parses every file: unreadable, not PEM, or a key that is not the certificate's → TlsConfigError. */
export function checkTlsFiles(tls: ListenTls): void {
  const certificate = parsePem(tls.certFile, "listen.tls.certFile", "a PEM certificate", (pem) => new X509Certificate(pem));
  const key = parsePem(tls.keyFile, "listen.tls.keyFile", "a PEM private key", (pem) => createPrivateKey(pem));
  if (!certificate.checkPrivateKey(key)) throw new TlsConfigError("listen.tls.keyFile", "expected the private key of the certificate in listen.tls.certFile");
  if (tls.clientCaFile !== undefined) parsePem(tls.clientCaFile, "listen.tls.clientCaFile", "a PEM CA certificate bundle", (pem) => new X509Certificate(pem));
}

function parsePem<T>(path: string, field: string, expected: string, parse: (pem: Buffer) => T): T {
  const pem = readTlsFile(path, field);
  try {
    return parse(pem);
  } catch (err) {
    throw new TlsConfigError(field, `expected ${expected} in ${path}`, { cause: err });
  }
}

function readTlsFile(path: string, field: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new TlsConfigError(field, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`, { cause: err });
  }
}

/**
 * Logs each change of what the provider read (it reports every poll): a new usable pair, files that
 * cannot be read, or a pair grpc-js will refuse (the key is not the certificate's, e.g. between the
 * two writes of a rotation). In the last two cases new connections are refused until it is fixed.
 */
function watchCertificate(logger: Logger): { listener: grpc.experimental.IdentityCertificateUpdateListener; firstRead: Promise<boolean> } {
  let current: Buffer | undefined;
  let first = true;
  const { promise: firstRead, resolve: settleFirstRead } = Promise.withResolvers<boolean>();
  const listener = (update: grpc.experimental.IdentityCertificateUpdate | null) => {
    const read = update === null ? Buffer.alloc(0) : Buffer.concat([update.certificate, update.privateKey]);
    if (current !== undefined && read.equals(current)) return;
    current = read;
    const state = update === null ? "unreadable" : pairState(update);
    if (first) {
      first = false;
      settleFirstRead(state === "usable");
      return;
    }
    if (state === "usable") logger.info({ setting: "listen.tls" }, "TLS certificate reloaded: new connections use it");
    else if (state === "unreadable") logger.error({ setting: "listen.tls" }, "TLS certificate files unreadable: new connections are refused until they are");
    else logger.error({ setting: "listen.tls" }, "TLS key is not the certificate's: new connections are refused until it is");
  };
  return { listener, firstRead };
}

function pairState(update: grpc.experimental.IdentityCertificateUpdate): "usable" | "mismatched" {
  try {
    return new X509Certificate(update.certificate).checkPrivateKey(createPrivateKey(update.privateKey)) ? "usable" : "mismatched";
  } catch {
    return "mismatched";
  }
}
