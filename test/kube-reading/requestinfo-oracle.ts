/**
 * The differential oracle (scripts/deps/requestinfo-oracle): kube-apiserver's own Go code reading
 * a request before authorization. One long-lived process per test file; requests go in batches of
 * JSON lines and come back one answer line each, in order.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { resolveBinary } from "../harness/binaries.ts";

export interface OracleRequest {
  readonly method: string;
  readonly path: string;
  /** Absent when the request target has no "?". */
  readonly rawQuery?: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/** One authorizer.Attributes the API server checks (filters.GetAuthorizerAttributes). */
export interface OracleAttributes {
  readonly resourceRequest: boolean;
  readonly verb: string;
  readonly apiGroup: string;
  readonly apiVersion: string;
  readonly resource: string;
  readonly subresource: string;
  readonly namespace: string;
  readonly name: string;
  readonly path: string;
}

export interface OracleRequestInfo {
  readonly isResourceRequest: boolean;
  readonly path: string;
  readonly verb: string;
  readonly apiPrefix: string;
  readonly apiGroup: string;
  readonly apiVersion: string;
  readonly namespace: string;
  readonly resource: string;
  readonly subresource: string;
  readonly name: string;
  readonly parts: readonly string[] | null;
}

export interface OracleAnswer {
  /** The request's sequence number, echoed. */
  readonly id: number;
  /** url.ParseQuery: the values and the first error ("" for none). */
  readonly query: { readonly values: Readonly<Record<string, readonly string[]>>; readonly error: string };
  /** "" when the request reaches authorization; else the stage that answers it first. */
  readonly rejected: "" | "http" | "request-info" | "request-deadline" | "authorizer-attributes" | "oracle-input";
  readonly rejectedDetail: string;
  readonly requestInfo: OracleRequestInfo | null;
  readonly attributes: readonly OracleAttributes[] | null;
  /**
   * For a request authorized as delete or deletecollection: the DeleteOptions handlers/delete.go
   * decodes from the query of a DELETE without a body, and whether it then authorizes
   * "unsafe-delete-ignore-read-errors" (ignoreStoreReadErrorWithClusterBreakingPotential read true).
   */
  readonly deleteOptions: { readonly unsafeDelete: boolean; readonly error: string } | null;
  /** Some string above held bytes that are not UTF-8 (shown as U+FFFD). */
  readonly invalidUtf8: boolean;
}

export interface Oracle {
  ask(requests: readonly OracleRequest[]): Promise<OracleAnswer[]>;
  stop(): Promise<void>;
}

export function startOracle(): Oracle {
  const child: ChildProcessWithoutNullStreams = spawn(resolveBinary("requestInfoOracle"), [], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString("utf8")).slice(-4_000);
  });
  let exited: string | undefined;
  const pending: Array<{ id: number; resolve: (a: OracleAnswer) => void; reject: (e: Error) => void }> = [];
  let sent = 0;
  const failAll = (why: string) => {
    exited = why;
    for (const p of pending.splice(0)) p.reject(new Error(`requestinfo-oracle ${why}: ${stderr}`));
  };
  child.once("exit", (code, signal) => failAll(signal ? `killed by ${signal}` : `exited with ${code}`));
  child.once("error", (err) => failAll(`failed: ${err.message}`));
  createInterface({ input: child.stdout, crlfDelay: Infinity }).on("line", (line) => {
    const next = pending.shift();
    const answer = JSON.parse(line) as OracleAnswer;
    if (next === undefined || answer.id !== next.id) return failAll(`answered ${answer.id} out of turn`);
    next.resolve(answer);
  });

  return {
    ask(requests) {
      if (exited !== undefined) return Promise.reject(new Error(`requestinfo-oracle ${exited}: ${stderr}`));
      const ids = requests.map(() => sent++);
      const answers = ids.map((id) => new Promise<OracleAnswer>((resolve, reject) => pending.push({ id, resolve, reject })));
      child.stdin.write(requests.map((r, i) => JSON.stringify({ id: ids[i], ...r })).join("\n") + "\n");
      return Promise.all(answers);
    },
    async stop() {
      if (exited !== undefined) return;
      const done = new Promise((resolve) => child.once("exit", resolve));
      child.stdin.end();
      await done;
    },
  };
}
