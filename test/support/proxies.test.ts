/**
 * The two proxies test/e2e/freshness.test.ts cuts the event sources with: what they hold, what they
 * let through. A cut that let a watch through would make the "sources cut" figures meaningless.
 */
import { once } from "node:events";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { startOpenFgaChangesProxy } from "./openfga-changes-proxy.ts";
import { startWatchFreezeProxy } from "./watch-freeze-proxy.ts";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A TCP server that keeps its connections, so the test can write to each from the server's side. */
async function tcpServer(): Promise<{ port: number; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => {
    sockets.push(s);
    // Echo, prefixed, so a client's request gets an answer.
    s.on("data", (chunk: Buffer) => s.write(`echo:${chunk.toString()}`));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  cleanups.push(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return { port: (server.address() as { port: number }).port, sockets };
}

async function client(port: number): Promise<{ socket: Socket; received: () => string }> {
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  let received = "";
  socket.on("data", (c: Buffer) => (received += c.toString()));
  cleanups.push(() => void socket.destroy());
  return { socket, received: () => received };
}

describe("watch freeze proxy", () => {
  it("holds the server's bytes on connections open at the freeze, lets new ones through, thaws one its client writes on, delivers what it held", async () => {
    const upstream = await tcpServer();
    const proxy = await startWatchFreezeProxy({ host: "127.0.0.1", port: upstream.port });
    cleanups.push(() => proxy.stop());

    const watch = await client(proxy.port);
    const idle = await client(proxy.port);
    await sleep(50);
    const [watchUp, idleUp] = upstream.sockets;
    watchUp!.write("event-1;");
    await sleep(50);
    expect(watch.received()).toBe("event-1;");

    expect(proxy.freezeOpen()).toBe(2);
    watchUp!.write("event-2;");
    await sleep(100);
    expect(watch.received()).toBe("event-1;");

    // A new connection works while the old ones are hung.
    const fresh = await client(proxy.port);
    fresh.socket.write("list");
    await sleep(100);
    expect(fresh.received()).toBe("echo:list");

    // An idle connection reused for a request is not a watch: it thaws and is answered.
    idle.socket.write("review");
    await sleep(100);
    expect(idle.received()).toBe("echo:review");
    expect(idleUp).toBeDefined();
    expect(proxy.frozen()).toBe(1);

    // The server closing a hung connection is not seen either.
    watchUp!.end();
    await sleep(100);
    expect(watch.socket.readableEnded).toBe(false);

    proxy.thawAll();
    await sleep(100);
    expect(watch.received()).toBe("event-1;event-2;");
    expect(watch.socket.readableEnded).toBe(true);
    expect(proxy.stayedHung()).toBe(1);
  });
});

describe("OpenFGA changes proxy", () => {
  it("answers 500 on /stores/*/changes only while failing; everything else goes through", async () => {
    const server: HttpServer = createHttpServer((req, res) => res.end(`upstream ${req.method} ${req.url}`));
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    cleanups.push(() => void server.close());
    const proxy = await startOpenFgaChangesProxy(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
    cleanups.push(() => proxy.stop());

    const get = async (path: string, init?: RequestInit) => {
      const res = await fetch(`${proxy.url}${path}`, init);
      return `${res.status} ${await res.text()}`;
    };
    expect(await get("/stores/S1/changes?page_size=50")).toBe("200 upstream GET /stores/S1/changes?page_size=50");
    proxy.failChanges(true);
    expect(await get("/stores/S1/changes?page_size=50")).toMatch(/^500 /);
    expect(await get("/stores/S1/changes")).toMatch(/^500 /);
    expect(await get("/stores/S1/check", { method: "POST", body: "{}" })).toBe("200 upstream POST /stores/S1/check");
    expect(await get("/stores/S1/authorization-models")).toBe("200 upstream GET /stores/S1/authorization-models");
    expect(await get("/stores/S1/changesx")).toBe("200 upstream GET /stores/S1/changesx");
    expect(proxy.failed()).toBe(2);
    proxy.failChanges(false);
    expect(await get("/stores/S1/changes")).toBe("200 upstream GET /stores/S1/changes");
  });
});
