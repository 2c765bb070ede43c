/**
 * Gives the heap back when the server goes quiet. V8 keeps the pages its heap grew into: after the
 * benchmark's fill (100,000 cold checks) a full GC leaves 178 MB committed for 105 MB live (RSS 286
 * MiB), and V8's own memory reducer, which arms only after a full GC that shrank the heap, never ran
 * again: RSS went 299 → 328 MiB over the next two idle minutes. One memory-reducing collection (V8's
 * "last resort" GC: it compacts, shrinks the young generation to its minimum and releases pooled
 * pages) brought that process to 107 MB committed and 199 MiB RSS (2026-12-03, bench/memory.ts).
 *
 * It stops the event loop while it runs: 140-150 ms with 10,000 installations indexed, 580 ms at
 * 105 MB live on the benchmark's one core. So it runs only when no Check has arrived for `quietMs`
 * and none is in flight, and only when the heap's committed size has grown by
 * IDLE_GC_MIN_GROWTH_BYTES since the last one left it (since start, the first time): once per quiet
 * spell that follows growth, never on a timer of its own, and never again for sparse checks that
 * grow nothing. Growth of the committed heap, not committed minus used: until a full GC has run,
 * "used" counts the garbage too. A Check that arrives during one waits for it, well inside Envoy's
 * 1 s ext_authz timeout and the watchdog's 5 s.
 *
 * The collection is V8's gc extension (`gc({ type: "major", flavor: "last-resort" })`), which Node
 * exposes with `--expose-gc` (src/cli/node-flags.ts ships it); without it this is off.
 */
import { getHeapStatistics } from "node:v8";
import type { Logger } from "pino";

/** Growth smaller than one of the young generation's 8 MiB semi-spaces is not worth a pause. */
export const IDLE_GC_MIN_GROWTH_BYTES = 8 * 2 ** 20;

export interface IdleGcState {
  /** Since the last Check arrived, or since the server started if none has. */
  readonly quietForMs: number;
  readonly checksInFlight: number;
  /** The V8 heap's committed size now (total_heap_size). */
  readonly committedBytes: number;
  /** Its committed size right after the last idle GC; 0 before the first. */
  readonly committedAfterLastGcBytes: number;
}

/** Whether to collect now: quiet long enough, nothing in flight, and grown since the last one. */
export function idleGcDue(state: IdleGcState, quietMs: number): boolean {
  return state.quietForMs >= quietMs && state.checksInFlight === 0 && state.committedBytes - state.committedAfterLastGcBytes >= IDLE_GC_MIN_GROWTH_BYTES;
}

/** What the server tells the idle GC about its Checks. */
export interface CheckActivity {
  /** Checks started since the server started. */
  readonly started: () => number;
  readonly inFlight: () => number;
}

type ExposedGc = (options: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void;

const MiB = (bytes: number) => Math.round((bytes / 2 ** 20) * 10) / 10;

/**
 * Looks every quarter of `quietMs` (at least every second) and collects when idleGcDue() says so.
 * Returns the stop function; the timer never keeps the process alive.
 */
export function startIdleGc(options: { readonly quietMs: number; readonly activity: CheckActivity; readonly logger: Logger }): () => void {
  const gc = (globalThis as { gc?: ExposedGc }).gc;
  if (typeof gc !== "function") {
    options.logger.warn({ setting: "idleGc" }, "idle GC off: Node was started without --expose-gc (npm start, the image and the Deployment run it with it)");
    return () => {};
  }
  let seen = options.activity.started();
  let lastCheckAt = performance.now();
  let committedAfterLastGc = 0;
  const timer = setInterval(
    () => {
      const now = performance.now();
      const started = options.activity.started();
      if (started !== seen) {
        seen = started;
        lastCheckAt = now;
      }
      const before = getHeapStatistics();
      const state = { quietForMs: now - lastCheckAt, checksInFlight: options.activity.inFlight(), committedBytes: before.total_heap_size, committedAfterLastGcBytes: committedAfterLastGc };
      if (!idleGcDue(state, options.quietMs)) return;
      gc({ type: "major", execution: "sync", flavor: "last-resort" });
      const pauseMs = performance.now() - now;
      const after = getHeapStatistics();
      committedAfterLastGc = after.total_heap_size;
      options.logger.info(
        { quiet_ms: Math.round(state.quietForMs), pause_ms: Math.round(pauseMs), heap_committed_mib: [MiB(before.total_heap_size), MiB(after.total_heap_size)], heap_used_mib: [MiB(before.used_heap_size), MiB(after.used_heap_size)] },
        "quiet: memory-reducing GC gave heap back",
      );
    },
    Math.max(1_000, options.quietMs / 4),
  );
  timer.unref();
  return () => clearInterval(timer);
}
