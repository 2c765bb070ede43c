/**
 * A loopback HTTP server that misbehaves on cue. The OpenFGA and Kubernetes fakes build on it: each
 * endpoint reads its Fault before answering, so a test turns one dependency path bad and good again
 * while portcullis runs its real clients against it.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * How an endpoint answers:
 * - healthy: the real answer;
 * - reset: the socket is destroyed before any byte is written (connection reset);
 * - slow: the real answer, but only after `slowMs` (set it past the caller's deadline);
 * - status-500: an API-style 500;
 * - garbage: 200 with a body that is not JSON;
 * - hang: the request is read and never answered, its connection left open (a server that
 *   accepts and then stalls, as a starting or wedged API server does).
 */
export type Fault = "healthy" | "reset" | "slow" | "status-500" | "garbage" | "hang";

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
}

export abstract class HttpFake {
  /** Every request received, with its body, for assertions about what was sent. */
  readonly requests: RecordedRequest[] = [];
  /** How long a `slow` endpoint waits before answering. */
  slowMs = 5_000;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #held = new Set<NodeJS.Timeout>();
  readonly #pending = new Set<ServerResponse>();
  #port = 0;

  constructor() {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        this.requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
        this.#pending.add(res);
        res.on("close", () => this.#pending.delete(res));
        this.handle(req, res, body);
      });
    });
    this.#server.on("connection", (socket) => {
      this.#sockets.add(socket);
      socket.on("close", () => this.#sockets.delete(socket));
    });
  }

  protected abstract handle(req: IncomingMessage, res: ServerResponse, body: string): void;

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /**
   * Requests not yet answered whose client is still connected, streams excluded: a caller that
   * gave up on a slow answer but kept its socket waiting shows here (a leak).
   */
  get pendingRequests(): number {
    return this.#pending.size;
  }

  /** A response that stays open by design (a watch stream) is not a pending request. */
  protected longLived(res: ServerResponse): void {
    this.#pending.delete(res);
  }

  async start(): Promise<this> {
    await this.#listen(0);
    return this;
  }

  /** Stops accepting connections and drops the open ones: callers now get ECONNREFUSED. */
  async down(): Promise<void> {
    for (const t of this.#held) clearTimeout(t);
    this.#held.clear();
    const closed = new Promise<void>((resolveClose) => this.#server.close(() => resolveClose()));
    for (const s of this.#sockets) s.destroy();
    await closed;
  }

  /** Listens again on the same port, as a restarted dependency would. */
  async up(): Promise<void> {
    await this.#listen(this.#port);
  }

  async stop(): Promise<void> {
    if (this.#server.listening) await this.down();
  }

  /** Answers per `fault`; `healthy` is called for the real answer (now, or later when slow). */
  protected answer(fault: Fault, res: ServerResponse, healthy: () => void): void {
    switch (fault) {
      case "healthy":
        healthy();
        return;
      case "reset":
        res.socket?.destroy();
        return;
      case "slow": {
        const timer = setTimeout(() => {
          this.#held.delete(timer);
          if (!res.destroyed) healthy();
        }, this.slowMs);
        this.#held.add(timer);
        return;
      }
      case "status-500":
        json(res, 500, { code: 500, message: "internal error (fake)" });
        return;
      case "garbage":
        res.writeHead(200, { "content-type": "application/json" }).end("\u0000<html>not json{");
        return;
      case "hang":
        return;
    }
  }

  #listen(port: number): Promise<void> {
    return new Promise((resolveListen, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, "127.0.0.1", () => {
        this.#server.off("error", reject);
        this.#port = (this.#server.address() as AddressInfo).port;
        resolveListen();
      });
    });
  }
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
