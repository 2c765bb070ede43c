/**
 * Who owns a name (or a uid) among the objects a watch holds: the one object that claims it, or
 * none while several do. Order never decides ownership: an index that gives a name to the first
 * (or the last) object it heard under it answers differently on two replicas that heard the same
 * objects in another order — one from a watch event, the other from a list sorted by name — and an
 * object a tenant may create could take a name from the object that had it. Here the answer is a
 * function of the set of objects held now: a contested name is served by none of its claimants
 * until only one is left. SoleClaims is pure; objects are told apart by their watch key (watchKey).
 */
import type { Logger } from "pino";

/** A value claimed by more than one object, for the report: the objects' watch keys, sorted. */
export interface ContestedClaim {
  readonly value: string;
  readonly objects: readonly string[];
}

export class SoleClaims {
  /** value → the one key claiming it, or the keys of a contest (a Set only then: one string per value otherwise). */
  readonly #claimants = new Map<string, string | Set<string>>();
  #contested = 0;

  /** How many values more than one object claims now. */
  get contested(): number {
    return this.#contested;
  }

  /** `key` claims `value`. Returns the contest when the value is claimed by more than one object now. */
  claim(value: string, key: string): ContestedClaim | undefined {
    const held = this.#claimants.get(value);
    if (held === undefined || held === key) {
      this.#claimants.set(value, key);
      return undefined;
    }
    let keys = held;
    if (typeof keys === "string") {
      keys = new Set([keys]);
      this.#claimants.set(value, keys);
      this.#contested++;
    }
    keys.add(key);
    return { value, objects: [...keys].sort() };
  }

  release(value: string, key: string): void {
    const held = this.#claimants.get(value);
    if (held === key) this.#claimants.delete(value);
    else if (typeof held === "object" && held.delete(key) && held.size === 1) {
      this.#claimants.set(value, held.values().next().value!);
      this.#contested--;
    }
  }

  /** The watch key of the one object claiming `value`; undefined when none or several do. */
  owner(value: string): string | undefined {
    const held = this.#claimants.get(value);
    return typeof held === "string" ? held : undefined;
  }

  clear(): void {
    this.#claimants.clear();
    this.#contested = 0;
  }
}

/**
 * How ListWatch tells objects apart (its cache key: the namespace, or none, and the name), written
 * as kubectl names an object: `name`, or `namespace/name` for a namespaced one. Names carry no `/`,
 * so the two forms never meet.
 */
export function watchKey(metadata: { readonly namespace?: string | undefined; readonly name?: string | undefined } | undefined): string {
  const name = metadata?.name ?? "";
  return metadata?.namespace ? `${metadata.namespace}/${name}` : name;
}

/** A contest, loud: one error line naming the claimed value and every object claiming it (never their content). */
export function logContested(logger: Logger, fields: { readonly index: string; readonly clusterId: string; readonly claim: string }, contest: ContestedClaim): void {
  logger.error(
    { index: fields.index, cluster_id: fields.clusterId, claim: fields.claim, value: contest.value, objects: contest.objects },
    `${fields.index}: a ${fields.claim} claimed by more than one object; none of them is served until one is left`,
  );
}
