/**
 * A TCP proxy (node:net) in front of an API server that can stall it: while stalled, every byte the
 * server sends — on connections open then and on any opened meanwhile — is held, nothing is closed,
 * no RST, no FIN. The failure a watch cannot tell from a quiet cluster. resume() delivers what was
 * held, in order, and forwards again. The bytes are TLS; the server's certificate names 127.0.0.1,
 * which the proxy also listens on.
 *
 * It can also throttle the server's bytes to a rate per connection (a slow reading side): it reads
 * from the server only as fast as it passes bytes on, so the server's writes block once the sockets'
 * buffers are full — the backpressure a slow watch client puts on kube-apiserver.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export interface StallProxy {
  readonly port: number;
  stall(): void;
  resume(): void;
  /** Passes the server's bytes at most this fast on each connection; undefined: at full speed again. */
  throttle(bytesPerSecond: number | undefined): void;
  stop(): Promise<void>;
}

/** How often a throttled connection passes its share of bytes. */
const TICK_MS = 10;
/** Bytes a throttled connection holds before it stops reading from the server. */
const THROTTLE_HELD_MAX = 64 * 1024;

interface Pipe {
  readonly client: Socket;
  readonly upstream: Socket;
  /** What the server sent and the client has not been given yet, in order. */
  chunks: Buffer[];
  held: number;
  /** The server ended its side: end the client's once everything held is given. */
  ended: boolean;
}

export async function startStallProxy(target: { host: string; port: number }): Promise<StallProxy> {
  let stalled = false;
  let rate: number | undefined;
  let ticker: NodeJS.Timeout | undefined;
  const pipes = new Set<Pipe>();
  /** Gives the client up to `budget` bytes of what is held (all of it when undefined). */
  const pass = (pipe: Pipe, budget = Number.POSITIVE_INFINITY) => {
    while (pipe.chunks.length > 0 && budget > 0) {
      const chunk = pipe.chunks[0]!;
      const part = chunk.length <= budget ? chunk : chunk.subarray(0, budget);
      pipe.client.write(part);
      budget -= part.length;
      pipe.held -= part.length;
      if (part.length === chunk.length) pipe.chunks.shift();
      else pipe.chunks[0] = chunk.subarray(part.length);
    }
    if (pipe.chunks.length === 0 && pipe.ended) pipe.client.end();
    if (pipe.held < THROTTLE_HELD_MAX && pipe.upstream.isPaused()) pipe.upstream.resume();
  };
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true });
    const pipe: Pipe = { client, upstream, chunks: [], held: 0, ended: false };
    pipes.add(pipe);
    upstream.on("data", (chunk: Buffer) => {
      if (!stalled && rate === undefined && pipe.held === 0) {
        client.write(chunk);
        return;
      }
      pipe.chunks.push(chunk);
      pipe.held += chunk.length;
      if (!stalled && rate !== undefined && pipe.held >= THROTTLE_HELD_MAX) upstream.pause();
    });
    const upstreamEnded = () => {
      pipe.ended = true;
      if (pipe.held === 0 && !stalled) client.end();
    };
    upstream.on("end", upstreamEnded);
    upstream.on("error", upstreamEnded);
    client.on("data", (chunk: Buffer) => upstream.write(chunk));
    client.on("end", () => upstream.end());
    client.on("error", () => client.destroy());
    client.on("close", () => {
      pipes.delete(pipe);
      upstream.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("stall proxy has no port");
  return {
    port: address.port,
    stall: () => {
      stalled = true;
    },
    resume: () => {
      stalled = false;
      if (rate === undefined) for (const pipe of pipes) pass(pipe);
    },
    throttle: (bytesPerSecond) => {
      rate = bytesPerSecond;
      clearInterval(ticker);
      ticker = undefined;
      if (bytesPerSecond === undefined) {
        if (!stalled) for (const pipe of pipes) pass(pipe);
        return;
      }
      const budget = Math.max(1, Math.floor((bytesPerSecond * TICK_MS) / 1_000));
      ticker = setInterval(() => {
        if (!stalled) for (const pipe of pipes) pass(pipe, budget);
      }, TICK_MS);
    },
    stop: async () => {
      clearInterval(ticker);
      for (const { client, upstream } of pipes) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
