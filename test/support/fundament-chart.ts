/**
 * Fundament's own Helm chart (charts/fundament of fundament-oss/fundament) at the pinned commit,
 * rendered by the real helm: the routes and Services portcullis is installed beside. Read from the
 * fetched repository (a bare git directory), never copied into this one.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments, stringify } from "yaml";
import { helm, KUBE_VERSION } from "./helm.ts";
import type { Manifest } from "./kustomize.ts";

export const FUNDAMENT_REPO = "/work/.mirror/fundament-oss+fundament/repo";
export const FUNDAMENT_COMMIT = "e26cae3cb8c387c2f76872c6108622dca54e3d2d";

let chartDir: string | undefined;

/** charts/fundament at FUNDAMENT_COMMIT, extracted once into a scratch directory. */
function fundamentChartDir(): string {
  if (chartDir === undefined) {
    if (!existsSync(FUNDAMENT_REPO)) throw new Error(`Fundament's repository is not at ${FUNDAMENT_REPO} (fetch github:fundament-oss/fundament)`);
    const dir = mkdtempSync(join(tmpdir(), "fundament-chart-"));
    // The mirror lacks some blobs outside the chart, which git reports on stderr; the chart's are whole.
    const archive = execFileSync("git", ["-C", FUNDAMENT_REPO, "archive", FUNDAMENT_COMMIT, "charts/fundament"], { maxBuffer: 64 * 1024 * 1024, stdio: ["ignore", "pipe", "pipe"] });
    execFileSync("tar", ["-x", "-C", dir], { input: archive });
    chartDir = join(dir, "charts/fundament");
  }
  return chartDir;
}

/** `helm template RELEASE charts/fundament` with the values given (and the JWT Secret every install names), as objects. */
export function fundamentTemplate(release: string, namespace: string, values: Record<string, unknown>): Manifest[] {
  const dir = mkdtempSync(join(tmpdir(), "fundament-values-"));
  writeFileSync(join(dir, "values.yaml"), stringify({ jwtSecretRef: { name: "fundament-jwt", key: "secret" }, ...values }));
  const out = helm(["template", release, fundamentChartDir(), "--kube-version", KUBE_VERSION, "--namespace", namespace, "--values", join(dir, "values.yaml")]);
  return parseAllDocuments(out)
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null);
}
