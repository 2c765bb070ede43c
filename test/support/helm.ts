/**
 * The Helm chart (deploy/helm/portcullis) rendered by the real helm (scripts/deps/install.sh builds it
 * from the Go module proxy).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseAllDocuments, stringify } from "yaml";
import { resolveBinary } from "../harness/binaries.ts";
import { RELEASE_NAMESPACE } from "./gateway.ts";
import type { Manifest } from "./kustomize.ts";

export const CHART = resolve(import.meta.dirname, "../../deploy/helm/portcullis");
export { RELEASE_NAMESPACE };
/** Render for the Kubernetes the tests' kube-apiserver runs (pinned in its go.mod), not helm's built-in default (1.20). */
export const KUBE_VERSION = /^\s*k8s\.io\/kubernetes (v[\d.]+)/m.exec(readFileSync(resolve(import.meta.dirname, "../../scripts/deps/kube-apiserver/go.mod"), "utf8"))![1]!;

/** `helm ARGS`, its output; throws with helm's stderr when it fails. */
export function helm(args: string[]): string {
  return execFileSync(resolveBinary("helm"), args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, HELM_CACHE_HOME: tmpdir(), HELM_CONFIG_HOME: tmpdir(), HELM_DATA_HOME: tmpdir() } });
}

/** `helm template` with the values given, as objects. */
export function helmTemplate(values: Record<string, unknown>): Manifest[] {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-helm-"));
  try {
    writeFileSync(join(dir, "values.yaml"), stringify(values));
    const out = helm(["template", "portcullis", CHART, "--kube-version", KUBE_VERSION, "--namespace", RELEASE_NAMESPACE, "--values", join(dir, "values.yaml")]);
    return parseAllDocuments(out).map((d) => d.toJS() as Manifest | null).filter((m): m is Manifest => m !== null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
