/**
 * How many lists of the fleet's watched resources (every cluster's PluginInstallations) run at once
 * across the process.
 * A list is the expensive start of a watch: on a fresh pool it carries the TLS handshake, and its
 * answer is parsed whole. With 1,000 clusters starting (or reconnecting) together on a starved core,
 * every list began at once, all of them hit the list timeout together and all retried together
 * (bench/fleet.ts, issue 16: 3,015 lists and 59 s to sync 1,000 clusters at load average 20). A list
 * waiting here has not started: its deadline counts from when it gets a slot, and its index is
 * simply not synced yet. Watch streams are long-lived and cheap once open, so they are not counted.
 * The process's single indexes (the cluster registry, the Revocations, Konfidence's Projects) do
 * not queue here: each is one list, and behind a fleet of hung API servers the deny-list or the
 * registry would wait minutes.
 */

/**
 * Enough lists at once to keep the pipe full: on a starved core a list waits mostly on the other
 * end, so 1,000 clusters synced in 9.9 s with 64 and 11.9 s with 32 (bench/fleet.ts, load average
 * 5.5 and 3.3), every one with a single list. Few enough that the handshakes in flight finish well
 * within the list timeout even at load 20 (~50 lists/s there); and room for dozens of hung API
 * servers, each holding a slot for at most the list timeout, with slots left for everyone else.
 */
export const MAX_CONCURRENT_FLEET_LISTS = 64;

export interface ListSlotOptions {
  /** The deadline of the list, counted from when it gets a slot. */
  readonly timeoutMs: number;
  /** The list is no longer wanted: it leaves the queue, or is aborted if running. */
  readonly signal?: AbortSignal;
}

/** A counted FIFO queue of lists; a limit of Infinity never queues (the same deadline and abort). */
export class ListSlots {
  readonly #limit: number;
  #running = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(limit: number) {
    if (limit !== Number.POSITIVE_INFINITY && (!Number.isInteger(limit) || limit < 1)) throw new TypeError(`list slots: limit must be a positive integer or Infinity, got ${limit}`);
    this.#limit = limit;
  }

  /** Lists running now, and waiting for a slot (for tests and metrics). */
  get running(): number {
    return this.#running;
  }

  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * Runs `list` once a slot is free, in arrival order, with a signal that aborts `timeoutMs` after it
   * started or when `options.signal` does. The slot is freed when the list settles or at that
   * abort, whichever is first: a list that ignores its signal still holds a slot no longer than its
   * deadline.
   */
  async run<T>(list: (signal: AbortSignal) => Promise<T>, options: ListSlotOptions): Promise<T> {
    await this.#acquire(options.signal);
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(new DOMException(`list took longer than ${options.timeoutMs} ms`, "TimeoutError")), options.timeoutMs);
    const signal = options.signal === undefined ? deadline.signal : AbortSignal.any([deadline.signal, options.signal]);
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([list(signal), aborted]);
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort!);
      this.#release();
    }
  }

  #acquire(signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#running < this.#limit) {
      this.#running++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const at = this.#waiting.indexOf(take);
        if (at !== -1) this.#waiting.splice(at, 1);
        reject(signal!.reason);
      };
      // #release hands its slot over: the count stays as it is.
      const take = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(take);
    });
  }

  #release(): void {
    const next = this.#waiting.shift();
    if (next === undefined) this.#running--;
    else next();
  }
}

/** The one limiter every cluster's PluginInstallation index lists through, unless a test hands it its own. */
export const FLEET_LIST_SLOTS = new ListSlots(MAX_CONCURRENT_FLEET_LISTS);
