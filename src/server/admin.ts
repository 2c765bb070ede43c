/**
 * The admin HTTP port: liveness, readiness (`/readyz?verbose` lists every check, readiness.ts),
 * Prometheus metrics, and `POST /explain` when configured. Never exposed to callers. The port may be
 * bound wider than loopback for Prometheus, so /explain (a real decision, with real remote calls and
 * audit lines) checks its peer itself. With `workers: N` the primary serves it for every worker
 * (workers.ts): the same handlers, answered from the workers over IPC.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import { CanIError, type CanI, type CanIQuery } from "./can-i.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import type { RuleRequest } from "../kube-reading/rules-intersection.ts";
import type { Explainer } from "./explain.ts";
import { type Readiness, renderReadiness } from "./readiness.ts";

/** A prom-client Registry, or the primary's view summed over its workers. */
export interface MetricsSource {
  readonly contentType: string;
  metrics(): Promise<string>;
}

export interface AdminOptions {
  readonly readiness: () => Readiness | Promise<Readiness>;
  readonly metrics: MetricsSource;
  /** Absent unless `admin.explain` is set: /explain is then not found. */
  readonly explain: Explainer | undefined;
  /** `POST /can-i` (user ∩ plugin as rules); under the same setting and gate as /explain. Absent with workers. */
  readonly canI?: CanI | undefined;
}

/** 127.0.0.0/8, ::1, and IPv4 loopback as an IPv4-mapped IPv6 address. */
export function isLoopbackPeer(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice("::ffff:".length) : address;
  if (/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4)) return true;
  return address === "::1" || address === "0:0:0:0:0:0:0:1";
}

/** A CheckRequest is a few kilobytes; anything far larger is not one. */
const MAX_EXPLAIN_BODY = 1024 * 1024;

export function createAdminServer(options: AdminOptions): Server {
  return createServer((req, res) => {
    const [path, query] = (req.url ?? "/").split("?", 2) as [string, string | undefined];
    if (path === "/explain") {
      const explainer = options.explain;
      diagnostic(req, res, path, explainer !== undefined, (body) => explain(res, explainer!, body));
      return;
    }
    if (path === "/can-i") {
      const canI = options.canI;
      diagnostic(req, res, path, canI !== undefined, (body) => answerCanI(res, canI!, body));
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    switch (path) {
      case "/healthz":
        res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
        return;
      case "/readyz": {
        const verbose = new URLSearchParams(query).has("verbose");
        Promise.resolve(options.readiness()).then(
          (readiness) => res.writeHead(readiness.ready ? 200 : 503, { "content-type": "text/plain" }).end(renderReadiness(readiness, verbose)),
          () => res.writeHead(503, { "content-type": "text/plain" }).end("not ready\n"),
        );
        return;
      }
      case "/metrics":
        options.metrics.metrics().then(
          (text) => res.writeHead(200, { "content-type": options.metrics.contentType }).end(text),
          () => res.writeHead(500).end(),
        );
        return;
      default:
        res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    }
  });
}

/**
 * The gate of the diagnostics that make real calls (/explain, /can-i): not found unless configured,
 * loopback peers only, POST with a JSON object no larger than a CheckRequest could be.
 */
function diagnostic(req: IncomingMessage, res: ServerResponse, path: string, enabled: boolean, answer: (body: Record<string, unknown>) => void): void {
  if (!enabled) res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
  else if (!isLoopbackPeer(req.socket.remoteAddress)) res.writeHead(403, { "content-type": "text/plain" }).end(`${path} answers loopback peers only\n`);
  else if (req.method === "POST") readJsonObject(req, res, answer);
  else res.writeHead(405, { allow: "POST" }).end();
}

function readJsonObject(req: IncomingMessage, res: ServerResponse, answer: (body: Record<string, unknown>) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on("data", (chunk: Buffer) => {
    if (res.headersSent) return;
    size += chunk.length;
    if (size > MAX_EXPLAIN_BODY) {
      res.writeHead(413, { "content-type": "text/plain" }).end("request too large\n");
      req.destroy();
      return;
    }
    chunks.push(chunk);
  });
  req.on("end", () => {
    if (res.headersSent) return;
    let request: unknown;
    try {
      request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      request = undefined;
    }
    if (typeof request !== "object" || request === null || Array.isArray(request)) {
      res.writeHead(400, { "content-type": "text/plain" }).end("expected a JSON object\n");
      return;
    }
    answer(request as Record<string, unknown>);
  });
}

function explain(res: ServerResponse, explainer: Explainer, request: Record<string, unknown>): void {
  explainer(request as CheckRequestMessage).then(
    (explanation) => res.writeHead(200, { "content-type": "application/json" }).end(`${JSON.stringify(explanation)}\n`),
    () => res.writeHead(500, { "content-type": "text/plain" }).end("internal error\n"),
  );
}

/**
 * `POST /can-i` {user, installation, cluster, namespace?, request?}: the listing, or with `request`
 * ({verb, group?, resource, subresource?, name?} or {verb, path}) the answer to that one request.
 */
function answerCanI(res: ServerResponse, canI: CanI, body: Record<string, unknown>): void {
  const text = (key: string, from: Record<string, unknown> = body) => (typeof from[key] === "string" ? (from[key] as string) : undefined);
  const [user, installation, cluster] = [text("user"), text("installation"), text("cluster")];
  if (user === undefined || installation === undefined || cluster === undefined) {
    res.writeHead(400, { "content-type": "text/plain" }).end("expected user, installation and cluster\n");
    return;
  }
  const query: CanIQuery = { user, installation, cluster, namespace: text("namespace") ?? "" };
  let request: RuleRequest | undefined;
  const asked = body["request"];
  if (asked !== undefined) {
    const r = typeof asked === "object" && asked !== null && !Array.isArray(asked) ? (asked as Record<string, unknown>) : {};
    const verb = text("verb", r);
    const path = text("path", r);
    const resource = text("resource", r);
    if (verb !== undefined && path !== undefined && resource === undefined) request = { kind: "non-resource", verb, path };
    else if (verb !== undefined && resource !== undefined && path === undefined) {
      request = { kind: "resource", verb, group: text("group", r) ?? "", resource, subresource: text("subresource", r) ?? "", name: text("name", r) ?? "" };
    } else {
      res.writeHead(400, { "content-type": "text/plain" }).end("request: expected {verb, resource, group?, subresource?, name?} or {verb, path}\n");
      return;
    }
  }
  (request === undefined ? canI.list(query) : canI.ask(query, request)).then(
    (answer) => res.writeHead(200, { "content-type": "application/json" }).end(`${JSON.stringify(answer)}\n`),
    (err: unknown) => {
      // A dependency that cannot answer is a 503, as for a Check; the message names no credential.
      const status = err instanceof CanIError ? err.status : err instanceof DependencyUnavailable ? 503 : 500;
      const message =
        err instanceof CanIError ? err.message : err instanceof DependencyUnavailable ? `${err.dependency} did not answer; try again` : "internal error";
      res.writeHead(status, { "content-type": "text/plain" }).end(`${message}\n`);
    },
  );
}
