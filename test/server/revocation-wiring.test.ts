/**
 * The deny-list's wiring (FUN-17 §10): without a `revocations` section there is none (the operator's
 * documented choice, warned at start); with one, a PolicyPorts that does not carry it is refused rather
 * than served as "nothing is revoked".
 */
import { describe, expect, it } from "vitest";
import { NO_REVOCATIONS } from "../../src/kube-watch/revocations.ts";
import { policiesFor, revocationListFor } from "../../src/server/policies.ts";
import type { PolicyPorts } from "../../src/server/ports.ts";
import { FakeWorld } from "../support/fakes.ts";
import { testConfig } from "../support/server.ts";

function portsWithoutRevocations(): PolicyPorts {
  const world = new FakeWorld();
  return Object.assign(world, { revocations: undefined }) as unknown as PolicyPorts;
}

describe("the revocation list the policies consult", () => {
  it.each([
    { name: "configured and connected", configured: true, connected: true, expected: "connected" },
    { name: "not configured", configured: false, connected: false, expected: "none" },
    { name: "configured but not connected", configured: true, connected: false, expected: "refused" },
  ])("$name → $expected", ({ configured, connected, expected }) => {
    const config = testConfig(configured ? { revocations: {} } : {});
    const ports = connected ? (new FakeWorld() as unknown as PolicyPorts) : portsWithoutRevocations();
    if (expected === "refused") {
      expect(() => revocationListFor(config, ports)).toThrow(/revocations is configured/);
      expect(() => policiesFor(config, ports)).toThrow(/revocations is configured/);
    } else {
      expect(revocationListFor(config, ports)).toBe(expected === "none" ? NO_REVOCATIONS : ports.revocations);
    }
  });
});
