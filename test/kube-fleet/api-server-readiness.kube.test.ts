/**
 * SubjectAccessReviews that are no answer (issue 12): while a kube-apiserver starts, its RBAC
 * informers are empty and every review comes back "not allowed" with no error; an authorizer that
 * fails sets `status.evaluationError`. Neither may become a user-sar-denied, and neither may be
 * cached: the check is a 503 dependency-unavailable and the next one asks again. A denial from a
 * ready server is still a 403, cached for the deny TTL. The REAL client-node SubjectAccessReview
 * and /readyz calls talk to the wire-level fake.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { startWired, type Wired } from "../support/wire-fakes/wired.ts";
import { ids, pluginToken } from "../support/tokens.ts";

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

/** Long TTLs, so that a cached answer would show on the very next check. */
function longTtls(config: Config): Config {
  return { ...config, kube: { ...config.kube, sar: { ...config.kube.sar, allowTtlMs: 60_000, denyTtlMs: 60_000 } } };
}

let w: Wired;
beforeAll(async () => {
  w = await startWired({}, { config: longTtls });
});
afterAll(async () => {
  await w.stop();
});
beforeEach(() => {
  w.kube.ready = true;
  w.kube.sarEvaluationError = undefined;
  w.kube.sarAllowed = () => true;
  w.kube.faults.sar = "healthy";
});

/** A plugin check for a user whose reviews are not cached yet. */
async function check(user: string) {
  return w.server.check({ path: PODS, headers: { authorization: `Bearer ${await pluginToken({ sub: user })}` }, policy: "kube-api-proxy" });
}

function reviewsFor(user: string): number {
  return w.kube.sarSpecs.filter((s) => s.user === `system:serviceaccount:fundament-system:fundament-${user}`).length;
}

describe("a review that is no answer is a 503, never cached", () => {
  it.each([
    {
      name: "denied by a server that is not ready (RBAC not loaded)",
      breakIt: () => {
        w.kube.ready = false;
        w.kube.sarAllowed = () => false;
      },
    },
    {
      name: "denied with an evaluationError",
      breakIt: () => {
        w.kube.sarEvaluationError = "webhook authorizer: connection refused";
        w.kube.sarAllowed = () => false;
      },
    },
    {
      name: "allowed, but with an evaluationError",
      breakIt: () => {
        w.kube.sarEvaluationError = "RBAC: clusterrole.rbac.authorization.k8s.io \"view\" not found";
        w.kube.sarAllowed = () => true;
      },
    },
    {
      name: "denied by a server whose /readyz never answers",
      breakIt: () => {
        w.kube.faults.readyz = "hang";
        w.kube.sarAllowed = () => false;
      },
    },
  ])("$name", async ({ breakIt }) => {
    const user = randomUUID();
    breakIt();
    for (let i = 0; i < 2; i++) {
      expect(await check(user)).toMatchObject({ allowed: false, http: 503, reason: "dependency-unavailable", headers: { "retry-after": "1" } });
    }
    expect(reviewsFor(user)).toBe(2);
    // The server is ready and its RBAC allows: the very next check asks again and is allowed.
    w.kube.ready = true;
    w.kube.sarEvaluationError = undefined;
    w.kube.faults.readyz = "healthy";
    w.kube.sarAllowed = () => true;
    expect(await check(user)).toMatchObject({ allowed: true });
  });

  it("a denial from a ready server is a 403, cached", async () => {
    const user = randomUUID();
    w.kube.sarAllowed = () => false;
    expect(await check(user)).toMatchObject({ allowed: false, http: 403, reason: "user-sar-denied" });
    w.kube.sarAllowed = () => true;
    expect(await check(user)).toMatchObject({ allowed: false, http: 403, reason: "user-sar-denied" });
    expect(reviewsFor(user)).toBe(1);
  });
});
