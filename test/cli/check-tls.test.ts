/**
 * `portcullis check` against a portcullis whose listeners speak mTLS (listen.tls): with the CA and a
 * client certificate it gets the decision; without them it says it cannot reach the server, in words.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SERVER_NAME, SERVER_SANS, TestPki, withListenTls } from "../support/certificates.ts";
import { FakeWorld } from "../support/fakes.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { ids, pluginToken } from "../support/tokens.ts";
import { cli } from "./run.ts";

let pki: TestPki;
let server: TestServer;
let target: string;

beforeAll(async () => {
  pki = new TestPki();
  pki.ca("ca");
  pki.leaf("server", "ca", { server: SERVER_SANS });
  pki.leaf("operator", "ca", "client");
  pki.ca("other-ca");
  pki.leaf("stranger", "other-ca", "client");
  server = await startTestServer(
    new FakeWorld(),
    withListenTls({ certFile: pki.path("server.crt"), keyFile: pki.path("server.key"), clientCaFile: pki.path("ca.crt"), requireClientCert: true }),
  );
  target = `127.0.0.1:${server.server.grpcPort}`;
});
afterAll(async () => {
  await server?.stop();
  pki?.remove();
});

const checkArgs = async () => ["check", "--server", target, "--policy", "kube-api-proxy", "--path", `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`, "--token", await pluginToken()];

describe("portcullis check over TLS", () => {
  it("gets the decision with --ca, --cert and --key, checking the name Envoy checks", async () => {
    const tls = ["--ca", pki.path("ca.crt"), "--cert", pki.path("operator.crt"), "--key", pki.path("operator.key"), "--server-name", SERVER_NAME];
    const res = await cli([...(await checkArgs()), ...tls]);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/allow/i);
  });

  const client = () => ["--cert", pki.path("operator.crt"), "--key", pki.path("operator.key")];
  it.each([
    { name: "plaintext", tls: () => [] as string[], says: "the server closed the connection (plaintext to a TLS listener: give --ca; or a client certificate it does not accept)" },
    { name: "without a client certificate", tls: () => ["--ca", pki.path("ca.crt"), "--server-name", SERVER_NAME], says: "the server requires a client certificate (--cert, --key)" },
    { name: "with a client certificate another CA signed", tls: () => ["--ca", pki.path("ca.crt"), "--server-name", SERVER_NAME, "--cert", pki.path("stranger.crt"), "--key", pki.path("stranger.key")], says: "the server closed the connection (plaintext to a TLS listener: give --ca; or a client certificate it does not accept)" },
    { name: "checking a name the certificate does not carry", tls: () => ["--ca", pki.path("ca.crt"), ...client(), "--server-name", "other.example"], says: "the server's certificate does not carry that name (--server-name)" },
    { name: "trusting another CA", tls: () => ["--ca", pki.path("other-ca.crt"), ...client(), "--server-name", SERVER_NAME], says: "the server's certificate is not signed by --ca" },
  ])("cannot reach it $name: exit 2, said in words", async ({ tls, says }) => {
    const res = await cli([...(await checkArgs()), ...tls()]);
    expect(res.code).toBe(2);
    expect(res.stderr).toBe(`portcullis check: cannot reach portcullis at ${target}: ${says}\n`);
    expect(res.stdout).toBe("");
  });

  it.each([
    { name: "--cert without --ca", tls: () => ["--cert", pki.path("operator.crt"), "--key", pki.path("operator.key")], message: /need --ca FILE/ },
    { name: "--cert without --key", tls: () => ["--ca", pki.path("ca.crt"), "--cert", pki.path("operator.crt")], message: /--cert and --key together/ },
  ])("usage error for $name", async ({ tls, message }) => {
    const res = await cli([...(await checkArgs()), ...tls()]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(message);
  });

  it("an unreadable CA file is named", async () => {
    const res = await cli([...(await checkArgs()), "--ca", pki.path("absent.crt")]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain(`cannot read ${pki.path("absent.crt")}: no such file`);
  });
});
