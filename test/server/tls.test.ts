/**
 * TLS and mTLS on the gRPC listeners, over real handshakes: a Check over TLS and over mTLS, clients
 * refused (plaintext, no certificate, a certificate from another CA), the internal listener under the
 * same credentials, a certificate rotated on disk picked up by new handshakes, and bad files refused
 * at start naming the field.
 */
import { copyFileSync, rmSync, writeFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema } from "../../src/config/schema.ts";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { checkTlsFiles, TlsConfigError } from "../../src/server/tls.ts";
import { SERVER_SANS, TestPki, withListenTls } from "../support/certificates.ts";
import { envoyCheckRequest, summarize, type CheckResponse } from "../support/envoy.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";

let pki: TestPki;

beforeAll(() => {
  pki = new TestPki();
  pki.ca("ca");
  pki.ca("other-ca");
  pki.leaf("server", "ca", { server: SERVER_SANS });
  pki.leaf("server-next", "ca", { server: SERVER_SANS });
  pki.leaf("envoy", "ca", "client");
  pki.leaf("intruder", "other-ca", "client");
  // The files the server reads; rotation overwrites these two.
  copyFileSync(pki.path("server.crt"), pki.path("live.crt"));
  copyFileSync(pki.path("server.key"), pki.path("live.key"));
});
afterAll(() => pki.remove());

const tlsConfig = (tls: Record<string, unknown>) => withListenTls({ certFile: pki.path("live.crt"), keyFile: pki.path("live.key"), ...tls });

const kubeCheck = async () =>
  envoyCheckRequest({
    path: `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`,
    headers: { authorization: `Bearer ${await pluginToken()}` },
    policy: "kube-api-proxy",
  });

/** One Check on a fresh channel, trusting the CA `trust`; `client` names a certificate of the PKI. */
async function checkOver(port: number, options: { trust?: string; client?: string } = {}) {
  const client = pki.checkClient(port, options.trust ?? "ca", options.client);
  try {
    return summarize((await client.check(await kubeCheck(), { deadline: Date.now() + 5_000 })) as CheckResponse);
  } finally {
    client.close();
  }
}

const connectTls = (port: number, client?: string) => pki.connect(port, "ca", client);
const presentedCertificate = (port: number, client?: string) => pki.presented(port, "ca", client);

async function plaintextCheck(port: number): Promise<grpc.ServiceError> {
  const client = authorizationClient(`127.0.0.1:${port}`);
  try {
    await client.check(await kubeCheck(), { deadline: Date.now() + 3_000 });
    throw new Error("a plaintext Check was answered by a TLS listener");
  } catch (err) {
    return err as grpc.ServiceError;
  } finally {
    client.close();
  }
}

const ALLOWED = expect.objectContaining({ allowed: true, grpc: 0 });

describe("TLS (server certificate only)", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(new FakeWorld(), tlsConfig({}));
  });
  afterAll(async () => server.stop());

  it("answers a Check over TLS, verified against the CA and the name Envoy checks", async () => {
    expect(await checkOver(server.server.grpcPort)).toEqual(ALLOWED);
  });

  it("refuses a plaintext client", async () => {
    expect((await plaintextCheck(server.server.grpcPort)).code).toBe(grpc.status.UNAVAILABLE);
  });

  it("fails the handshake for a client that does not trust the issuing CA", async () => {
    await expect(checkOver(server.server.grpcPort, { trust: "other-ca" })).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("serves the internal listener with the same certificate", async () => {
    const served = await presentedCertificate(server.server.internalPort);
    expect(served.subject.CN).toBe("server");
    expect((await plaintextCheck(server.server.internalPort)).code).toBe(grpc.status.UNAVAILABLE);
  });
});

