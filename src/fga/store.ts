/**
 * Which OpenFGA store the gate asks. A deployment names it by id, or by name: an OpenFGA whose
 * datastore is in memory comes back from a restart with the store re-created, and re-seeded, under
 * a new id. A name is looked up with ListStores at start, again whenever the id stops answering,
 * and every `refreshMs` in the background: OpenFGA keeps answering Checks for a store deleted through
 * its API, from the deleted store's tuples, so only the name says which store is meant now. Lookups
 * are coalesced (one ListStores in flight) and at most one per `minIntervalMs`. While no id is known
 * the gate cannot ask, and a check is a 503 — never an allow.
 */
import { FgaApiNotFoundError, FgaApiValidationError, type OpenFgaClient } from "@openfga/sdk";
import { LRUCache } from "lru-cache";
import type { Logger } from "pino";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";

export type StoreRef = { readonly id: string } | { readonly name: string };

/** The `openfga` configuration's store keys, of which the schema admits exactly one. */
export function storeRef(config: { readonly storeId?: string | undefined; readonly storeName?: string | undefined }): StoreRef {
  if (config.storeName !== undefined) return { name: config.storeName };
  if (config.storeId !== undefined) return { id: config.storeId };
  throw new TypeError("openfga: expected storeId or storeName");
}

/**
 * OpenFGA's answers when a request names a store that is not there (any more): 404 for most
 * endpoints; Check answers 400 about the store's model, since a missing store has none.
 */
const STORE_GONE_CODES: ReadonlySet<string> = new Set([
  "store_id_not_found",
  "latest_authorization_model_not_found",
  "authorization_model_not_found",
]);

export function isStoreGone(err: unknown): boolean {
  if (err instanceof FgaApiNotFoundError) return true;
  return err instanceof FgaApiValidationError && STORE_GONE_CODES.has(String(err.apiErrorCode));
}

export interface StoreLookupOptions {
  readonly timeoutMs: number;
  /** Fewest milliseconds between two ListStores calls, so a gone store cannot turn load into lookups. */
  readonly minIntervalMs: number;
  /** Look the name up again after this long, answering from the known id meanwhile. */
  readonly refreshMs: number;
  readonly logger?: Logger;
}

export class OpenFgaStore {
  readonly #ref: StoreRef;
  /** Holds the one resolved id under the store's name; fetch() coalesces concurrent lookups. */
  readonly #resolved: LRUCache<string, string>;
  #lastLookupAt = Number.NEGATIVE_INFINITY;

  constructor(ref: StoreRef, client: Pick<OpenFgaClient, "listStores">, options: StoreLookupOptions) {
    this.#ref = ref;
    this.#resolved = new LRUCache<string, string>({
      max: 1,
      ttl: options.refreshMs,
      // A stale id keeps answering while the refresh runs; a refresh that fails drops it (503 until found).
      allowStale: true,
      fetchMethod: async (name) => {
        const now = performance.now();
        if (now - this.#lastLookupAt < options.minIntervalMs) {
          throw new DependencyUnavailable("openfga", `store "${name}" unresolved; next lookup in at most ${options.minIntervalMs} ms`);
        }
        this.#lastLookupAt = now;
        try {
          const id = await withDeadline("openfga", options.timeoutMs, async () => idOfStoreNamed(name, (await client.listStores({ name })).stores));
          options.logger?.info({ store_name: name, store_id: id }, "OpenFGA store resolved by name");
          return id;
        } catch (err) {
          options.logger?.warn({ store_name: name, err }, "OpenFGA store lookup by name failed; checks answer 503 until it succeeds");
          throw err;
        }
      },
    });
  }

  /** The id known right now, without waiting; undefined while a name is unresolved. */
  current(): string | undefined {
    return "id" in this.#ref ? this.#ref.id : this.#resolved.get(this.#ref.name, { allowStale: false, noDeleteOnStaleGet: true });
  }

  /** Which store checks go to right now, in words, for /readyz?verbose (ids and names are not secrets). */
  describe(): { name: string; ok: boolean; state: string } {
    const id = this.current();
    if ("id" in this.#ref) return { name: "openfga store", ok: true, state: `${this.#ref.id} (configured by id)` };
    if (id === undefined) return { name: "openfga store", ok: false, state: `name "${this.#ref.name}" unresolved: checks that need OpenFGA answer 503` };
    return { name: "openfga store", ok: true, state: `${id} (resolved by name "${this.#ref.name}")` };
  }

  /** The store's id, looking its name up when no id is known. Throws DependencyUnavailable when it cannot. */
  async id(): Promise<string> {
    if ("id" in this.#ref) return this.#ref.id;
    const id = await this.#resolved.fetch(this.#ref.name);
    if (id === undefined) throw new DependencyUnavailable("openfga", `store "${this.#ref.name}" unresolved`);
    return id;
  }

  /**
   * `id` stopped answering: the next check looks the name up again. Only that id is dropped, so a
   * late answer from the old store cannot discard an id resolved since.
   */
  forget(id: string): void {
    if ("name" in this.#ref && this.#resolved.peek(this.#ref.name) === id) this.#resolved.delete(this.#ref.name);
  }

  /** Resolves a name at start, so the first checks need not wait; a failure is logged and retried by checks. */
  resolveInBackground(): void {
    if ("name" in this.#ref) this.id().catch(() => {});
  }
}

/** Exactly one store of that name; none, or several (which one is meant?), leaves the name unresolved. */
export function idOfStoreNamed(name: string, stores: ReadonlyArray<{ id: string; name: string }>): string {
  const named = stores.filter((s) => s.name === name);
  if (named.length === 1) return named[0]!.id;
  throw new DependencyUnavailable("openfga", named.length === 0 ? `no store named "${name}"` : `${named.length} stores named "${name}"`);
}
