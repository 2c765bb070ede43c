import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { randomInt } from "node:crypto";

/** Linux's default net.ipv4.ip_local_port_range starts here; elsewhere the range is assumed to. */
const DEFAULT_EPHEMERAL_START = 32_768;
/** The lowest port handed out: above the well-known and common service ports. */
const LOWEST = 20_000;

/** Where the kernel starts picking the local ports of outgoing connections (and of listen(0)). */
export function ephemeralPortStart(): number {
  try {
    const start = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(start) && start > LOWEST ? start : DEFAULT_EPHEMERAL_START;
  } catch {
    return DEFAULT_EPHEMERAL_START;
  }
}

/**
 * A TCP port on 127.0.0.1 that was free when asked. The port is released before the caller binds
 * it, so it is picked at random below the kernel's ephemeral range: the local port of every outgoing
 * connection the tests make comes from that range (a kernel-chosen port was taken by one between
 * the pick and the bind: EADDRINUSE in CI), and two tests pick the same one only by chance.
 */
export async function freePort(): Promise<number> {
  const below = ephemeralPortStart();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = randomInt(LOWEST, below);
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port found in ${LOWEST}–${below - 1}`);
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}
