/**
 * The checks a configuration file alone cannot decide: what the process will read at start. Secrets
 * present (HS256 ones at least 32 bytes), files readable, kubeconfigs readable with the named
 * context, in-cluster credentials present. `validate-config` and the server run these same checks
 * (`loadConfigForStart` below), before any watch, timer or listener exists. They read what the
 * server will (TLS files with its own loader, kubeconfigs), so they live with it, not the schema.
 */
import { accessSync, constants, readFileSync } from "node:fs";
import { KubeConfig } from "#kubernetes-client";
import { checkTlsFiles, TlsConfigError } from "./tls.ts";
import { ConfigError, loadConfig, readSecret } from "../config/load.ts";
import type { Config } from "../config/schema.ts";

/** RFC 7518 §3.2: an HS256 key is at least as long as the hash, 256 bits. */
export const MIN_HS256_SECRET_BYTES = 32;

/** Where a pod's in-cluster credentials are mounted (the ServiceAccount token and the cluster CA). */
export const IN_CLUSTER_FILES = ["/var/run/secrets/kubernetes.io/serviceaccount/token", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"];

export interface EnvironmentIssue {
  /** The configuration field, as `formatIssues` writes it: `tokens.secrets[0]`. */
  readonly field: string;
  readonly message: string;
}

/** Every problem found, in file order; empty when the process can start with this configuration. */
export function environmentIssues(config: Config, env: NodeJS.ProcessEnv = process.env): EnvironmentIssue[] {
  const issues: EnvironmentIssue[] = [];
  const check = (field: string, run: () => string | undefined) => {
    try {
      const message = run();
      if (message !== undefined) issues.push({ field, message });
    } catch (err) {
      issues.push({ field, message: err instanceof ConfigError ? err.message.replace(`${field}: `, "") : (err as Error).message });
    }
  };
  const tls = config.listen.tls;
  if (tls !== undefined) {
    // Readable, PEM, and the key is the certificate's: the field named is the file at fault.
    try {
      checkTlsFiles(tls);
    } catch (err) {
      if (!(err instanceof TlsConfigError)) throw err;
      issues.push({ field: err.field, message: err.message.replace(`${err.field}: `, "") });
    }
  }
  config.tokens?.secrets?.forEach((source, i) => {
    const field = `tokens.secrets[${i}]`;
    check(field, () => {
      const bytes = Buffer.byteLength(readSecret(source, field, env), "utf8");
      // The length only: the secret itself is never echoed.
      if (bytes < MIN_HS256_SECRET_BYTES) return `expected an HS256 secret of at least ${MIN_HS256_SECRET_BYTES} bytes, got ${bytes}`;
      return undefined;
    });
  });
  const caFile = config.tokens?.jwks?.caFile;
  if (caFile !== undefined) check("tokens.jwks.caFile", () => unreadable(caFile));
  const apiToken = config.openfga?.apiToken;
  if (apiToken !== undefined) check("openfga.apiToken", () => void readSecret(apiToken, "openfga.apiToken", env));
  config.clusters.forEach((cluster, i) => check(`clusters[${i}]`, () => kubeconfigProblem(cluster, env)));
  // The deny-list's cluster (issue 17), when that section is configured.
  const revocations = (config as { revocations?: { kubeconfig?: string | undefined; context?: string | undefined } }).revocations;
  if (revocations !== undefined) check("revocations", () => kubeconfigProblem(revocations, env));
  // The management cluster of the cluster registry (issue 16).
  const registry = config.clusterRegistry;
  if (registry !== undefined) check("clusterRegistry", () => kubeconfigProblem(registry, env));
  const konfidence = config.konfidence;
  if (konfidence !== undefined) {
    if (!("clusterId" in konfidence.cluster)) {
      const cluster = konfidence.cluster;
      check("konfidence.cluster", () => kubeconfigProblem(cluster, env));
    }
    const caFile = konfidence.providers.caFile;
    if (caFile !== undefined) check("konfidence.providers.caFile", () => unreadable(caFile));
  }
  return issues;
}

/** Throws ConfigError listing every issue, one line each, in `formatIssues`'s format. */
export function assertEnvironment(config: Config, source: string, env: NodeJS.ProcessEnv = process.env): void {
  const issues = environmentIssues(config, env);
  if (issues.length > 0) throw new ConfigError(`${source}:\n${issues.map((i) => `  ${i.field}: ${i.message}`).join("\n")}`);
}

function unreadable(path: string): string | undefined {
  try {
    accessSync(path, constants.R_OK);
    return undefined;
  } catch (err) {
    return `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? "error"})`;
  }
}

/**
 * The kubeconfig file readable, parsed, with the named (or a current) context whose cluster has a
 * server and no proxy-url (the pool connects directly); in-cluster, the pod's variables and files.
 */
function kubeconfigProblem(cluster: { kubeconfig?: string | undefined; context?: string | undefined }, env: NodeJS.ProcessEnv): string | undefined {
  if (cluster.kubeconfig === undefined) {
    if (cluster.context !== undefined) return "context needs kubeconfig: in-cluster configuration has a single context";
    const missing = ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"].filter((name) => (env[name] ?? "") === "");
    if (missing.length > 0) return `in-cluster configuration (no kubeconfig) needs ${missing.join(" and ")} set, as in a pod; outside a cluster, give a kubeconfig`;
    for (const file of IN_CLUSTER_FILES) {
      const problem = unreadable(file);
      if (problem !== undefined) return `in-cluster configuration (no kubeconfig): ${problem}`;
    }
    return undefined;
  }
  const path = cluster.kubeconfig;
  const problem = unreadable(path);
  if (problem !== undefined) return `kubeconfig: ${problem}`;
  const kubeConfig = new KubeConfig();
  try {
    kubeConfig.loadFromString(readFileSync(path, "utf8"));
  } catch {
    // client-node's parse errors quote the file, which holds credentials.
    return `kubeconfig: ${path} is not a valid kubeconfig`;
  }
  const contextName = cluster.context ?? kubeConfig.getCurrentContext();
  if (cluster.context !== undefined && !kubeConfig.getContextObject(contextName)) {
    const known = kubeConfig.getContexts().map((c) => c.name);
    return `context: expected a context of ${path}, got "${contextName}" (it has: ${known.length === 0 ? "none" : known.join(", ")})`;
  }
  const context = kubeConfig.getContextObject(contextName);
  if (!context) return `kubeconfig: ${path} has no current-context; set context`;
  const server = kubeConfig.getCluster(context.cluster);
  if (!server || server.server === "") return `kubeconfig: context "${contextName}" names cluster "${context.cluster}", which ${path} does not define with a server`;
  if (server.proxyUrl !== undefined) return `kubeconfig: context "${contextName}" uses proxy-url, which is not supported`;
  // Files the kubeconfig names are read when the first request is made: check them now.
  const user = kubeConfig.getUser(context.user);
  for (const [what, file] of [["certificate-authority", server.caFile], ["client-certificate", user?.certFile], ["client-key", user?.keyFile]] as const) {
    const missing = file === undefined ? undefined : unreadable(file);
    if (missing !== undefined) return `kubeconfig: ${path}'s ${what}: ${missing}`;
  }
  return undefined;
}

/**
 * The one validator behind `validate-config` and the server's start: the file (schema, formats,
 * ranges), then what the process will read (the checks above). Nothing has started when it throws.
 */
export async function loadConfigForStart(path: string, env: NodeJS.ProcessEnv = process.env): Promise<Config> {
  const config = loadConfig(path);
  assertEnvironment(config, path, env);
  return config;
}