describe("mTLS (client certificate required)", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(new FakeWorld(), tlsConfig({ clientCaFile: pki.path("ca.crt"), requireClientCert: true }));
  });
  afterAll(async () => server.stop());

  it("answers a Check from a client with a certificate the client CA signed", async () => {
    expect(await checkOver(server.server.grpcPort, { client: "envoy" })).toEqual(ALLOWED);
  });

  it("refuses a client without a certificate", async () => {
    await expect(checkOver(server.server.grpcPort)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("refuses a client whose certificate another CA signed", async () => {
    await expect(checkOver(server.server.grpcPort, { client: "intruder" })).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("refuses a client without a certificate on the internal listener too", async () => {
    expect(await connectTls(server.server.internalPort)).toEqual({ accepted: false, error: "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED" });
    expect((await presentedCertificate(server.server.internalPort, "envoy")).subject.CN).toBe("server");
  });
});

describe("certificate rotation on disk", () => {
  let server: TestServer;
  beforeAll(async () => {
    copyFileSync(pki.path("server.crt"), pki.path("live.crt"));
    copyFileSync(pki.path("server.key"), pki.path("live.key"));
    server = await startTestServer(new FakeWorld(), tlsConfig({ reloadIntervalMs: 100 }));
  });
  afterAll(async () => server.stop());

  it("new handshakes use the new certificate, without a restart", async () => {
    const port = server.server.grpcPort;
    const before = await presentedCertificate(port);
    expect(before.subject.CN).toBe("server");

    writeFileSync(pki.path("live.key"), pki.pem("server-next.key"));
    writeFileSync(pki.path("live.crt"), pki.pem("server-next.crt"));
    let after = before;
    for (let i = 0; i < 50 && after.fingerprint256 === before.fingerprint256; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await presentedCertificate(port).catch(() => before);
    }
    expect(after.subject.CN).toBe("server-next");
    expect(await checkOver(port)).toEqual(ALLOWED);
    expect(server.logs.some((l) => l["msg"] === "TLS certificate reloaded: new connections use it")).toBe(true);
  });

  // Fail closed while the files on disk are unusable: no connection is accepted (never one in
  // plaintext or with a stale key), and the listener recovers by itself when they are fixed.
  const broken: Array<{ name: string; breakFiles: () => void; logged: string }> = [
    {
      name: "both files removed",
      logged: "TLS certificate files unreadable: new connections are refused until they are",
      breakFiles: () => {
        rmSync(pki.path("live.crt"));
        rmSync(pki.path("live.key"));
      },
    },
    {
      name: "a certificate whose key is not written yet (a rotation in two writes)",
      breakFiles: () => writeFileSync(pki.path("live.crt"), pki.pem("server.crt")),
      logged: "TLS key is not the certificate's: new connections are refused until it is",
    },
  ];
  it.each(broken)("$name: new connections refused until the pair is whole again", async ({ breakFiles, logged }) => {
    const port = server.server.grpcPort;
    writeFileSync(pki.path("live.key"), pki.pem("server-next.key"));
    writeFileSync(pki.path("live.crt"), pki.pem("server-next.crt"));
    await until(async () => (await connectTls(port)).accepted, "the whole pair to be served");

    breakFiles();
    await until(async () => !(await connectTls(port)).accepted, "connections to be refused");
    expect(await plaintextCheck(port)).toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(server.logs.filter((l) => l["msg"] === logged)).toEqual([expect.objectContaining({ level: 50, setting: "listen.tls" })]);

    writeFileSync(pki.path("live.key"), pki.pem("server-next.key"));
    writeFileSync(pki.path("live.crt"), pki.pem("server-next.crt"));
    await until(async () => (await connectTls(port)).accepted, "connections to be accepted again");
    expect(await checkOver(port)).toEqual(ALLOWED);
  });
});

/** Polls every 50 ms, for at most 5 s (the reload interval here is 100 ms). */
async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("bad TLS files stop the start, naming the field", () => {
  const rows: Array<{ name: string; tls: () => Record<string, string>; field: string }> = [
    { name: "certificate file missing", tls: () => ({ certFile: pki.path("absent.crt"), keyFile: pki.path("server.key") }), field: "listen.tls.certFile" },
    { name: "key file missing", tls: () => ({ certFile: pki.path("server.crt"), keyFile: pki.path("absent.key") }), field: "listen.tls.keyFile" },
    { name: "key of another certificate", tls: () => ({ certFile: pki.path("server.crt"), keyFile: pki.path("envoy.key") }), field: "listen.tls.keyFile" },
    { name: "certificate file is not PEM", tls: () => ({ certFile: pki.path("server.ext"), keyFile: pki.path("server.key") }), field: "listen.tls.certFile" },
    { name: "key file is not PEM", tls: () => ({ certFile: pki.path("server.crt"), keyFile: pki.path("server.ext") }), field: "listen.tls.keyFile" },
    { name: "key and certificate swapped", tls: () => ({ certFile: pki.path("server.key"), keyFile: pki.path("server.crt") }), field: "listen.tls.certFile" },
    { name: "client CA missing", tls: () => ({ certFile: pki.path("server.crt"), keyFile: pki.path("server.key"), clientCaFile: pki.path("absent-ca.crt") }), field: "listen.tls.clientCaFile" },
    { name: "client CA is not PEM", tls: () => ({ certFile: pki.path("server.crt"), keyFile: pki.path("server.key"), clientCaFile: pki.path("server.ext") }), field: "listen.tls.clientCaFile" },
  ];
  it.each(rows)("$name → $field", ({ tls, field }) => {
    const parsed = configSchema.parse({ ...testConfigInput(), listen: { tls: tls() } }).listen.tls;
    if (parsed === undefined) throw new Error("listen.tls did not parse");
    const error = captureError(() => checkTlsFiles(parsed));
    expect(error).toBeInstanceOf(TlsConfigError);
    expect((error as TlsConfigError).field).toBe(field);
  });

  it("the schema refuses requireClientCert without clientCaFile", () => {
    const result = configSchema.safeParse({ ...testConfigInput(), listen: { tls: { certFile: "/c", keyFile: "/k", requireClientCert: true } } });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => i.path.join("."))).toContain("listen.tls.requireClientCert");
  });

  it("the server does not start on a bad key", async () => {
    const config = withListenTls({ certFile: pki.path("server.crt"), keyFile: pki.path("envoy.key") });
    await expect(startTestServer(new FakeWorld(), config)).rejects.toMatchObject({ code: "tls-config", field: "listen.tls.keyFile" });
  });
});

function testConfigInput(): Record<string, unknown> {
  return {
    tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }] },
    openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01J0000000000000000000TEST" },
  };
}

function captureError(f: () => void): unknown {
  try {
    f();
  } catch (err) {
    return err;
  }
  return undefined;
}
