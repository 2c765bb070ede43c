/**
 * The start checks a file alone cannot decide (src/server/environment.ts), table by table: secrets,
 * files, kubeconfigs and their contexts, in-cluster credentials. Each row names the field and says
 * what is expected; a secret's value never appears.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { environmentIssues } from "../../src/server/environment.ts";
import { configSchema } from "../../src/config/schema.ts";

const dir = mkdtempSync(join(tmpdir(), "portcullis-environment-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

const SECRET = "a-secret-long-enough-for-hs256-0123456789";
const CLUSTER = "0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";

function kubeconfig(name: string, options: { context?: string; caFile?: string; certFile?: string; proxy?: boolean; current?: boolean } = {}): string {
  const cluster: Record<string, unknown> = { server: "https://127.0.0.1:6443" };
  if (options.caFile !== undefined) cluster["certificate-authority"] = options.caFile;
  if (options.proxy) cluster["proxy-url"] = "http://127.0.0.1:3128";
  const user: Record<string, unknown> = options.certFile === undefined ? { token: "t" } : { "client-certificate": options.certFile, "client-key": options.certFile };
  return file(
    name,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster }],
      users: [{ name: "u", user }],
      contexts: [{ name: options.context ?? "dev", context: { cluster: "c", user: "u" } }],
      ...(options.current === false ? {} : { "current-context": options.context ?? "dev" }),
    }),
  );
}

const config = (overrides: Record<string, unknown>) =>
  configSchema.parse({
    tokens: { secrets: [{ env: "S" }] },
    openfga: { apiUrl: "http://openfga:8080", storeName: "fundament" },
    clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("ok.yaml") }],
    ...overrides,
  });
const env = { S: SECRET, KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" };

describe("environmentIssues", () => {
  it.each([
    { name: "everything present", config: {}, env: {}, expected: [] },
    { name: "secret env var unset", config: {}, env: { S: "" }, expected: ["tokens.secrets[0]: environment variable S is not set"] },
    { name: "secret 31 bytes", config: {}, env: { S: "x".repeat(31) }, expected: ["tokens.secrets[0]: expected an HS256 secret of at least 32 bytes, got 31"] },
    { name: "secret 32 bytes (multi-byte characters count as bytes)", config: {}, env: { S: "é".repeat(16) }, expected: [] },
    { name: "secret file missing", config: { tokens: { secrets: [{ file: join(dir, "nope") }] } }, env: {}, expected: [`tokens.secrets[0]: cannot read ${join(dir, "nope")} (ENOENT)`] },
    { name: "secret file empty", config: { tokens: { secrets: [{ file: file("empty", "\n") }] } }, env: {}, expected: [`tokens.secrets[0]: file ${join(dir, "empty")} is empty`] },
    { name: "second secret short, first fine", config: { tokens: { secrets: [{ env: "S" }, { env: "T" }] } }, env: { T: "short" }, expected: ["tokens.secrets[1]: expected an HS256 secret of at least 32 bytes, got 5"] },
    { name: "OpenFGA token unset", config: { openfga: { apiUrl: "http://o:8080", storeName: "fundament", apiToken: { env: "FGA" } } }, env: {}, expected: ["openfga.apiToken: environment variable FGA is not set"] },
    { name: "kubeconfig missing", config: { clusters: [{ id: CLUSTER, kubeconfig: join(dir, "none.yaml") }] }, env: {}, expected: [`clusters[0]: kubeconfig: cannot read ${join(dir, "none.yaml")} (ENOENT)`] },
    { name: "kubeconfig not YAML", config: { clusters: [{ id: CLUSTER, kubeconfig: file("bad.yaml", "clusters: [") }] }, env: {}, expected: [`clusters[0]: kubeconfig: ${join(dir, "bad.yaml")} is not a valid kubeconfig`] },
    { name: "unknown context", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("ctx.yaml"), context: "prod" }] }, env: {}, expected: [`clusters[0]: context: expected a context of ${join(dir, "ctx.yaml")}, got "prod" (it has: dev)`] },
    { name: "the named context", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("named.yaml", { context: "prod", current: false }), context: "prod" }] }, env: {}, expected: [] },
    { name: "no current context, none named", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("nocur.yaml", { current: false }) }] }, env: {}, expected: [`clusters[0]: kubeconfig: ${join(dir, "nocur.yaml")} has no current-context; set context`] },
    { name: "proxy-url", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("proxy.yaml", { proxy: true }) }] }, env: {}, expected: ['clusters[0]: kubeconfig: context "dev" uses proxy-url, which is not supported'] },
    { name: "CA file missing", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("ca.yaml", { caFile: join(dir, "ca.crt") }) }] }, env: {}, expected: [`clusters[0]: kubeconfig: ${join(dir, "ca.yaml")}'s certificate-authority: cannot read ${join(dir, "ca.crt")} (ENOENT)`] },
    { name: "client certificate missing", config: { clusters: [{ id: CLUSTER, kubeconfig: kubeconfig("cert.yaml", { certFile: join(dir, "u.crt") }) }] }, env: {}, expected: [`clusters[0]: kubeconfig: ${join(dir, "cert.yaml")}'s client-certificate: cannot read ${join(dir, "u.crt")} (ENOENT)`] },
    { name: "in-cluster outside a pod", config: { clusters: [{ id: CLUSTER }] }, env: {}, expected: ["clusters[0]: in-cluster configuration (no kubeconfig) needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set, as in a pod; outside a cluster, give a kubeconfig"] },
    { name: "in-cluster with a context", config: { clusters: [{ id: CLUSTER, context: "x" }] }, env: {}, expected: ["clusters[0]: context needs kubeconfig: in-cluster configuration has a single context"] },
    { name: "the cluster registry's management cluster", config: { clusterRegistry: { namespace: "portcullis", kubeconfig: join(dir, "m.yaml") } }, env: {}, expected: [`clusterRegistry: kubeconfig: cannot read ${join(dir, "m.yaml")} (ENOENT)`] },
    { name: "the cluster registry in-cluster outside a pod", config: { clusterRegistry: { namespace: "portcullis" } }, env: {}, expected: ["clusterRegistry: in-cluster configuration (no kubeconfig) needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set, as in a pod; outside a cluster, give a kubeconfig"] },
    { name: "Konfidence's own cluster", config: { konfidence: { cluster: { kubeconfig: join(dir, "k.yaml") } } }, env: {}, expected: [`konfidence.cluster: kubeconfig: cannot read ${join(dir, "k.yaml")} (ENOENT)`] },
    { name: "every problem at once, in file order", config: { clusters: [{ id: CLUSTER, kubeconfig: join(dir, "none.yaml") }] }, env: { S: "x" }, expected: ["tokens.secrets[0]: expected an HS256 secret of at least 32 bytes, got 1", `clusters[0]: kubeconfig: cannot read ${join(dir, "none.yaml")} (ENOENT)`] },
  ])("$name", ({ config: overrides, env: extra, expected }) => {
    const issues = environmentIssues(config(overrides), { ...env, ...extra });
    expect(issues.map((i) => `${i.field}: ${i.message}`)).toEqual(expected);
    expect(JSON.stringify(issues)).not.toContain(SECRET);
  });
});
