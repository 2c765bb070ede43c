/**
 * KeyTags (issue 47): the short tags cache keys carry in place of cluster and store ids. A tag must
 * stand for one id only, ever — after retire() and after the bound took it back too — or a key made
 * for one cluster could be read for another; and it must hold no key separator.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { KeyTags } from "../../src/cache/key-tags.ts";

describe("KeyTags", () => {
  it("the same tag for an id while it holds one, another id another tag", () => {
    const tags = new KeyTags(10);
    const a = tags.tagOf("0e0e0e0e-0000-4000-8000-0000000000c1");
    expect(tags.tagOf("0e0e0e0e-0000-4000-8000-0000000000c1")).toBe(a);
    expect(tags.tagOf("0e0e0e0e-0000-4000-8000-0000000000c2")).not.toBe(a);
    expect(tags.tagOf("0e0e0e0e-0000-4000-8000-0000000000c1")).toBe(a);
  });

  it("a retired id gets a new tag, and its old one goes to no one", () => {
    const tags = new KeyTags(10);
    const first = tags.tagOf("c1");
    expect(tags.retire("c1")).toBe(first);
    expect(tags.retire("c1")).toBeUndefined();
    const others = ["c2", "c3", "c1"].map((id) => tags.tagOf(id));
    expect(others).not.toContain(first);
    expect(new Set(others).size).toBe(3);
  });

  it("bounded: past `max` ids the oldest loses its tag, which is not given again", () => {
    const tags = new KeyTags(2);
    const a = tags.tagOf("a");
    const b = tags.tagOf("b");
    const c = tags.tagOf("c");
    expect(tags.tagOf("b")).toBe(b);
    expect(tags.tagOf("c")).toBe(c);
    const again = tags.tagOf("a");
    expect([b, c]).not.toContain(a);
    expect([a, b, c]).not.toContain(again);
  });

  it("a tag never stands for two ids, whatever the order of tagging, retiring and the bound (generated)", () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant("tag" as const), id: fc.constantFrom("a", "b", "c", "d", "e", "a b", "a/", "") }),
      fc.record({ kind: fc.constant("retire" as const), id: fc.constantFrom("a", "b", "c", "d", "e", "a b", "a/", "") }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(op, { maxLength: 60 }), (max, ops) => {
        const tags = new KeyTags(max);
        const owner = new Map<string, string>();
        for (const o of ops) {
          if (o.kind === "retire") {
            tags.retire(o.id);
            continue;
          }
          const tag = tags.tagOf(o.id);
          expect(tag).toMatch(/^[0-9a-z]+$/);
          expect(owner.get(tag) ?? o.id).toBe(o.id);
          owner.set(tag, o.id);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});
