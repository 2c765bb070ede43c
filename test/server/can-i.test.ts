import { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { createAdminServer } from "../../src/server/admin.ts";
import { type CanI, type CanIList, createCanI, decide, ruleRows } from "../../src/server/can-i.ts";
import type { Installation } from "../../src/ports/policy-ports.ts";
import type { RevocationList } from "../../src/kube-watch/revocations.ts";
import type { RuleRequest, RuleSet } from "../../src/kube-reading/rules-intersection.ts";

const set = (resourceRules: RuleSet["resourceRules"], nonResourceRules: RuleSet["nonResourceRules"] = [], incomplete = false): RuleSet => ({ resourceRules, nonResourceRules, incomplete });
const side = (rules: RuleSet) => ({ serviceAccount: "ns/sa", exists: true, rules, evaluationError: "" });
const getSecret: RuleRequest = { kind: "resource", verb: "get", group: "", resource: "secrets", subresource: "", name: "x" };
const secrets = set([{ verbs: ["get"], apiGroups: [""], resources: ["secrets"], resourceNames: [] }]);
const none = set([]);

describe("decide: the first gate that refuses", () => {
  // prettier-ignore
  const cases: Array<[string, CanIList["revoked"], boolean, RuleSet, RuleSet, RuleRequest, boolean | "unknown", string | undefined]> = [
    ["all allow", null, true, secrets, secrets, getSecret, true, undefined],
    ["a revocation before everything", { name: "stop-cert-manager", scope: "plugin" }, true, secrets, secrets, getSecret, false, "revocation"],
    ["can_view first", null, false, none, none, getSecret, false, "can_view"],
    ["then the user", null, true, none, secrets, getSecret, false, "user"],
    ["then the plugin", null, true, secrets, none, getSecret, false, "plugin"],
    ["an incomplete refusal is unknown", null, true, secrets, set([], [], true), getSecret, "unknown", "plugin"],
    ["a path the gateway does not forward", null, true, set([], [{ verbs: ["*"], nonResourceURLs: ["*"] }]), set([], [{ verbs: ["*"], nonResourceURLs: ["*"] }]), { kind: "non-resource", verb: "get", path: "/healthz" }, false, "path"],
    ["a path it forwards", null, true, set([], [{ verbs: ["*"], nonResourceURLs: ["*"] }]), set([], [{ verbs: ["get"], nonResourceURLs: ["/version"] }]), { kind: "non-resource", verb: "get", path: "/version" }, true, undefined],
  ];
  it.each(cases)("%s", (_name, revoked, canView, user, plugin, request, allowed, decidedBy) => {
    const answer = decide({ revoked, canView, user: side(user), plugin: side(plugin) }, request);
    expect(answer.allowed).toBe(allowed);
    expect(answer.decidedBy).toBe(decidedBy);
  });
});

describe("list: the deny-list, asked of the installation as pinned now", () => {
  const CLUSTER = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
  const USER = "6c1d4d3f-8a4b-4e9f-8b62-3e0a1d2f9b02";
  const installation: Installation = { uid: "1b2c3d4e-0000-4000-8000-000000000001", name: "cert-manager", pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: "", phase: "Running", terminating: false, organizationId: "" };
  const canIWith = (revocations: RevocationList) =>
    createCanI({
      clusters: { has: (id) => id === CLUSTER },
      canView: { canView: async () => true },
      serviceAccountTokens: { token: async () => ({ authorization: "Bearer sa-token" as never, envoyCluster: "kube-api-test" }) },
      installations: { byUid: (_c, uid) => (uid === installation.uid ? installation : undefined) },
      rulesReviews: { rules: async () => ({ ...secrets, evaluationError: "" }) },
      revocations,
    });
  const query = { user: USER, installation: installation.uid, cluster: CLUSTER, namespace: "team-a" };

  it("not revoked: the rows of user ∩ plugin", async () => {
    const listed = await canIWith({ revoked: () => undefined }).list(query);
    expect(listed.revoked).toBeNull();
    expect(listed.rows).toEqual([{ apiGroup: "", resource: "secrets", verbs: ["get"], resourceNames: [], namespace: "team-a" }]);
  });

  it("revoked for the plugin: named, no rows, and every request refused by the revocation gate", async () => {
    const asked: unknown[] = [];
    const canI = canIWith({ revoked: (subject) => (asked.push(subject), { name: "stop-cert-manager", target: { scope: "plugin", pluginName: "cert-manager" } }) });
    const answer = await canI.ask(query, getSecret);
    expect(asked).toEqual([{ installationId: installation.uid, pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: "", userId: USER }]);
    expect(answer.list.revoked).toEqual({ name: "stop-cert-manager", scope: "plugin" });
    expect(answer.list.rows).toEqual([]);
    expect(answer).toMatchObject({ allowed: false, decidedBy: "revocation" });
  });

  it("a deny-list not synced is no answer (the admin port's 503)", async () => {
    const unsynced = canIWith({ revoked: () => { throw new DependencyUnavailable("revocations", "not synced"); } });
    await expect(unsynced.list(query)).rejects.toBeInstanceOf(DependencyUnavailable);
  });
});

describe("ruleRows", () => {
  it("one row per group and resource, verbs merged where group, resource and names agree", () => {
    const rows = ruleRows(
      set([
        { verbs: ["get"], apiGroups: ["", "apps"], resources: ["pods"], resourceNames: [] },
        { verbs: ["list", "get"], apiGroups: [""], resources: ["pods"], resourceNames: [] },
        { verbs: ["get"], apiGroups: [""], resources: ["pods"], resourceNames: ["b", "a"] },
        { verbs: ["*", "get"], apiGroups: [""], resources: ["secrets"], resourceNames: [] },
      ]),
      "team-a",
    );
    expect(rows).toEqual([
      { apiGroup: "", resource: "pods", verbs: ["get", "list"], resourceNames: [], namespace: "team-a" },
      { apiGroup: "", resource: "pods", verbs: ["get"], resourceNames: ["a", "b"], namespace: "team-a" },
      { apiGroup: "", resource: "secrets", verbs: ["*"], resourceNames: [], namespace: "team-a" },
      { apiGroup: "apps", resource: "pods", verbs: ["get"], resourceNames: [], namespace: "team-a" },
    ]);
  });
});

/** The admin server's own handler, with a request from `address`. */
async function post(canI: CanI | undefined, body: unknown, address = "127.0.0.1", method = "POST"): Promise<{ status: number; body: string }> {
  const handler = createAdminServer({ readiness: () => ({ ready: true, checks: [] }) as never, metrics: undefined as never, explain: undefined, canI });
  const req = Object.assign(Readable.from([Buffer.from(typeof body === "string" ? body : JSON.stringify(body))]), {
    method,
    url: "/can-i",
    headers: { "content-type": "application/json" },
    socket: { remoteAddress: address },
  }) as unknown as IncomingMessage;
  const res = new ServerResponse(req);
  const chunks: Buffer[] = [];
  // Collects the body the handler ends with (a ServerResponse without a socket writes nowhere).
  res.end = ((chunk?: unknown) => {
    if (chunk !== undefined && typeof chunk !== "function") chunks.push(Buffer.from(chunk as string));
    res.emit("finish");
    return res;
  }) as typeof res.end;
  const ended = new Promise<void>((r) => res.once("finish", () => r()));
  handler.emit("request", req, res);
  await Promise.race([ended, new Promise((r) => setTimeout(r, 1000))]);
  return { status: res.statusCode, body: Buffer.concat(chunks).toString() };
}

describe("POST /can-i on the admin port", () => {
  let asked = 0;
  const listing = { rows: [] } as unknown as CanIList;
  const canI: CanI = {
    list: async () => (asked++, listing),
    ask: async () => (asked++, { allowed: true, gates: [], list: listing }),
  };
  const query = { user: "u1", installation: "cert-manager", cluster: "c1" };

  it("not found unless configured, loopback only, POST only, as /explain", async () => {
    asked = 0;
    expect((await post(undefined, query)).status).toBe(404);
    expect((await post(canI, query, "10.1.2.3")).status).toBe(403);
    expect((await post(canI, query, "127.0.0.1", "GET")).status).toBe(405);
    expect(asked).toBe(0);
    expect((await post(canI, query)).status).toBe(200);
    expect(asked).toBe(1);
  });

  // prettier-ignore
  const bad: Array<[string, unknown]> = [
    ["not JSON", "{"],
    ["an array", [query]],
    ["no user", { installation: "i", cluster: "c" }],
    ["a number for a user", { ...query, user: 7 }],
    ["a request with neither resource nor path", { ...query, request: { verb: "get" } }],
    ["a request with both", { ...query, request: { verb: "get", resource: "pods", path: "/api" } }],
    ["a request that is a string", { ...query, request: "get pods" }],
  ];
  it.each(bad)("400 for %s, and nothing asked", async (_name, body) => {
    asked = 0;
    expect((await post(canI, body)).status).toBe(400);
    expect(asked).toBe(0);
  });

  it("a dependency that cannot answer is a 503 naming it, never the error's detail", async () => {
    const failing: CanI = {
      list: async () => {
        throw new DependencyUnavailable("kube-tokenrequest", "secret-looking detail eyJhbGciOi");
      },
      ask: async () => {
        throw new Error("boom");
      },
    };
    const unavailable = await post(failing, query);
    expect(unavailable.status).toBe(503);
    expect(unavailable.body).toBe("kube-tokenrequest did not answer; try again\n");
    const broken = await post(failing, { ...query, request: { verb: "get", resource: "pods" } });
    expect(broken.status).toBe(500);
    expect(broken.body).not.toContain("boom");
  });
});
