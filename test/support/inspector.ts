/**
 * Runs an expression on a portcullis process's main thread through the Node inspector it was
 * started with (`--inspect=127.0.0.1:0`): how the watchdog tests block its event loop from outside,
 * which is how a loop stuck in native code looks from the watchdog: no timer runs, no signal
 * handler answers.
 */
import type { PortcullisProcess } from "./portcullis-process.ts";

/** Evaluates `expression` on the process's main thread; does not wait for its result. */
export async function evaluateInProcess(portcullis: PortcullisProcess, expression: string): Promise<void> {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(portcullis.stderr())?.[1];
  if (url === undefined) throw new Error(`no inspector URL on stderr: ${portcullis.stderr()}`);
  const socket = new WebSocket(url);
  await new Promise<void>((resolveOpen, reject) => {
    socket.addEventListener("open", () => resolveOpen(), { once: true });
    socket.addEventListener("error", () => reject(new Error("inspector connection failed")), { once: true });
  });
  socket.send(JSON.stringify({ id: 1, method: "Runtime.evaluate", params: { expression } }));
  // The evaluation may never return; the socket dies with the process.
  socket.addEventListener("error", () => {});
}
