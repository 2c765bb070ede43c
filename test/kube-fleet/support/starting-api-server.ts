/**
 * A TLS fake of a kube-apiserver that is starting up, for the API-server connection tests. It
 * offers HTTP/2 and HTTP/1.1 by ALPN (as kube-apiserver does) and records what each connection
 * negotiated, so a test can prove which protocol portcullis speaks. Its phases replay what a
 * restarted API server answered in issue 12:
 * - hold-tls: TCP accepted, TLS never answered (until the phase changes);
 * - unread: requests accepted, but their bodies read only after `unreadMs` (past a review's
 *   deadline), with a 16-byte HTTP/2 stream window so a body stays queued in the client;
 * - starting: LIST 403 (RBAC not synced), WATCH 429 "storage is (re)initializing", reviews "not allowed";
 * - ready: real-shaped answers; a watch sends one ADDED event and stays open.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createSecureServer, type Http2SecureServer, type Settings, type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";

export type Phase = "hold-tls" | "unread" | "starting" | "ready";

export interface StartingApiServerOptions {
  /** How long a request body stays unread in the `unread` phase. */
  readonly unreadMs?: number;
  /** How long a ready server takes to answer a review. */
  readonly answerDelayMs?: number;
  /** The HTTP/2 SETTINGS it sends; a 16-byte stream window by default, so request bodies queue in the client. */
  readonly settings?: Settings;
}

/** kube-apiserver v1.37.2's SETTINGS, as captured on loopback. */
export const KUBE_APISERVER_SETTINGS: Settings = {
  maxConcurrentStreams: 100,
  initialWindowSize: 262_144,
  maxFrameSize: 262_144,
  headerTableSize: 4_096,
  maxHeaderListSize: 1_048_896,
};

export class StartingApiServer {
  /** The ALPN protocol each TLS connection negotiated, in order. */
  readonly alpn: string[] = [];
  /** HTTP/2 sessions opened; HTTP/1.1 connections open none. */
  h2Sessions = 0;
  /** Requests seen, by method and path (no query). */
  readonly requests: string[] = [];
  /** Concurrently open TLS connections, at most. */
  maxOpenConnections = 0;
  readonly kubeconfigPath: string;
  readonly #dir: string;
  readonly #front: Server;
  readonly #tls: Http2SecureServer;
  readonly #sockets = new Set<Socket>();
  readonly #held: Socket[] = [];
  readonly #open = new Set<Http2ServerResponse>();
  readonly #options: Required<Omit<StartingApiServerOptions, "settings">>;
  #phase: Phase = "ready";
  #openConnections = 0;

  private constructor(dir: string, front: Server, tls: Http2SecureServer, options: Required<Omit<StartingApiServerOptions, "settings">>) {
    this.#dir = dir;
    this.#front = front;
    this.#tls = tls;
    this.#options = options;
    this.kubeconfigPath = join(dir, "kubeconfig.yaml");
  }

