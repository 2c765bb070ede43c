/**
 * When a silent watch is listed again in place (src/kube-watch/watched-index.ts probeAfterMs): after the
 * bookmark kube-apiserver sends about every 61 s, so that a watch hearing them never lists again, and
 * 20 s before the silence bound, so that the list has its deadline and a slot's wait; with a bound
 * too short for both, at two thirds of it.
 */
import { describe, expect, it } from "vitest";
import { DEFAULT_WATCH_INACTIVITY_MS, probeAfterMs } from "../../src/kube-watch/watched-index.ts";

describe("probeAfterMs", () => {
  it.each([
    { bound: DEFAULT_WATCH_INACTIVITY_MS, probe: 70_000 },
    { bound: 150_000, probe: 130_000 },
    { bound: 86_400_000, probe: 86_380_000 },
    { bound: 81_251, probe: 61_251 },
    // Too short to wait out a bookmark and leave the list 20 s: two thirds.
    { bound: 81_250, probe: 54_166 },
    { bound: 60_000, probe: 40_000 },
    { bound: 1_000, probe: 666 },
  ])("bound $bound ms → probe after $probe ms", ({ bound, probe }) => {
    expect(probeAfterMs(bound)).toBe(probe);
  });

  it("the default bound's probe comes after the bookmark measured at 61.1 s, and leaves the list at least its 10 s deadline", () => {
    const probe = probeAfterMs(DEFAULT_WATCH_INACTIVITY_MS);
    expect(probe).toBeGreaterThan(61_100);
    expect(DEFAULT_WATCH_INACTIVITY_MS - probe).toBeGreaterThanOrEqual(10_000);
  });
});
