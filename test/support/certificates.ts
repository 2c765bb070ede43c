/** Throwaway PKI for TLS tests, made with the system `openssl`: a CA, and leaf certificates it signs. */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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
