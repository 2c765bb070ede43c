/**
 * The watchdog: a small child process that ends portcullis when the main thread's event loop stops
 * answering. A loop stuck in native code (issue 12: an HTTP/2 send loop that never returned, while
 * memory grew outside the V8 heap) runs no JavaScript at all — no timer, no signal handler, no
 * SIGTERM — so nothing on the main thread can notice it. A restart is better than a frozen replica
 * that eats the node's memory: the Pod is restarted and Envoy's health checking moves traffic away.
 *
 * The main thread writes one byte down a pipe from a timer; the child, a bash loop, reads it with a
 * timeout and, when none has arrived for `timeoutMs`, writes one line to stderr (the main thread's
 * log stream cannot be flushed) and kills portcullis with SIGKILL (exit status 137 in a container):
 * a stuck main thread handles no gentler signal. A child process rather than a worker thread: a
 * worker is a V8 isolate and a Node bootstrap of its own, ~17 MiB of RSS to read a counter (`node
 * -e` with and without one: 46 → 65 MiB); bash waiting on a pipe is ~3.4 MiB, and shares no heap,
 * thread or event loop with what it watches. When portcullis ends, however it ends, the pipe closes
 * and the child exits on the end of its input: it never outlives the process or kills another one.
 * The process must not be its PID namespace's init (the Dockerfile runs it under tini).
 */
import { spawn } from "node:child_process";
import type { Logger } from "pino";

export interface WatchdogOptions {
  /** How long the event loop may go without answering. */
  readonly timeoutMs: number;
  readonly logger: Logger;
}

/**
 * `$1` the pid to kill, `$2` the timeout, `$3` how long one read waits (ms). The timeout is counted
 * as consecutive reads that waited in vain, not as time since the last byte: if the whole container
 * was frozen (the cgroup freezer, a suspended VM), the one read in progress may time out at once on
 * thawing, but the next hears the heartbeat again, so a pause of both is not taken for a stall.
 * `read` ends with a status above 128 on a timeout and 1 at the end of input (portcullis is gone).
 *
 * It ignores the signals a process group gets to stop or reload (a container runtime's or a
 * supervisor's SIGTERM, a terminal's SIGINT, SIGQUIT or SIGHUP), and SIGPIPE, which Node ignores:
 * they are portcullis's to act on.
 * Ended by them, it went unexpectedly and loudly at every clean shutdown, and a SIGHUP reload of the
 * group left portcullis serving unwatched; kept, it watches the shutdown too, and still ends with
 * portcullis's end of input. Its end is then never expected while portcullis lives: always an error.
 */
export const WATCHDOG_SCRIPT = String.raw`
LC_ALL=C
trap '' TERM INT QUIT HUP PIPE
pid=$1 timeout_ms=$2 wait_ms=$3
wait_s=$(printf '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000)))
missed=0
while :; do
  IFS= read -r -n 1 -t "$wait_s" _
  status=$?
  if (( status == 0 )); then missed=0; continue; fi
  (( status > 128 )) || exit 0
  missed=$((missed + 1))
  (( missed * wait_ms >= timeout_ms )) || continue
  IFS=. read -r seconds micros <<< "$EPOCHREALTIME"
  printf '{"level":60,"time":%d,"pid":%d,"msg":"event loop stalled; the watchdog is ending the process","stalled_ms":%d,"timeout_ms":%d}\n' \
    $((seconds * 1000 + 10#$micros / 1000)) "$pid" $((missed * wait_ms)) "$timeout_ms" >&2
  kill -KILL "$pid"
  exit 0
done
`;

/** The heartbeat's period and one read's wait: ten beats per timeout, four waits per timeout (each spans 2.5 beats). */
export function watchdogTimings(timeoutMs: number): { readonly intervalMs: number; readonly waitMs: number } {
  return { intervalMs: Math.max(50, Math.floor(timeoutMs / 10)), waitMs: Math.max(125, Math.floor(timeoutMs / 4)) };
}

export function startWatchdog(options: WatchdogOptions): void {
  const { intervalMs, waitMs } = watchdogTimings(options.timeoutMs);
  if (process.pid === 1) {
    // The kernel drops signals sent to a PID namespace's init from inside it unless init handles them, SIGKILL included.
    options.logger.warn("portcullis is its container's init (PID 1): the watchdog's kill would be ignored; run node under an init such as tini, as the image's ENTRYPOINT does");
  }
  // No startup file: bash takes a socket on its standard input (Node's pipe) for rshd and would
  // source ~/.bashrc and /etc/bash.bashrc. No environment but PATH: no BASH_ENV to source, and
  // none of portcullis's secrets in the child's /proc/<pid>/environ.
  const args = ["--norc", "--noprofile", "-c", WATCHDOG_SCRIPT, "portcullis-watchdog", String(process.pid), String(options.timeoutMs), String(waitMs)];
  const child = spawn("bash", args, { stdio: ["pipe", "ignore", "inherit"], env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin" } });
  const unwatched = (why: Record<string, unknown>) => {
    clearInterval(heartbeat);
    options.logger.error(why, "watchdog process ended; the event loop is no longer watched");
  };
  // A beat is written only when the last one has left: a child that stopped reading never makes the pipe's buffer grow.
  const heartbeat = setInterval(() => {
    if (child.stdin.writable && child.stdin.writableLength === 0) child.stdin.write(".");
  }, intervalMs).unref();
  child.on("error", (err) => unwatched({ err }));
  child.on("exit", (code, signal) => unwatched({ code, signal }));
  // EPIPE after the child ended is reported by its exit.
  child.stdin.on("error", () => {});
  // The watchdog never keeps a process alive that is otherwise done.
  child.unref();
}
