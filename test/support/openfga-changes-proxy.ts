/**
 * An HTTP proxy (node:http) in front of OpenFGA that can make its changes endpoint fail while every
 * other call (Check, ListObjects, the store's and model's reads) goes through unchanged: OpenFGA's
 * ReadChanges (`GET /stores/{id}/changes`) answering 500, the event source cut and the gate alive.
 */
import { type IncomingMessage, request, type Server, type ServerResponse, createServer, Agent } from "node:http";

export interface OpenFgaChangesProxy {
  /** http://127.0.0.1:port, what portcullis's openfga.apiUrl takes. */
  readonly url: string;
  /** While true, `/stores/*\/changes` answers 500. */
  failChanges(failing: boolean): void;
  /** Changes requests answered 500 so far. */
  failed(): number;
  stop(): Promise<void>;
}

const CHANGES = /^\/stores\/[^/]+\/changes(?:\?|$)/;

export async function startOpenFgaChangesProxy(targetUrl: string): Promise<OpenFgaChangesProxy> {
  const target = new URL(targetUrl);
  const agent = new Agent({ keepAlive: true });
  let failing = false;
  let failedCount = 0;

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (failing && CHANGES.test(req.url ?? "")) {
      failedCount += 1;
      req.resume();
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ code: "internal_error", message: "changes endpoint failing (test proxy)" }));
      return;
    }
    const upstream = request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host }, agent },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("OpenFGA changes proxy has no port");

  return {
    url: `http://127.0.0.1:${address.port}`,
    failChanges(next) {
      failing = next;
    },
    failed: () => failedCount,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolveClose) => server.close(() => resolveClose()));
      agent.destroy();
    },
  };
}
