/**
 * The test harness's port picker: a port the kernel would never hand to an outgoing connection (below
 * the ephemeral range), free when picked.
 */
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { ephemeralPortStart, freePort } from "./ports.ts";

describe("freePort", () => {
  it("picks ports below the kernel's ephemeral range, each free when picked", async () => {
    const start = ephemeralPortStart();
    const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(20_000);
      expect(port).toBeLessThan(start);
    }
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(ports[0], "127.0.0.1", () => resolve());
    });
    server.close();
  });
});
