/** Starts portcullis in-process on loopback ports with the given ports (fakes or real), and a real gRPC client. */
import { Writable } from "node:stream";
import { configSchema, type Config } from "../../src/config/schema.ts";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { startServer, type RunningServer } from "../../src/server/app.ts";
import type { PolicyPorts, PortsRuntime } from "../../src/server/ports.ts";
import { createLogging } from "../../src/server/logging.ts";
import { type CheckResponse, envoyCheckRequest, type RequestSpec, summarize } from "./envoy.ts";
import { requestModeConfig, toRequestMode, withoutCorsHeaders } from "./request-mode.ts";
import { ids, OLD_SECRET, SECRET } from "./tokens.ts";

process.env["PORTCULLIS_TEST_SECRET"] = SECRET;
process.env["PORTCULLIS_TEST_OLD_SECRET"] = OLD_SECRET;

/** Port 0 (any free port) is not a valid configuration; in-process servers take one unless a test sets listen. */
const ANY_FREE_PORT = { grpc: "127.0.0.1:0", admin: "127.0.0.1:0", internal: "127.0.0.1:0" };

export function testConfig(overrides: Record<string, unknown> = {}): Config {
  const config = parseTestConfig(overrides);
  return "listen" in overrides ? config : { ...config, listen: { ...config.listen, ...ANY_FREE_PORT } };
}

function parseTestConfig(overrides: Record<string, unknown>): Config {
  return configSchema.parse({
    logLevel: "debug",
    tokens: { secrets: [{ env: "PORTCULLIS_TEST_SECRET" }, { env: "PORTCULLIS_TEST_OLD_SECRET" }] },
    openfga: { apiUrl: "http://127.0.0.1:1", storeId: "01J0000000000000000000TEST" },
    clusters: [{ id: ids.cluster, kubeconfig: "/nonexistent" }],
    // In-process servers stop at once; the drain period is tested on a real process (test/server/app.shutdown.process.test.ts).
    shutdown: { drainMs: 0 },
    ...overrides,
  });
}

export interface TestServer {
  readonly server: RunningServer;
  /** Every log and audit line written, parsed. */
  readonly logs: Array<Record<string, unknown>>;
  readonly rawLog: () => string;
  check(spec: RequestSpec): Promise<ReturnType<typeof summarize>>;
  checkRaw(request: object): Promise<CheckResponse>;
  stop(): Promise<void>;
}

/**
 * Ports a test server runs over: what the policies read, and of the runtime what the test needs
 * (real ports carry all of it); the rest is always ready, has no indexes and nothing to stop.
 */
export type TestPorts = PolicyPorts & Partial<PortsRuntime>;

function runtimeOf(ports: TestPorts): PortsRuntime {
  return { ready: () => true, indexSizes: () => [], stop: async () => {}, ...ports };
}

/** `echo` also writes every log line to stdout (the local stack shows them). */
export async function startTestServer(ports: TestPorts, given: Config = testConfig(), options: { echo?: boolean } = {}): Promise<TestServer> {
  // A *.request-mode.test.ts run: request mode, CheckRequests without context_extensions (request-mode.ts).
  const config = requestModeConfig(given);
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(String(chunk));
      if (options.echo) process.stdout.write(chunk);
      cb();
    },
  });
  const logging = createLogging(config.logLevel, sink);
  const server = await startServer({ config, ports, runtime: runtimeOf(ports), logger: logging.logger, audit: logging.audit, flushLogs: logging.flush });
  const client = authorizationClient(`127.0.0.1:${server.grpcPort}`);
  // Audit lines are written in batches (src/server/logging.ts); a test reads them as soon as the check is answered.
  const rawLog = () => {
    logging.writeAuditBatch();
    return chunks.join("");
  };
  return {
    server,
    get logs() {
      return rawLog()
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    },
    rawLog,
    checkRaw: async (request) => withoutCorsHeaders((await client.check(toRequestMode(config, request))) as CheckResponse),
    check: async (spec) => summarize(withoutCorsHeaders((await client.check(toRequestMode(config, envoyCheckRequest(spec)))) as CheckResponse)),
    async stop() {
      client.close();
      await server.shutdown();
    },
  };
}
