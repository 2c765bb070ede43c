/**
 * Short stand-ins for the long ids cache keys start with (issue 47: a cluster id is 36 characters
 * in every key that names it, a store id 26). A tag stands for one id only, ever: tags come from a
 * counter and are never given again, not after retire() nor after the table's bound took one back,
 * so a key made with a tag can only mean that id and equal keys stay equal questions. An id that
 * lost its tag gets a new one; the keys made with the old one are never asked again and leave the
 * cache as it evicts — a tag lost costs misses, never a wrong answer.
 *
 * Tags are base-36 numerals ([0-9a-z]+): no separator a key puts after one (" ", "/") occurs in
 * one, so one tag's prefix never selects another's keys.
 */
export class KeyTags {
  readonly #tags = new Map<string, string>();
  readonly #max: number;
  #next = 0;

  /** `max`: the most ids tagged at once; ids may come from requests (a URL's cluster id), so the table is bounded. */
  constructor(max: number) {
    this.#max = Math.max(1, max);
  }

  /** The id's tag, given now if it has none. */
  tagOf(id: string): string {
    const tag = this.#tags.get(id);
    if (tag !== undefined) return tag;
    // The oldest tag given goes first: pushing it out takes `max` new ids, which with the cache's
    // own bound as `max` would have evicted every entry under it anyway.
    if (this.#tags.size >= this.#max) this.#tags.delete(this.#tags.keys().next().value!);
    const given = (this.#next++).toString(36);
    this.#tags.set(id, given);
    return given;
  }

  /** Takes the id's tag away and returns it (undefined if it had none): no key made from now on carries it. */
  retire(id: string): string | undefined {
    const tag = this.#tags.get(id);
    this.#tags.delete(id);
    return tag;
  }
}
