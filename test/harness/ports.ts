import { createServer } from "node:net";

/**
 * Asks the kernel for a free TCP port on 127.0.0.1. The port is released
 * before the caller binds it, so another process could take it in between;
 * ephemeral ports are handed out in rotation, which makes that rare enough
 * for tests.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") {
        server.close();
        reject(new Error(`unexpected listen address ${String(address)}`));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}
