/**
 * The benchmark's workload: a world of users, clusters and plugin installations, the tokens they
 * hold (minted as authn-api mints them, test/support/tokens.ts), and the CheckRequests Envoy would
 * send for them — written as JSON arrays that ghz sends round-robin (`--data-file`).
 */
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import type { Installation } from "../src/ports/policy-ports.ts";
import { pluginClaims, sign, userClaims } from "../test/support/tokens.ts";

export interface BenchWorld {
  readonly clusterIds: string[];
  readonly installations: Installation[];
}

/** A deterministic lower-case UUID (v4 layout) from a namespace number and an index. */
export function benchUuid(space: number, i: number): string {
  const hex = (space * 0x1000000 + i).toString(16).padStart(12, "0");
  return `${(0x5eed0000 + space).toString(16).padStart(8, "0")}-${(i & 0xffff).toString(16).padStart(4, "0")}-4000-8000-${hex}`;
}

export const BENCH_CLUSTER = benchUuid(1, 1);
export const PINNED = `sha256:${"ab".repeat(32)}`;

export function benchWorld(installationCount: number): BenchWorld {
  return {
    clusterIds: [BENCH_CLUSTER],
    installations: Array.from({ length: installationCount }, (_, k) => ({
      uid: benchUuid(3, k),
      name: `plugin-${k}`,
      pluginName: `plugin-${k % 20}`,
      pluginVersion: "1.4.0",
      definitionHash: PINNED,
      phase: "Running",
      terminating: false,
      organizationId: benchUuid(4, k % 50),
    })),
  };
}

export const userId = (i: number) => benchUuid(2, i);

/** What kubectl and client libraries ask through the gateway: reads, lists, watches, logs, discovery. */
const KUBE_PATHS = [
  (ns: string) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificates/web`,
  (ns: string) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificates?limit=500`,
  (ns: string) => `/api/v1/namespaces/${ns}/pods?labelSelector=app%3Dweb`,
  (ns: string) => `/api/v1/namespaces/${ns}/secrets/cert-manager-webhook-ca`,
  (ns: string) => `/apis/cert-manager.io/v1/namespaces/${ns}/certificaterequests?watch=true&resourceVersion=12345`,
  (ns: string) => `/api/v1/namespaces/${ns}/pods/web-0/log?container=app`,
  (ns: string) => `/apis/apps/v1/namespaces/${ns}/deployments/web`,
  () => `/version`,
];

/** A CheckRequest as Envoy's ext_authz filter builds it (proto field names; ghz reads them as JSON). */
export function envoyCheck(method: string, pathAndQuery: string, extraHeaders: Record<string, string>, policy: string): Record<string, unknown> {
  const requestId = randomUUID();
  return {
    attributes: {
      source: { address: { socket_address: { address: "10.42.7.19", port_value: 51234 } } },
      destination: { address: { socket_address: { address: "10.42.0.5", port_value: 8443 } } },
      request: {
        // protobuf JSON form of google.protobuf.Timestamp, which ghz parses.
        time: new Date().toISOString(),
        http: {
          id: "1736451234567890123",
          method,
          headers: {
            ":authority": "gateway.fundament.example",
            ":method": method,
            ":path": pathAndQuery,
            ":scheme": "https",
            accept: "application/json, */*",
            "user-agent": "kubectl/v1.35.0 (linux/amd64) kubernetes/0a1b2c3",
            "x-forwarded-proto": "https",
            "x-forwarded-for": "203.0.113.7",
            "x-request-id": requestId,
            "x-envoy-expected-rq-timeout-ms": "15000",
            ...extraHeaders,
          },
          path: pathAndQuery,
          host: "gateway.fundament.example",
          scheme: "https",
          protocol: "HTTP/2",
        },
      },
      context_extensions: { policy },
    },
  };
}

/**
 * Benchmark tokens live an hour: a run outlasts FUN-17's 15-minute PluginToken, so every server the
 * benchmark starts accepts that lifetime (BENCH_TOKEN_LIFETIMES as tokens.maxLifetimeSeconds).
 */
export const BENCH_TOKEN_SECONDS = 3600;
export const BENCH_TOKEN_LIFETIMES = { plugin: BENCH_TOKEN_SECONDS };
const exp = () => Math.floor(Date.now() / 1000) + BENCH_TOKEN_SECONDS;

/** Scenario 3: `count` PluginTokens, one per user, spread over the world's installations, each with its own request. */
export async function pluginTokenRequests(world: BenchWorld, count: number): Promise<Array<Record<string, unknown>>> {
  return Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const inst = world.installations[i % world.installations.length]!;
      const token = await sign(
        pluginClaims({
          sub: userId(i),
          cluster_id: BENCH_CLUSTER,
          installation_id: inst.uid,
          installation_name: inst.name,
          plugin_name: inst.pluginName,
          plugin_version: inst.pluginVersion,
          definition_hash: inst.definitionHash,
        }),
        { exp: exp() },
      );
      const path = KUBE_PATHS[i % KUBE_PATHS.length]!(`team-${i % 20}`);
      return envoyCheck("GET", `/clusters/${BENCH_CLUSTER}${path}`, { authorization: `Bearer ${token}` }, "kube-api-proxy");
    }),
  );
}

/** Scenario 4: `count` UserTokens (Bearer, as kubectl sends them), one per user. */
export async function userTokenRequests(count: number): Promise<Array<Record<string, unknown>>> {
  return Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const token = await sign(userClaims({ sub: userId(i), organization_ids: [benchUuid(4, i % 50)] }), { exp: exp() });
      const path = KUBE_PATHS[i % KUBE_PATHS.length]!(`team-${i % 20}`);
      return envoyCheck("GET", `/clusters/${BENCH_CLUSTER}${path}`, { authorization: `Bearer ${token}` }, "kube-api-proxy");
    }),
  );
}

/** Scenario 2: the plugin console's static assets, no credential. */
export function assetRequests(count: number): Array<Record<string, unknown>> {
  return Array.from({ length: count }, (_, i) =>
    envoyCheck("GET", `/plugins/plugin-${i % 20}/1.4.0/console/assets/index-${(i * 7919).toString(16)}.js`, { accept: "*/*" }, "plugin-assets"),
  );
}

export function writeDataFile(path: string, requests: Array<Record<string, unknown>>): void {
  const text = JSON.stringify(requests);
  // ghz treats `{{` as a template action and would re-render every message per call.
  if (text.includes("{{")) throw new Error("workload contains a template action");
  writeFileSync(path, text);
}