  static async start(options: StartingApiServerOptions = {}): Promise<StartingApiServer> {
    const dir = mkdtempSync(join(tmpdir(), "starting-api-server-"));
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")],
      { stdio: "ignore" },
    );
    const cert = readFileSync(join(dir, "cert.pem"));
    const tls = createSecureServer({ key: readFileSync(join(dir, "key.pem")), cert, allowHTTP1: true, settings: options.settings ?? { initialWindowSize: 16 } });
    // Paused until handed to TLS: a held connection keeps its ClientHello in the kernel, as a stalled server does.
    const front = createServer({ pauseOnConnect: true });
    const server = new StartingApiServer(dir, front, tls, { unreadMs: options.unreadMs ?? 500, answerDelayMs: options.answerDelayMs ?? 0 });
    server.#wire();
    await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
    const port = (front.address() as { port: number }).port;
    writeFileSync(server.kubeconfigPath, kubeconfig(`https://127.0.0.1:${port}`, cert));
    return server;
  }

  set phase(phase: Phase) {
    this.#phase = phase;
    if (phase !== "hold-tls") for (const socket of this.#held.splice(0)) this.#tls.emit("connection", socket);
  }

  /** The API server process dies (every connection reset) and starts again, holding TLS. */
  restart(): void {
    this.phase = "hold-tls";
    for (const res of this.#open) res.destroy();
    for (const socket of this.#sockets) socket.destroy();
  }

  async close(): Promise<void> {
    for (const res of this.#open) res.destroy();
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#front.close(() => resolve()));
    this.#tls.close();
    rmSync(this.#dir, { recursive: true, force: true });
  }

  #wire(): void {
    this.#front.on("connection", (socket) => {
      this.#sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => this.#sockets.delete(socket));
      if (this.#phase === "hold-tls") this.#held.push(socket);
      else this.#tls.emit("connection", socket);
    });
    this.#tls.on("secureConnection", (socket: TLSSocket) => {
      this.alpn.push(socket.alpnProtocol || "none");
      this.#openConnections++;
      this.maxOpenConnections = Math.max(this.maxOpenConnections, this.#openConnections);
      socket.on("close", () => this.#openConnections--);
    });
    this.#tls.on("session", (session) => {
      this.h2Sessions++;
      session.on("error", () => {});
    });
    this.#tls.on("request", (req: Http2ServerRequest, res: Http2ServerResponse) => {
      req.on("error", () => {});
      res.on("error", () => {});
      this.#open.add(res);
      res.on("close", () => this.#open.delete(res));
      this.requests.push(`${req.method} ${(req.url ?? "").split("?")[0]}`);
      if (this.#phase !== "unread") return this.#readThenAnswer(req, res);
      req.pause();
      setTimeout(() => this.#readThenAnswer(req, res), this.#options.unreadMs);
    });
  }

  #readThenAnswer(req: Http2ServerRequest, res: Http2ServerResponse): void {
    req.resume();
    req.on("end", () => {
      if (this.#options.answerDelayMs > 0) setTimeout(() => this.#answer(req, res), this.#options.answerDelayMs);
      else this.#answer(req, res);
    });
  }

  #answer(req: Http2ServerRequest, res: Http2ServerResponse): void {
    if (res.destroyed || res.writableEnded) return;
    const url = new URL(req.url ?? "/", "https://fake");
    const ready = this.#phase === "ready";
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method === "POST" && url.pathname.endsWith("/subjectaccessreviews")) {
      return json(201, { apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", status: { allowed: ready } });
    }
    if (req.method === "POST" && url.pathname.endsWith("/token")) {
      return json(201, { kind: "TokenRequest", status: { token: "fake-token", expirationTimestamp: new Date(Date.now() + 600_000).toISOString() } });
    }
    if (url.searchParams.get("watch") === "true") {
      if (!ready) return json(429, { kind: "Status", code: 429, reason: "TooManyRequests", message: "storage is (re)initializing" });
      res.writeHead(200, { "content-type": "application/json" });
      res.write(`${JSON.stringify({ type: "ADDED", object: { apiVersion: "x/v1", kind: "Thing", metadata: { name: "a", resourceVersion: "2" } } })}\n`);
      return;
    }
    if (req.method === "GET") {
      if (!ready) return json(403, { kind: "Status", code: 403, reason: "Forbidden" });
      return json(200, { apiVersion: "x/v1", kind: "ThingList", items: [], metadata: { resourceVersion: "1" } });
    }
    json(404, { kind: "Status", code: 404 });
  }
}

function kubeconfig(server: string, ca: Buffer): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "fake", cluster: { server, "certificate-authority-data": ca.toString("base64") } }],
    users: [{ name: "portcullis", user: { token: "fake-portcullis-token" } }],
    contexts: [{ name: "fake", context: { cluster: "fake", user: "portcullis" } }],
    "current-context": "fake",
  });
}
