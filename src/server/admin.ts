/**
 * The admin HTTP port: liveness, readiness (`/readyz?verbose` lists every check, readiness.ts),
 * Prometheus metrics, and `POST /explain` when configured. Never exposed to callers. The port may be
 * bound wider than loopback for Prometheus, so /explain (a real decision, with real remote calls and
 * audit lines) checks its peer itself. With `workers: N` the primary serves it for every worker
 * (workers.ts): the same handlers, answered from the workers over IPC.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
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
      if (options.explain === undefined) res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      else if (!isLoopbackPeer(req.socket.remoteAddress)) res.writeHead(403, { "content-type": "text/plain" }).end("/explain answers loopback peers only\n");
      else if (req.method === "POST") explain(req, res, options.explain);
      else res.writeHead(405, { allow: "POST" }).end();
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

function explain(req: IncomingMessage, res: ServerResponse, explainer: Explainer): void {
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
      res.writeHead(400, { "content-type": "text/plain" }).end("expected a CheckRequest as a JSON object\n");
      return;
    }
    explainer(request as CheckRequestMessage).then(
      (explanation) => res.writeHead(200, { "content-type": "application/json" }).end(`${JSON.stringify(explanation)}\n`),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("internal error\n"),
    );
  });
}
