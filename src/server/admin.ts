/**
 * The admin HTTP port: liveness, readiness and Prometheus metrics. Never exposed to callers.
 */
import { createServer, type Server } from "node:http";
import type { Registry } from "prom-client";

export interface AdminOptions {
  readonly ready: () => boolean;
  readonly metrics: Registry;
}

export function createAdminServer(options: AdminOptions): Server {
  return createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
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
