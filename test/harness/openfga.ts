import { readFileSync } from "node:fs";
import { transformer } from "@openfga/syntax-transformer";
import { makeTempDir, resolveBinary, spawnManaged, waitUntilReady, type ManagedProcess } from "./binaries.ts";
import { freePort } from "./ports.ts";

export interface OpenFGAOptions {
  /** Authorization model in the OpenFGA DSL (.fga), e.g. deploy/openfga/model.fga. */
  modelFile: string;
  /** Name of the store created; `portcullis-test` by default. */
  storeName?: string;
  /** Listen on these ports (e.g. those of an OpenFGA this one replaces); free ones by default. */
  ports?: { http: number; grpc: number };
  /** More `openfga run` flags (e.g. its own Check cache). */
  args?: readonly string[];
}

export interface OpenFGA {
  /** http://127.0.0.1:port, the HTTP API (what `OpenFgaClient`'s apiUrl takes). */
  readonly apiUrl: string;
  /** A fresh store holding only the model. */
  readonly storeId: string;
  readonly modelId: string;
  readonly ports: { http: number; grpc: number };
  /** The OpenFGA process, for fault injection (signals, /proc). */
  readonly process: ManagedProcess;
  stop(): Promise<void>;
}

/** Starts OpenFGA with the in-memory datastore and loads the model into a new store. */
export async function startOpenFGA(opts: OpenFGAOptions): Promise<OpenFGA> {
  // Parse first: a model error should not cost a server start.
  const model = transformer.transformDSLToJSONObject(readFileSync(opts.modelFile, "utf8"));
  const bin = resolveBinary("openfga");
  const [httpPort, grpcPort] = opts.ports === undefined ? [await freePort(), await freePort()] : [opts.ports.http, opts.ports.grpc];
  const apiUrl = `http://127.0.0.1:${httpPort}`;
  const proc = spawnManaged("openfga", bin, [
    "run",
    "--datastore-engine=memory",
    `--http-addr=127.0.0.1:${httpPort}`,
    // The HTTP API is a gateway in front of gRPC, so gRPC must listen too.
    `--grpc-addr=127.0.0.1:${grpcPort}`,
    "--playground-enabled=false",
    "--metrics-enabled=false",
    "--log-level=warn",
    ...(opts.args ?? []),
  ], makeTempDir("openfga"));

  try {
    await waitUntilReady(proc, async () => {
      const res = await fetch(`${apiUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
      return res.ok && ((await res.json()) as { status?: string }).status === "SERVING";
    }, 30_000);

    const store = await postJson<{ id: string }>(`${apiUrl}/stores`, { name: opts.storeName ?? "portcullis-test" });
    const written = await postJson<{ authorization_model_id: string }>(
      `${apiUrl}/stores/${store.id}/authorization-models`,
      model,
    );
    return {
      apiUrl,
      storeId: store.id,
      modelId: written.authorization_model_id,
      ports: { http: httpPort, grpc: grpcPort },
      process: proc,
      stop: () => proc.stop(),
    };
  } catch (err) {
    await proc.stop();
    throw err;
  }
}

async function postJson<T>(url: string, body: unknown): Promise<T> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  if (!res.ok) throw new Error(`POST ${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}
