/**
 * The deploy kit's kustomizations rendered by the real kustomize (`kubectl kustomize` embeds the
 * same v5.5.0; scripts/deps/install.sh builds it from the Go module proxy). KUSTOMIZATIONS lists
 * every kustomization root under deploy/, in the order a platform team applies them.
 */
import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { parseAllDocuments } from "yaml";
import { resolveBinary } from "../harness/binaries.ts";

export const ROOT = resolve(import.meta.dirname, "../..");

export const KUSTOMIZATIONS = ["deploy/k8s/crds", "deploy/k8s/shared", "deploy/k8s", "deploy/k8s/monitoring"] as const;

/** Manifests are free-form JSON. */
export type Manifest = Record<string, any>;

/** `kustomize build DIR` (relative to the repository), as YAML text. */
export function kustomizeYaml(dir: string): string {
  return execFileSync(resolveBinary("kustomize"), ["build", resolve(ROOT, dir)], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** `kustomize build DIR` as objects. */
export function kustomize(dir: string): Manifest[] {
  return parseAllDocuments(kustomizeYaml(dir))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null);
}
