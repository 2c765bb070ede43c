/**
 * When the idle GC collects (src/server/idle-gc.ts): quiet for the whole period, nothing in flight,
 * and the committed heap grown by IDLE_GC_MIN_GROWTH_BYTES since the last one. The collection
 * itself, in a real portcullis with the shipped flags: test/server/idle-gc.process.test.ts.
 */
import { describe, expect, it } from "vitest";
import { NODE_FLAGS } from "../../src/cli/node-flags.ts";
import { IDLE_GC_MIN_GROWTH_BYTES, idleGcDue, type IdleGcState } from "../../src/server/idle-gc.ts";

const MiB = 2 ** 20;
const QUIET_MS = 30_000;
const grown: IdleGcState = { quietForMs: QUIET_MS, checksInFlight: 0, committedBytes: 120 * MiB, committedAfterLastGcBytes: 100 * MiB };

describe("idleGcDue", () => {
  const cases: Array<[string, Partial<IdleGcState>, boolean]> = [
    ["quiet for exactly the period, nothing in flight, grown 20 MiB", {}, true],
    ["the first time: grown from nothing", { committedAfterLastGcBytes: 0 }, true],
    ["a Check arrived 1 ms too recently", { quietForMs: QUIET_MS - 1 }, false],
    ["just started, nothing arrived yet (quiet counted from start)", { quietForMs: 0, committedAfterLastGcBytes: 0 }, false],
    ["a Check still in flight (waiting on OpenFGA)", { checksInFlight: 1 }, false],
    ["grown by exactly the minimum", { committedBytes: 100 * MiB + IDLE_GC_MIN_GROWTH_BYTES }, true],
    ["grown by a byte less than the minimum", { committedBytes: 100 * MiB + IDLE_GC_MIN_GROWTH_BYTES - 1 }, false],
    ["unchanged since the last one: never twice in one quiet spell", { committedBytes: 100 * MiB, quietForMs: 10 * QUIET_MS }, false],
    ["smaller than the last one left it (V8 shrank it itself)", { committedBytes: 90 * MiB }, false],
    ["quiet for hours but grown by less than the minimum", { quietForMs: 3_600_000, committedBytes: 104 * MiB }, false],
  ];
  it.each(cases)("%s", (_, change, due) => {
    expect(idleGcDue({ ...grown, ...change }, QUIET_MS)).toBe(due);
  });

  it("the minimum growth is one young-generation semi-space, as the shipped flags size it", () => {
    const semiSpace = NODE_FLAGS.find((f) => f.startsWith("--max-semi-space-size="));
    expect(IDLE_GC_MIN_GROWTH_BYTES).toBe(Number(semiSpace!.split("=")[1]) * MiB);
  });
});
