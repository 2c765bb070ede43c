/**
 * TLS in the real process (`node src/cli/main.ts`), with `workers: 2` sharing the listeners: mTLS
 * Checks answered by both workers, a rotated certificate picked up by every worker without a
 * restart, and a key that is not the certificate's stopping the start with the field named.
 */
import { copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SERVER_SANS, TestPki } from "../support/certificates.ts";
import { envoyCheckRequest, summarize, type CheckResponse } from "../support/envoy.ts";
import { freeAddresses, spawnPortcullisFile, startProcessWorld, type PortcullisProcess, type ProcessWorld } from "../support/portcullis-process.ts";
import { ids, pluginToken } from "../support/tokens.ts";

let world: ProcessWorld;
let pki: TestPki;

beforeAll(async () => {
  world = await startProcessWorld("tls");
  pki = new TestPki();
  pki.ca("ca");
  pki.leaf("server", "ca", { server: SERVER_SANS });
  pki.leaf("server-next", "ca", { server: SERVER_SANS });
  pki.leaf("envoy", "ca", "client");
  copyFileSync(pki.path("server.crt"), pki.path("live.crt"));
  copyFileSync(pki.path("server.key"), pki.path("live.key"));
});
afterAll(async () => {
  await world?.stop();
  pki?.remove();
});

async function start(name: string, keyFile: string): Promise<PortcullisProcess> {
  const addresses = await freeAddresses();
  const config = join(world.dir, `${name}.yaml`);
  writeFileSync(
    config,
    `workers: 2
listen:
  grpc: "${addresses.grpc}"
  admin: "${addresses.admin}"
  internal: "${addresses.internal}"
  tls: { certFile: "${pki.path("live.crt")}", keyFile: "${keyFile}", clientCaFile: "${pki.path("ca.crt")}", requireClientCert: true, reloadIntervalMs: 200 }
tokens: { secrets: [{ env: PORTCULLIS_SECRET }] }
openfga: { apiUrl: "${world.openfga.url}", storeId: "${world.openfga.storeId}", allowTtlMs: 1, denyTtlMs: 1 }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${world.kubeconfig}" }]
shutdown: { drainMs: 0 }
`,
  );
  return spawnPortcullisFile(config, addresses);
}

const port = (p: PortcullisProcess) => Number(p.addresses.grpc.split(":")[1]);

async function mtlsCheck(p: PortcullisProcess) {
  const client = pki.checkClient(port(p), "ca", "envoy");
  try {
    const request = envoyCheckRequest({ path: `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`, headers: { authorization: `Bearer ${await pluginToken()}` }, policy: "kube-api-proxy" });
    return summarize((await client.check(request, { deadline: Date.now() + 5_000 })) as CheckResponse);
  } finally {
    client.close();
  }
}

async function eventually<T>(attempt: () => Promise<T>, timeoutMs: number): Promise<T> {
  const started = performance.now();
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      if (performance.now() - started > timeoutMs) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe("workers: 2 with mTLS", () => {
  let p: PortcullisProcess;
  beforeAll(async () => {
    p = await start("mtls-workers", pki.path("live.key"));
    const listening = () => p.lines().filter((l) => l["msg"] === "portcullis listening").length;
    await eventually(async () => {
      if (listening() < 2) throw new Error(`${listening()} of 2 workers listening`);
    }, 30_000);
  });
  afterAll(async () => {
    p.child.kill("SIGTERM");
    await p.exited;
  });

  it("answers mTLS Checks on fresh connections, both workers listening with mTLS", async () => {
    const answers = await Promise.all(Array.from({ length: 8 }, () => mtlsCheck(p)));
    expect(answers.every((a) => a.allowed)).toBe(true);
    const listening = p.lines().filter((l) => l["msg"] === "portcullis listening");
    expect(listening.map((l) => l["tls"])).toEqual(["mtls", "mtls"]);
    expect(new Set(listening.map((l) => l["pid"])).size).toBe(2);
  });

  it("refuses a connection without a client certificate", async () => {
    expect(await pki.connect(port(p), "ca")).toMatchObject({ accepted: false });
  });

  it("every worker presents the rotated certificate to new connections, without a restart", async () => {
    writeFileSync(pki.path("live.key"), pki.pem("server-next.key"));
    writeFileSync(pki.path("live.crt"), pki.pem("server-next.crt"));
    // Connections are spread over the workers; 12 in a row showing the new one covers both.
    await eventually(async () => {
      const seen = await Promise.all(Array.from({ length: 12 }, () => pki.presented(port(p), "ca", "envoy").then((c) => c.subject.CN)));
      if (!seen.every((cn) => cn === "server-next")) throw new Error(`still presented: ${seen.join(", ")}`);
    }, 10_000);
    expect((await mtlsCheck(p)).allowed).toBe(true);
    expect(p.lines().filter((l) => l["msg"] === "TLS certificate reloaded: new connections use it")).toHaveLength(2);
  });
});

it("a key that is not the certificate's stops the start: non-zero exit naming listen.tls.keyFile", async () => {
  const p = await start("bad-key", pki.path("envoy.key"));
  const exit = await Promise.race([p.exited, new Promise<"running">((r) => setTimeout(() => r("running"), 15_000))]);
  p.kill();
  expect(exit).not.toBe("running");
  expect(exit).toMatchObject({ code: expect.any(Number) });
  expect((exit as { code: number }).code).not.toBe(0);
  expect(p.stdout() + p.stderr()).toContain("listen.tls.keyFile");
});
