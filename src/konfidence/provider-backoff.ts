/**
 * Failure backoff per OIDC provider. A fetch that fails (discovery or JWKS: unreachable, slow,
 * an error status, a body that is not a usable document) is not cached by lru-cache or jose, so
 * without this every check needing the provider would fetch again. After a failure, fetches to that
 * provider are refused for a pause — `initialMs`, doubled by each further failure up to `maxMs` —
 * and the checks needing them answer 503 at once; one fetch that succeeds ends the pause and resets
 * the doubling. Keys and documents already cached keep serving: only fetches are refused.
 *
 * Concurrent checks share one fetch (lru-cache and jose coalesce them), so they all see its
 * failure: a failure is charged once per admitted fetch, not once per check that saw it.
 */
import { LRUCache } from "lru-cache";
import { OIDC_PROVIDER } from "./provider-http.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { publishProviderBackoff, publishProviderFetchRefused } from "../metrics/events.ts";

export interface ProviderBackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Milliseconds since the epoch. */
  readonly now: () => number;
}

interface ProviderState {
  /** Fetches admitted so far. */
  admitted: number;
  /** `admitted` when the last failure was charged: each admitted fetch is charged at most once. */
  charged: number;
  /** Failures since the last success. */
  failures: number;
  /** No fetch is admitted before this. */
  until: number;
}

/** Providers tracked at once; as many as the verifier keeps. */
const MAX_TRACKED = 1_000;

/** The pause after `failures` consecutive failures (≥ 1): initial · 2^(failures − 1), at most max. */
export function backoffDelayMs(failures: number, initialMs: number, maxMs: number): number {
  return Math.min(maxMs, initialMs * 2 ** Math.min(failures - 1, 52));
}

export class ProviderBackoff {
  readonly #options: ProviderBackoffOptions;
  readonly #states = new LRUCache<string, ProviderState>({ max: MAX_TRACKED });

  constructor(options: ProviderBackoffOptions) {
    this.#options = options;
  }

  /**
   * Runs `call`, which may admit fetches to `provider` (through `admit`), and charges its outcome
   * to the provider: a DependencyUnavailable after an admitted fetch is a failure; anything else
   * after an admitted fetch is a success (a token-caused error means the provider answered). A call
   * that admitted no fetch (answered from cache, or refused) changes nothing.
   */
  async run<T>(provider: string, call: () => Promise<T>): Promise<T> {
    const before = this.#states.get(provider)?.admitted ?? 0;
    try {
      const value = await call();
      this.#succeeded(provider, before);
      return value;
    } catch (err) {
      if (err instanceof DependencyUnavailable) this.#failed(provider, before);
      else this.#succeeded(provider, before);
      throw err;
    }
  }

  /** Called right before each fetch to `provider`; throws DependencyUnavailable while it is paused. */
  admit(provider: string): void {
    const state = this.#states.get(provider);
    if (state === undefined) {
      this.#states.set(provider, { admitted: 1, charged: 0, failures: 0, until: 0 });
      return;
    }
    if (this.#options.now() < state.until) {
      publishProviderFetchRefused(provider);
      throw new DependencyUnavailable(OIDC_PROVIDER, "backing off after a failed fetch");
    }
    state.admitted++;
  }

  #failed(provider: string, before: number): void {
    const state = this.#states.get(provider);
    if (state === undefined || state.admitted <= before || state.charged === state.admitted) return;
    state.charged = state.admitted;
    state.failures++;
    const delay = backoffDelayMs(state.failures, this.#options.initialMs, this.#options.maxMs);
    state.until = this.#options.now() + delay;
    publishProviderBackoff(provider, delay / 1000);
  }

  #succeeded(provider: string, before: number): void {
    const state = this.#states.get(provider);
    if (state === undefined || state.admitted <= before || state.failures === 0) return;
    // Kept, not deleted: `admitted` must keep counting for calls still in flight.
    state.failures = 0;
    state.until = 0;
    publishProviderBackoff(provider, 0);
  }
}
