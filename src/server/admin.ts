/**
 * The admin HTTP port: liveness, readiness, Prometheus metrics and `POST /explain`. Never exposed
 * to callers.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Registry } from "prom-client";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import type { Explainer } from "./explain.ts";

export interface AdminOptions {
  readonly ready: () => boolean;
  readonly metrics: Registry;
  readonly explain: Explainer;
}

/** A CheckRequest is a few kilobytes; anything far larger is not one. */
const MAX_EXPLAIN_BODY = 1024 * 1024;

export function createAdminServer(options: AdminOptions): Server {
  return createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === "/explain") {
      if (req.method === "POST") explain(req, res, options.explain);
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
        const ready = options.ready();
        res.writeHead(ready ? 200 : 503, { "content-type": "text/plain" }).end(ready ? "ready\n" : "not ready\n");
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
