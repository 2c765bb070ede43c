/**
 * Bytes CDS sends per change of the registered fleet, State of the World against Delta (issue 46
 * §4): portcullis's ClusterDiscovery on a real gRPC server, N registered clusters (each with a
 * 2048-bit RSA CA inline, as a kube-apiserver's is), and one real gRPC client per variant that ACKs
 * every response; the bytes are the serialized response messages as the client receives them
 * (gRPC framing and HTTP/2 headers aside). Two changes: a cluster added (one version), and a
 * cluster re-pointed to another server (the version carrying its new Envoy cluster, then the one
 * withdrawing the old after the ACKs). Measured in-process: it needs no fleet of API servers.
 *
 *   npx node bench/cds-bytes.ts [--clusters 100,1000]
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import * as grpc from "@grpc/grpc-js";
import pino from "pino";
import { CLUSTER_TYPE_URL, ClusterDiscovery, clusterDiscoveryService } from "../src/deploy/cluster-discovery.ts";
import type { ClusterCredentials } from "../src/kube-fleet/clusters.ts";

export interface CdsBytes {
  readonly clusters: number;
  /** Bytes of the responses one change caused, per variant. */
  readonly added: { readonly sotw: number; readonly delta: number };
  readonly repointed: { readonly sotw: number; readonly delta: number };
}

const COALESCE_MS = 20;

/** A 2048-bit RSA CA certificate in PEM, as kube-apiservers are usually given. */
function rsaCaPem(): string {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-cds-bytes-"));
  try {
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kubernetes", "-keyout", join(dir, "ca.key"), "-out", join(dir, "ca.crt")], { stdio: "ignore" });
    return readFileSync(join(dir, "ca.crt"), "utf8");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const clusterId = (i: number) => `c0000000-0000-4000-8000-${i.toString(16).padStart(12, "0")}`;
const credentials = (i: number, caPem: string, host = i): ClusterCredentials => ({
  id: clusterId(i),
  server: `https://10.${(host >> 16) & 255}.${(host >> 8) & 255}.${host & 255}:6443`,
  caPem,
  credential: { token: "never-sent" },
});

/** One client stream that ACKs everything and counts the bytes of what it receives. */
function countingStream(client: grpc.Client, delta: boolean): { bytes: () => number; responses: () => number; close: () => void } {
  const method = clusterDiscoveryService()[delta ? "DeltaClusters" : "StreamClusters"]!;
  let bytes = 0;
  let responses = 0;
  const call = client.makeBidiStreamRequest(
    method.path,
    method.requestSerialize,
    (buffer: Buffer) => {
      bytes += buffer.length;
      responses += 1;
      return method.responseDeserialize(buffer);
    },
  );
  call.on("data", (response: { nonce: string; version_info?: string }) => {
    call.write(delta ? { type_url: CLUSTER_TYPE_URL, response_nonce: response.nonce } : { type_url: CLUSTER_TYPE_URL, version_info: response.version_info, response_nonce: response.nonce });
  });
  call.on("error", () => {});
  call.write({ type_url: CLUSTER_TYPE_URL, node: { id: "cds-bytes", cluster: "bench" } });
  return { bytes: () => bytes, responses: () => responses, close: () => call.end() };
}

/** Waits until nothing has arrived on any stream for a while (the pushes, and the retirement after the ACKs). */
async function quiet(streams: ReadonlyArray<{ responses: () => number }>): Promise<void> {
  let last = -1;
  for (;;) {
    await new Promise((r) => setTimeout(r, COALESCE_MS * 10));
    const now = streams.reduce((n, s) => n + s.responses(), 0);
    if (now === last) return;
    last = now;
  }
}

export async function cdsBytesPerChange(counts: readonly number[]): Promise<CdsBytes[]> {
  const caPem = rsaCaPem();
  const results: CdsBytes[] = [];
  for (const n of counts) {
    const cds = new ClusterDiscovery({ envoyCaFile: "/etc/ssl/certs/ca-certificates.crt", logger: pino({ level: "silent" }), coalesceMs: COALESCE_MS });
    const server = new grpc.Server();
    server.addService(clusterDiscoveryService(), cds.handlers());
    const port = await new Promise<number>((resolvePort, reject) => server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolvePort(p))));
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { "grpc.max_receive_message_length": -1 });
    try {
      for (let i = 0; i < n; i++) cds.put(credentials(i, caPem));
      const sotw = countingStream(client, false);
      const delta = countingStream(client, true);
      const streams = [sotw, delta];
      await quiet(streams);
      const measure = async (change: () => void) => {
        const before = { sotw: sotw.bytes(), delta: delta.bytes() };
        change();
        await quiet(streams);
        return { sotw: sotw.bytes() - before.sotw, delta: delta.bytes() - before.delta };
      };
      const added = await measure(() => cds.put(credentials(n, caPem)));
      const repointed = await measure(() => cds.put(credentials(0, caPem, n + 1)));
      results.push({ clusters: n, added, repointed });
      sotw.close();
      delta.close();
    } finally {
      client.close();
      cds.close();
      server.forceShutdown();
    }
  }
  return results;
}

/** The figures as report lines. */
export function cdsBytesLines(results: readonly CdsBytes[]): string[] {
  const kb = (b: number) => (b >= 1_000_000 ? `${(b / 1_000_000).toFixed(2)} MB` : `${(b / 1000).toFixed(1)} kB`);
  return [
    "| clusters | change | State of the World | Delta |",
    "| --- | --- | --- | --- |",
    ...results.flatMap((r) => [
      `| ${r.clusters} | a cluster added (1 version) | ${kb(r.added.sotw)} | ${kb(r.added.delta)} |`,
      `| ${r.clusters} | a cluster re-pointed (2 versions: new name, old withdrawn) | ${kb(r.repointed.sotw)} | ${kb(r.repointed.delta)} |`,
    ]),
  ];
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { clusters: { type: "string", default: "100,1000" } } });
  const counts = values.clusters.split(",").map(Number);
  console.log(cdsBytesLines(await cdsBytesPerChange(counts)).join("\n"));
}
