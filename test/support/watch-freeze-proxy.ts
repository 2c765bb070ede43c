/**
 * A TCP proxy (node:net) in front of an API server that can hang the watch streams open through it
 * while new connections keep working: the failure a watch cannot tell from a quiet cluster — the
 * connection stays up, no RST, no FIN, the bytes just stop.
 *
 * The bytes are TLS, so the proxy cannot read which connection carries a watch. freezeOpen() freezes
 * every connection open at that moment: from then on the server's bytes are held (nothing reaches
 * the client, nothing is closed). A frozen connection on which the client writes again was an idle
 * keep-alive connection being reused for a new request (a watch's client never writes after its
 * request: portcullis's pool speaks HTTP/1.1 without pipelining, clusters.ts), so it thaws at once
 * and carries that request normally. Only the streams that were open and stay silent client-side —
 * the watches, and a call that was waiting for its answer at the freeze (it times out) — stay hung.
 * thawAll() releases what was held, in order, and forwards again.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export interface WatchFreezeProxy {
  readonly port: number;
  /** Freezes every connection open now; returns how many. */
  freezeOpen(): number;
  /** Connections hung now. */
  frozen(): number;
  /** Delivers what frozen connections held and forwards their bytes again. */
  thawAll(): void;
  /** Connections thawAll() found still frozen, summed over every thaw: the streams a cut really hung. */
  stayedHung(): number;
  stop(): Promise<void>;
}

interface Piped {
  readonly client: Socket;
  readonly upstream: Socket;
  frozen: boolean;
  /** Server bytes held while frozen, and whether the server closed its side meanwhile. */
  held: Buffer[];
  upstreamEnded: boolean;
}

export async function startWatchFreezeProxy(target: { host: string; port: number }): Promise<WatchFreezeProxy> {
  const open = new Set<Piped>();
  let stayedHung = 0;

  const thaw = (p: Piped) => {
    if (!p.frozen) return;
    p.frozen = false;
    for (const chunk of p.held) p.client.write(chunk);
    p.held = [];
    if (p.upstreamEnded) p.client.end();
  };

  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true });
    const p: Piped = { client, upstream, frozen: false, held: [], upstreamEnded: false };
    open.add(p);
    upstream.on("data", (chunk: Buffer) => (p.frozen ? p.held.push(chunk) : client.write(chunk)));
    upstream.on("end", () => (p.frozen ? (p.upstreamEnded = true) : client.end()));
    client.on("data", (chunk: Buffer) => {
      // A client writing on a frozen connection reuses an idle one for a new request: not a watch.
      thaw(p);
      upstream.write(chunk);
    });
    client.on("end", () => upstream.end());
    const gone = () => {
      open.delete(p);
      upstream.destroy();
    };
    client.on("close", gone);
    client.on("error", () => client.destroy());
    // A hung connection stays open from the client's side even when the server goes away.
    const upstreamGone = () => (p.frozen ? (p.upstreamEnded = true) : client.end());
    upstream.on("close", upstreamGone);
    upstream.on("error", upstreamGone);
  });
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("watch freeze proxy has no port");

  return {
    port: address.port,
    freezeOpen() {
      for (const p of open) p.frozen = true;
      return open.size;
    },
    frozen: () => [...open].filter((p) => p.frozen).length,
    thawAll() {
      for (const p of [...open]) {
        if (p.frozen) stayedHung += 1;
        thaw(p);
      }
    },
    stayedHung: () => stayedHung,
    async stop() {
      for (const p of open) {
        p.client.destroy();
        p.upstream.destroy();
      }
      open.clear();
      await new Promise<void>((resolveClose) => server.close(() => resolveClose()));
    },
  };
}
