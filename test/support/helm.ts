/**
 * The Helm chart (deploy/helm/portcullis) rendered by the real helm (scripts/deps/install.sh builds it
 * from the Go module proxy), and the gateway manifests `portcullis gateway-config` makes for it.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse, parseAllDocuments, stringify } from "yaml";
import { loadConfig } from "../../src/config/load.ts";
import { renderGatewayYaml, type GatewayOptions } from "../../src/deploy/gateway-config.ts";
import { resolveBinary } from "../harness/binaries.ts";
import type { Manifest } from "./kustomize.ts";

export const CHART = resolve(import.meta.dirname, "../../deploy/helm/portcullis");
export const RELEASE_NAMESPACE = "fundament-system";
const EXAMPLE = resolve(import.meta.dirname, "../../deploy/examples/portcullis.yaml");
/** Render for the Kubernetes the tests' kube-apiserver runs (pinned in its go.mod), not helm's built-in default (1.20). */
export const KUBE_VERSION = /^\s*k8s\.io\/kubernetes (v[\d.]+)/m.exec(readFileSync(resolve(import.meta.dirname, "../../scripts/deps/kube-apiserver/go.mod"), "utf8"))![1]!;

/** `helm ARGS`, its output; throws with helm's stderr when it fails. */
export function helm(args: string[]): string {
  return execFileSync(resolveBinary("helm"), args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, HELM_CACHE_HOME: tmpdir(), HELM_CONFIG_HOME: tmpdir(), HELM_DATA_HOME: tmpdir() } });
}

/** `helm template` with the values given, as objects. */
export function helmTemplate(values: Record<string, unknown>, files: Record<string, string> = {}): Manifest[] {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-helm-"));
  try {
    writeFileSync(join(dir, "values.yaml"), stringify(values));
    const setFiles = Object.entries(files).flatMap(([key, text], i) => {
      writeFileSync(join(dir, `file-${i}`), text);
      return ["--set-file", `${key}=${join(dir, `file-${i}`)}`];
    });
    const out = helm(["template", "portcullis", CHART, "--kube-version", KUBE_VERSION, "--namespace", RELEASE_NAMESPACE, "--values", join(dir, "values.yaml"), ...setFiles]);
    return parseAllDocuments(out).map((d) => d.toJS() as Manifest | null).filter((m): m is Manifest => m !== null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The example deployment's values per gateway mode: its configuration, its Gateway and generated routes. */
export const GATEWAY = { namespace: "fundament-gateway", name: "fundament" } as const;

export function modeValues(mode: "envoy" | "istio" | "envoyGateway"): { values: Record<string, unknown>; files: Record<string, string> } {
  if (mode === "envoy") return { values: {}, files: {} };
  const config = loadConfig(EXAMPLE);
  const target: GatewayOptions["target"] = mode === "istio" ? "istio" : "envoy-gateway";
  const proxyNamespace = mode === "istio" ? GATEWAY.namespace : "envoy-gateway-system";
  const manifests = renderGatewayYaml(config, { target, namespace: RELEASE_NAMESPACE, gateway: GATEWAY, proxyNamespace });
  const raw = parse(readFileSync(EXAMPLE, "utf8")) as Record<string, any>;
  // Behind a gateway TLS ends there: the data-plane Envoy's listener is plain HTTP (the chart refuses TLS on it).
  delete raw["envoy"].listener.tls;
  return {
    values: {
      config: mode === "istio" ? { ...raw, check: { ...raw["check"], policyFrom: "request" } } : raw,
      gateway: { mode, name: GATEWAY.name, namespace: GATEWAY.namespace, ...(mode === "envoyGateway" ? { proxyNamespace } : {}) },
      httproute: { enabled: true, parentRefs: [GATEWAY] },
    },
    files: { "gateway.manifests": manifests },
  };
}
