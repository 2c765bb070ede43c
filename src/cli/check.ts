/**
 * `portcullis check`: asks a running portcullis for one decision, with a CheckRequest built exactly
 * as Envoy builds it, and prints the outcome with credentials redacted. `--explain` asks the admin
 * port's `POST /explain` instead (served only with `admin.explain`, to loopback peers), which also
 * returns the gates the decision went through; its audit line says `explain: true`.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import * as grpc from "@grpc/grpc-js";
import { buildCheckRequest } from "../envoy/build-check-request.ts";
import { type AnyCheckResponse, type CheckOutcome, describeCheckResponse } from "../server/describe-response.ts";
import { authorizationClient } from "../envoy/protos.ts";
import type { Explanation } from "../server/explain.ts";

/** Thrown for bad arguments; main prints usage and exits 2. */
export class UsageError extends Error {
  readonly code = "usage";
}

export interface CheckIo {
  readonly out: (text: string) => void;
}

const DEADLINE_MS = 10_000;

export async function runCheck(args: string[], io: CheckIo): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      server: { type: "string" },
      admin: { type: "string" },
      explain: { type: "boolean", default: false },
      policy: { type: "string" },
      method: { type: "string", default: "GET" },
      path: { type: "string" },
      header: { type: "string", short: "H", multiple: true, default: [] },
      token: { type: "string" },
      // A file keeps the token out of shell history and process listings.
      "token-file": { type: "string" },
      json: { type: "boolean", default: false },
      // A portcullis with listen.tls: the CA that signs its certificate, and for mTLS a client pair.
      ca: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
      "server-name": { type: "string" },
    },
  });
  if (values.path === undefined || !values.path.startsWith("/")) throw new UsageError("--path /… is required");
  if (values.policy === undefined) throw new UsageError("--policy is required");
  if (values.explain ? values.admin === undefined : values.server === undefined) {
    throw new UsageError(values.explain ? "--explain needs --admin HOST:PORT" : "--server HOST:PORT is required");
  }
  const headers = Object.fromEntries(values.header.map(parseHeader));
  if (values.token !== undefined && values["token-file"] !== undefined) throw new UsageError("give --token or --token-file, not both");
  const token = values["token-file"] === undefined ? values.token : readTokenFile(values["token-file"]);
  if (token !== undefined) headers["authorization"] = `Bearer ${token}`;
  // Tells this request apart from Envoy's in portcullis's logs and audit lines.
  headers["x-request-id"] ??= `portcullis-check-${randomUUID()}`;
  const request = buildCheckRequest({ method: values.method, path: values.path, headers, policy: values.policy });

  const outcome = values.explain ? await explain(values.admin!, request) : await check(values.server!, request, channelCredentials(values));
  io.out(values.json ? `${JSON.stringify(outcome, null, 2)}\n` : formatOutcome(outcome));
  return outcome.decision === "allow" ? 0 : 1;
}

function readTokenFile(path: string): string {
  try {
    return readFileSync(path, "utf8").trim();
  } catch (err) {
    throw new Error(`cannot read the token file ${path}: ${plainCause((err as NodeJS.ErrnoException).code)}`);
  }
}

/** What an operator reads instead of a gRPC status or an errno: "connection refused", not "14 UNAVAILABLE: No connection established". */
const PLAIN_CAUSES: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused (is it running, on that port?)",
  ECONNRESET: "the connection was reset",
  ENOTFOUND: "no such host",
  EAI_AGAIN: "the host name could not be resolved",
  EHOSTUNREACH: "no route to host",
  ETIMEDOUT: "the connection timed out",
  ENOENT: "no such file",
  EACCES: "permission denied",
  DEADLINE: `no answer within ${DEADLINE_MS / 1000} s`,
  TLS_CERT_REQUIRED: "the server requires a client certificate (--cert, --key)",
  TLS_NAME: "the server's certificate does not carry that name (--server-name)",
  TLS_UNTRUSTED: "the server's certificate is not signed by --ca",
  DROPPED: "the server closed the connection (plaintext to a TLS listener: give --ca; or a client certificate it does not accept)",
};

function plainCause(code: string | undefined): string {
  return (code === undefined ? undefined : PLAIN_CAUSES[code]) ?? `failed (${code ?? "unknown error"})`;
}

