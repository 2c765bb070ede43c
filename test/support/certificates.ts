/**
 * Throwaway PKI for TLS tests, made with the system `openssl`: a CA, and leaf certificates it
 * signs; and the clients that talk to a TLS listener with them.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type PeerCertificate } from "node:tls";
import * as grpc from "@grpc/grpc-js";
import type { Config } from "../../src/config/schema.ts";
import { type AuthorizationClient, authorizationClient } from "../../src/envoy/protos.ts";
import { testConfig } from "./server.ts";

/** The name Envoy sends as SNI and checks in the certificate (envoy.portcullis.tls.serverName's default). */
export const SERVER_NAME = "portcullis-grpc.fundament-system.svc.cluster.local";
/** A server certificate's names: the Service's, and loopback's for the tests. */
export const SERVER_SANS = [`DNS:${SERVER_NAME}`, "IP:127.0.0.1"];

/** testConfig() (loopback, any free port) with `listen.tls` set to `tls`, defaults filled in. */
export function withListenTls(tls: Record<string, unknown>): Config {
  const base = testConfig();
  return { ...base, listen: { ...base.listen, tls: testConfig({ listen: { tls } }).listen.tls } };
}

export type TlsOutcome = { accepted: true; certificate: PeerCertificate } | { accepted: false; error: string };

export interface Pem {
  readonly cert: Buffer;
  readonly key: Buffer;
}

export class TestPki {
  readonly dir = mkdtempSync(join(tmpdir(), "portcullis-pki-"));
  private serial = 1;

  /** A self-signed CA, `name`.crt and `name`.key in the directory. */
  ca(name: string): Pem {
    this.openssl([
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
      "-subj", `/CN=${name}`, "-keyout", this.path(`${name}.key`), "-out", this.path(`${name}.crt`),
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    return this.read(name);
  }

  /** A leaf `name` signed by the CA `ca`, for a server (`sans`) or a client. */
  leaf(name: string, ca: string, usage: { server: readonly string[] } | "client"): Pem {
    const ext = this.path(`${name}.ext`);
    writeFileSync(
      ext,
      usage === "client"
        ? "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n"
        : `extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\nsubjectAltName=${usage.server.join(",")}\n`,
    );
    this.openssl([
      "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", `/CN=${name}`,
      "-keyout", this.path(`${name}.key`), "-out", this.path(`${name}.csr`),
    ]);
    this.openssl([
      "x509", "-req", "-in", this.path(`${name}.csr`), "-CA", this.path(`${ca}.crt`), "-CAkey", this.path(`${ca}.key`),
      "-set_serial", String(this.serial++), "-days", "1", "-extfile", ext, "-out", this.path(`${name}.crt`),
    ]);
    return this.read(name);
  }

  /** A Check client over TLS to 127.0.0.1:`port`, trusting the CA `trust`, presenting the leaf `client` if given. */
  checkClient(port: number, trust: string, client?: string): AuthorizationClient {
    const credentials = grpc.credentials.createSsl(
      this.pem(`${trust}.crt`),
      client === undefined ? null : this.pem(`${client}.key`),
      client === undefined ? null : this.pem(`${client}.crt`),
    );
    return authorizationClient(`127.0.0.1:${port}`, credentials, { "grpc.ssl_target_name_override": SERVER_NAME, "grpc.default_authority": SERVER_NAME });
  }

  /**
   * A fresh TLS connection to `port` (h2, as gRPC negotiates): accepted once the server's HTTP/2
   * preface arrives, refused on a TLS alert. Under TLS 1.3 the client finishes its handshake before
   * the server has checked the client's certificate, so the handshake alone does not tell.
   */
  connect(port: number, trust: string, client?: string): Promise<TlsOutcome> {
    return new Promise((resolveOutcome) => {
      const socket = connect({
        host: "127.0.0.1",
        port,
        servername: SERVER_NAME,
        ca: this.pem(`${trust}.crt`),
        ALPNProtocols: ["h2"],
        ...(client === undefined ? {} : { cert: this.pem(`${client}.crt`), key: this.pem(`${client}.key`) }),
      });
      socket.once("data", () => {
        const certificate = socket.getPeerCertificate();
        socket.destroy();
        resolveOutcome({ accepted: true, certificate });
      });
      socket.once("error", (err: NodeJS.ErrnoException) => resolveOutcome({ accepted: false, error: err.code ?? err.message }));
      socket.once("close", () => resolveOutcome({ accepted: false, error: "closed" }));
    });
  }

  /** The certificate a fresh, accepted connection to `port` is shown. */
  async presented(port: number, trust: string, client?: string): Promise<PeerCertificate> {
    const outcome = await this.connect(port, trust, client);
    if (!outcome.accepted) throw new Error(`TLS connection refused: ${outcome.error}`);
    return outcome.certificate;
  }

  pem(file: string): Buffer {
    return readFileSync(this.path(file));
  }

  path(file: string): string {
    return join(this.dir, file);
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  private read(name: string): Pem {
    return { cert: readFileSync(this.path(`${name}.crt`)), key: readFileSync(this.path(`${name}.key`)) };
  }

  private openssl(args: string[]): void {
    execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  }
}
