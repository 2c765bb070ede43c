/**
 * Which changes a reload applies live and which need a restart (src/server/reload.ts): a table of
 * edits to a valid configuration, each with the keys it must report on each side.
 */
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.ts";
import { changedPaths, planReload, withLiveSettings } from "../../src/server/reload.ts";

const BASE = `
listen: { grpc: "127.0.0.1:9001", admin: "127.0.0.1:9002", internal: "127.0.0.1:9003" }
logLevel: info
tokens:
  secrets: [{ file: /run/secrets/hs256 }]
  cookieOrigins: ["https://console.example.com"]
openfga: { apiUrl: "http://127.0.0.1:8080", storeId: "01HXYZ0000000000000000000A", allowTtlMs: 1000 }
clusters: [{ id: "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", kubeconfig: /etc/kube/config }]
`;
const base = parseConfig(BASE);
const edit = (from: string, to: string) => {
  expect(BASE).toContain(from);
  return parseConfig(BASE.replace(from, to));
};

describe("planReload", () => {
  const cases: Array<{ name: string; next: () => ReturnType<typeof parseConfig>; live: string[]; restart: string[] }> = [
    { name: "nothing changed", next: () => parseConfig(BASE), live: [], restart: [] },
    { name: "log level", next: () => edit("logLevel: info", "logLevel: debug"), live: ["logLevel"], restart: [] },
    { name: "a second secret", next: () => edit("[{ file: /run/secrets/hs256 }]", "[{ file: /run/secrets/hs256 }, { env: OLD }]"), live: ["tokens.secrets"], restart: [] },
    { name: "cookie origins", next: () => edit('["https://console.example.com"]', '["https://console.example.org"]'), live: ["tokens.cookieOrigins"], restart: [] },
    { name: "store id to store name", next: () => edit('storeId: "01HXYZ0000000000000000000A"', "storeName: fundament"), live: ["openfga.storeId", "openfga.storeName"], restart: [] },
    { name: "the gRPC port", next: () => edit("127.0.0.1:9001", "127.0.0.1:9101"), live: [], restart: ["listen.grpc"] },
    { name: "an OpenFGA cache TTL", next: () => edit("allowTtlMs: 1000", "allowTtlMs: 2000"), live: [], restart: ["openfga.allowTtlMs"] },
    { name: "workers", next: () => edit("logLevel: info", "logLevel: info\nworkers: 2"), live: [], restart: ["workers"] },
    { name: "a cluster's kubeconfig", next: () => edit("/etc/kube/config", "/etc/kube/other"), live: [], restart: ["clusters"] },
    { name: "tracing turned on, with the log level", next: () => edit("logLevel: info", "logLevel: warn\ntracing: { enabled: true }"), live: ["logLevel"], restart: ["tracing.enabled"] },
  ];
  it.each(cases)("$name", ({ next, live, restart }) => {
    const plan = planReload(base, next());
    expect(plan.live).toEqual(live);
    expect(plan.restartRequired).toEqual(restart);
  });
});

describe("withLiveSettings", () => {
  it("takes only the live keys from the new file: a changed port and TTL stay as they were", () => {
    const next = parseConfig(
      BASE.replace("logLevel: info", "logLevel: debug")
        .replace("127.0.0.1:9001", "127.0.0.1:9101")
        .replace("allowTtlMs: 1000", "allowTtlMs: 2000")
        .replace('storeId: "01HXYZ0000000000000000000A"', "storeName: fundament")
        .replace("[{ file: /run/secrets/hs256 }]", "[{ env: NEW }]"),
    );
    const applied = withLiveSettings(base, next);
    expect(changedPaths(base, applied).sort()).toEqual(["logLevel", "openfga.storeId", "openfga.storeName", "tokens.secrets"]);
    expect(applied.listen.grpc).toBe("127.0.0.1:9001");
    expect(applied.openfga?.allowTtlMs).toBe(1000);
    expect(applied.openfga?.storeName).toBe("fundament");
    expect(applied.openfga?.storeId).toBeUndefined();
  });
});
