/**
 * A TCP proxy (node:net) in front of an API server that can stall it: while stalled, every byte the
 * server sends — on connections open then and on any opened meanwhile — is held, nothing is closed,
 * no RST, no FIN. The failure a watch cannot tell from a quiet cluster. resume() delivers what was
 * held, in order, and forwards again. The bytes are TLS; the server's certificate names 127.0.0.1,
 * which the proxy also listens on.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export interface StallProxy {
  readonly port: number;
  stall(): void;
  resume(): void;
  stop(): Promise<void>;
}

export async function startStallProxy(target: { host: string; port: number }): Promise<StallProxy> {
  let stalled = false;
  const held = new Map<Socket, { chunks: Buffer[]; ended: boolean }>();
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  const release = (client: Socket) => {
    const h = held.get(client);
    if (h === undefined) return;
    for (const chunk of h.chunks) client.write(chunk);
    h.chunks = [];
    if (h.ended) client.end();
  };
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true });
    const pair = { client, upstream };
    pairs.add(pair);
    held.set(client, { chunks: [], ended: false });
    upstream.on("data", (chunk: Buffer) => (stalled ? held.get(client)?.chunks.push(chunk) : client.write(chunk)));
    const upstreamEnded = () => {
      const h = held.get(client);
      if (stalled && h !== undefined) h.ended = true;
      else client.end();
    };
    upstream.on("end", upstreamEnded);
    upstream.on("error", upstreamEnded);
    client.on("data", (chunk: Buffer) => upstream.write(chunk));
    client.on("end", () => upstream.end());
    client.on("error", () => client.destroy());
    client.on("close", () => {
      pairs.delete(pair);
      held.delete(client);
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
      for (const client of held.keys()) release(client);
    },
    stop: async () => {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