/** The errno a gRPC UNAVAILABLE carries only inside its details text ("… connect ECONNREFUSED 127.0.0.1:9001"). */
function grpcCause(err: { code?: unknown; details?: unknown }): string | undefined {
  if (err.code === grpc.status.DEADLINE_EXCEEDED) return "DEADLINE";
  const details = typeof err.details === "string" ? err.details : "";
  if (/Name resolution failed|ENOTFOUND|getaddrinfo/.test(details)) return "ENOTFOUND";
  if (/alert certificate required/.test(details)) return "TLS_CERT_REQUIRED";
  if (/ERR_TLS_CERT_ALTNAME_INVALID/.test(details)) return "TLS_NAME";
  if (/UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT|self-signed certificate|unable to (get|verify)/i.test(details)) return "TLS_UNTRUSTED";
  if (/Failed to connect \(/.test(details)) return "DROPPED";
  return /\b(E[A-Z]{3,})\b/.exec(details)?.[1];
}

/** `name: value`; a name may itself start with a colon (`:authority: example`). */
function parseHeader(text: string): [string, string] {
  const colon = text.indexOf(":", text.startsWith(":") ? 1 : 0);
  if (colon <= 0) throw new UsageError(`-H expects 'name: value', got ${JSON.stringify(text)}`);
  return [text.slice(0, colon).trim().toLowerCase(), text.slice(colon + 1).trim()];
}

/** TLS when --ca is given (mTLS with --cert and --key), the server's name checked as Envoy checks it; plaintext otherwise. */
function channelCredentials(values: { ca?: string | undefined; cert?: string | undefined; key?: string | undefined; "server-name"?: string | undefined }): {
  credentials?: grpc.ChannelCredentials;
  options: grpc.ChannelOptions;
} {
  const { ca, cert, key } = values;
  const serverName = values["server-name"];
  if (ca === undefined) {
    if (cert !== undefined || key !== undefined || serverName !== undefined) throw new UsageError("--cert, --key and --server-name need --ca FILE");
    return { options: {} };
  }
  if ((cert === undefined) !== (key === undefined)) throw new UsageError("give --cert and --key together");
  const credentials = grpc.credentials.createSsl(readPemFile(ca), key === undefined ? null : readPemFile(key), cert === undefined ? null : readPemFile(cert));
  return { credentials, options: serverName === undefined ? {} : { "grpc.ssl_target_name_override": serverName, "grpc.default_authority": serverName } };
}

function readPemFile(path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new Error(`cannot read ${path}: ${plainCause((err as NodeJS.ErrnoException).code)}`);
  }
}

async function check(server: string, request: object, channel: ReturnType<typeof channelCredentials>): Promise<CheckOutcome> {
  const client = authorizationClient(server, channel.credentials, channel.options);
  try {
    const response = await client.check(request, { deadline: Date.now() + DEADLINE_MS });
    return describeCheckResponse(response as AnyCheckResponse);
  } catch (err) {
    const { code } = err as { code?: unknown };
    if (code === grpc.status.UNAVAILABLE || code === grpc.status.DEADLINE_EXCEEDED) {
      const cause = grpcCause(err as { code?: unknown; details?: unknown });
      // Over TLS, a server refusing our certificate resets the connection or drops it, whichever
      // reaches the client first: both mean the same to the operator.
      const tlsAware = channel.credentials !== undefined && cause === "ECONNRESET" ? "DROPPED" : cause;
      throw new Error(`cannot reach portcullis at ${server}: ${plainCause(tlsAware)}`);
    }
    throw err;
  } finally {
    client.close();
  }
}

async function explain(admin: string, request: object): Promise<Explanation> {
  const response = await fetch(`http://${admin}/explain`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
    signal: AbortSignal.timeout(DEADLINE_MS),
  }).catch((err: unknown) => {
    const code = (err as Error).name === "TimeoutError" ? "DEADLINE" : ((err as { cause?: { code?: string } }).cause?.code);
    throw new Error(`cannot reach portcullis's admin port at ${admin}: ${plainCause(code)}`);
  });
  if (response.status === 404) throw new Error(`${admin}/explain is not served: set admin.explain: true on that server (off by default)`);
  if (!response.ok) throw new Error(`${admin}/explain answered ${response.status}: ${(await response.text()).trim()}`);
  return (await response.json()) as Explanation;
}

export function formatOutcome(outcome: CheckOutcome | Explanation): string {
  const lines = [`decision: ${outcome.decision}`, `status:   ${outcome.status}`];
  if (outcome.decision === "allow") {
    lines.push("set on the upstream request:", ...entries(outcome.mutations.set));
    lines.push("removed from the upstream request:", ...(outcome.mutations.remove.length === 0 ? ["  (none)"] : outcome.mutations.remove.map((h) => `  ${h}`)));
    if (outcome.mutations.query !== undefined) lines.push("query parameters set:", ...entries(outcome.mutations.query));
  } else {
    lines.push(`reason:   ${outcome.reason}`, "response headers:", ...entries(outcome.headers), `body:     ${outcome.body}`);
  }
  if ("trace" in outcome) {
    lines.push("gates:", ...outcome.trace.map((step, i) => `  ${i + 1}. ${step.gate}: ${step.outcome}`));
  }
  return `${lines.join("\n")}\n`;
}

function entries(headers: Readonly<Record<string, string>>): string[] {
  const list = Object.entries(headers);
  return list.length === 0 ? ["  (none)"] : list.map(([k, v]) => `  ${k}: ${v}`);
}
