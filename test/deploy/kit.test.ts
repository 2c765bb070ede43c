/**
 * The deploy kit as kustomize renders it (test/support/kustomize.ts): every kustomization under
 * deploy/ renders; the portcullis base owns no Namespace and no CRD (deploy/k8s/shared does); the admin
 * Service, ServiceMonitor, PrometheusRule and dashboard agree with each other and with
 * docs/operations.md; the memory limit holds the RSS bench/RESULTS.md measured; installs use
 * `npm ci`. (test/e2e/konfidence-and-manifests.test.ts applies the same output to a real API server;
 * the data-plane Envoy's wiring: test/deploy/data-plane.test.ts.)
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { KUSTOMIZATIONS, kustomize, type Manifest, ROOT } from "../support/kustomize.ts";
import { measuredMemory } from "./measured-memory.ts";

const read = (path: string) => readFileSync(resolve(ROOT, path), "utf8");
const rendered = Object.fromEntries(KUSTOMIZATIONS.map((dir) => [dir, kustomize(dir)])) as Record<(typeof KUSTOMIZATIONS)[number], Manifest[]>;
const find = (dir: keyof typeof rendered, kind: string, name?: string): Manifest =>
  rendered[dir].find((m) => m["kind"] === kind && (name === undefined || m["metadata"].name === name))!;

describe("every kustomization", () => {
  it("is listed: KUSTOMIZATIONS holds every kustomization.yaml under deploy/", () => {
    const found: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(dir, e.name));
        else if (e.name === "kustomization.yaml") found.push(relative(ROOT, dir));
      }
    };
    walk(resolve(ROOT, "deploy"));
    expect(found.sort()).toEqual([...KUSTOMIZATIONS].sort());
  });

  it.each(KUSTOMIZATIONS)("%s renders objects that all carry a name", (dir) => {
    expect(rendered[dir].length).toBeGreaterThan(0);
    for (const m of rendered[dir]) expect(m["metadata"]?.name, JSON.stringify(m).slice(0, 120)).toBeTruthy();
  });
});

describe("ownership", () => {
  it.each(["deploy/k8s", "deploy/k8s/monitoring"] as const)("%s holds no Namespace and no CRD", (dir) => {
    expect(rendered[dir].filter((m) => m["kind"] === "Namespace" || m["kind"] === "CustomResourceDefinition")).toEqual([]);
  });

  it("deploy/k8s/shared holds exactly the fundament-system and portcullis-clusters Namespaces and every CRD file in deploy/k8s/crds", () => {
    const crdFiles = readdirSync(resolve(ROOT, "deploy/k8s/crds")).filter((f) => f !== "kustomization.yaml");
    expect(rendered["deploy/k8s/shared"].map((m) => `${m["kind"]}/${m["metadata"].name}`).sort()).toEqual(
      ["Namespace/fundament-system", "Namespace/portcullis-clusters", ...crdFiles.map((f) => `CustomResourceDefinition/${f.replace(/\.yaml$/, "")}`)].sort(),
    );
  });

  it("the namespaced objects of the other kustomizations go to fundament-system, save the cluster registry's Role and RoleBinding", () => {
    const registryRbac = (m: Manifest) => (m["kind"] === "Role" || m["kind"] === "RoleBinding") && m["metadata"].name === "portcullis-cluster-registry";
    for (const dir of ["deploy/k8s", "deploy/k8s/monitoring"] as const) {
      for (const m of rendered[dir].filter((o) => !String(o["kind"]).startsWith("Cluster") && !registryRbac(o))) expect(m["metadata"].namespace, `${dir} ${m["kind"]}`).toBe("fundament-system");
    }
  });

  it("the cluster registry has a namespace of its own (issue 42): the shipped configuration watches it, the Role to read its Secrets is there, nothing else is", () => {
    const registryNamespace = (parse(read("deploy/k8s/portcullis.yaml")) as Manifest)["clusterRegistry"].namespace;
    expect(registryNamespace).toBe("portcullis-clusters");
    expect(find("deploy/k8s/shared", "Namespace", registryNamespace)["metadata"].labels).toMatchObject({ "pod-security.kubernetes.io/enforce": "restricted" });
    const there = Object.values(rendered)
      .flat()
      .filter((m) => m["metadata"].namespace === registryNamespace);
    expect(there.map((m) => `${m["kind"]}/${m["metadata"].name}`).sort()).toEqual(["Role/portcullis-cluster-registry", "RoleBinding/portcullis-cluster-registry"]);
    // And no other Role reads Secrets anywhere.
    const secretReaders = Object.values(rendered)
      .flat()
      .filter((m) => (m["kind"] === "Role" || m["kind"] === "ClusterRole") && (m["rules"] ?? []).some((r: Manifest) => (r["resources"] ?? []).includes("secrets")));
    expect(secretReaders.map((m) => `${m["kind"]}/${m["metadata"].namespace}/${m["metadata"].name}`)).toEqual([`Role/${registryNamespace}/portcullis-cluster-registry`]);
    const binding = find("deploy/k8s", "RoleBinding", "portcullis-cluster-registry");
    expect(binding["roleRef"]).toMatchObject({ kind: "Role", name: "portcullis-cluster-registry" });
    expect(binding["subjects"]).toEqual([{ kind: "ServiceAccount", name: "portcullis", namespace: "fundament-system" }]);
  });
});

describe("monitoring", () => {
  const admin = find("deploy/k8s", "Service", "portcullis-admin");
  const container = find("deploy/k8s", "Deployment", "portcullis")["spec"].template.spec.containers[0];
  const monitor = find("deploy/k8s/monitoring", "ServiceMonitor");
  const rule = find("deploy/k8s/monitoring", "PrometheusRule");
  const operations = read("docs/operations.md");

  it("the admin Service reaches the admin port, and the ServiceMonitor selects it (and only it) by labels and port name", () => {
    expect(admin["spec"].ports).toEqual([{ name: "admin", port: 9090, targetPort: "admin", protocol: "TCP", appProtocol: "http" }]);
    expect(container.ports.find((p: Manifest) => p["name"] === "admin")).toBeDefined();
    const selected = rendered["deploy/k8s"].filter(
      (m) => m["kind"] === "Service" && Object.entries(monitor["spec"].selector.matchLabels).every(([k, v]) => m["metadata"].labels?.[k] === v),
    );
    expect(selected.map((s) => s["metadata"].name)).toEqual(["portcullis-admin"]);
    expect(monitor["spec"].endpoints).toMatchObject([{ port: "admin", path: "/metrics" }]);
  });

  it("the PrometheusRule holds exactly the alerts docs/operations.md lists", () => {
    const alerts = rule["spec"].groups.flatMap((g: Manifest) => g["rules"].map((r: Manifest) => r["alert"]));
    const documented = [...operations.matchAll(/^\| `(Portcullis[A-Za-z]+)` \|/gm)].map((m) => m[1]);
    expect(alerts.sort()).toEqual(documented.sort());
    expect(new Set(alerts).size).toBe(alerts.length);
  });

  const metricsIn = (expr: string) => [...expr.matchAll(/\b((?:portcullis|nodejs|process|kube)_[a-z0-9_]+)/g)].map((m) => m[1]!.replace(/_(bucket|count|sum)$/, ""));
  const documentedMetric = (name: string) => operations.includes(`\`${name}\``) || operations.includes(`\`${name}{`);

  it("every metric an alert or a dashboard panel reads is documented in docs/operations.md", () => {
    const dashboard = JSON.parse(read("deploy/k8s/monitoring/dashboard.json")) as Manifest;
    const exprs = [
      ...rule["spec"].groups.flatMap((g: Manifest) => g["rules"].map((r: Manifest) => r["expr"] as string)),
      ...dashboard["panels"].flatMap((p: Manifest) => p["targets"].map((t: Manifest) => t["expr"] as string)),
    ];
    const undocumented = exprs.flatMap(metricsIn).filter((name) => !documentedMetric(name));
    expect([...new Set(undocumented)]).toEqual([]);
  });

  it("every portcullis metric an alert reads is one the server registers", () => {
    const registered = new Set([...read("src/server/prometheus.ts").matchAll(/name: "(portcullis_[a-z_]+)"/g)].map((m) => m[1]!));
    const exprs = rule["spec"].groups.flatMap((g: Manifest) => g["rules"].map((r: Manifest) => r["expr"] as string));
    const unknown = exprs.flatMap(metricsIn).filter((name: string) => name.startsWith("portcullis_") && !registered.has(name));
    expect(registered.size).toBeGreaterThan(5);
    expect(unknown).toEqual([]);
  });

  it("a change feed left unsynced (a credential without the feeds' grants) is alerted on", () => {
    const alert = rule["spec"].groups.flatMap((g: Manifest) => g["rules"]).find((r: Manifest) => r["alert"] === "PortcullisEventSourceUnsynced");
    expect(alert).toMatchObject({ expr: expect.stringContaining("portcullis_event_source_synced"), for: "10m" });
  });

  it("the dashboard is shipped as a ConfigMap Grafana's sidecar picks up", () => {
    const dashboard = find("deploy/k8s/monitoring", "ConfigMap", "portcullis-dashboard");
    expect(dashboard["metadata"].labels).toMatchObject({ grafana_dashboard: "1" });
    expect(JSON.parse(dashboard["data"]["portcullis.json"])).toMatchObject({ uid: "portcullis", title: "portcullis" });
  });
});

describe("memory", () => {
  const resources = find("deploy/k8s", "Deployment", "portcullis")["spec"].template.spec.containers[0].resources;
  const mib = (quantity: string) => {
    const m = /^(\d+)(Mi|Gi)$/.exec(quantity);
    if (m === null) throw new Error(`unexpected quantity ${quantity}`);
    return Number(m[1]) * (m[2] === "Gi" ? 1024 : 1);
  };
  const measured = measuredMemory();

  it("the limit holds the RSS measured at the scale target with at least 25% headroom; the request is the run's, at least the default cache sizes' RSS", () => {
    expect(mib(resources.limits.memory)).toBeGreaterThanOrEqual(measured.scaleTargetMiB * 1.25);
    expect(resources.requests.memory).toBe(measured.request);
    expect(mib(resources.requests.memory)).toBeGreaterThanOrEqual(measured.defaultCachesMiB);
    expect(mib(resources.requests.memory)).toBeGreaterThanOrEqual(measured.idleMiB);
    expect(mib(resources.requests.memory)).toBeLessThanOrEqual(mib(resources.limits.memory));
  });

  it("docs/deployment.md states the same limit and request", () => {
    const doc = read("docs/deployment.md");
    const spelled = (quantity: string) => quantity.replace(/(Mi|Gi)$/, " $1B");
    expect(doc).toContain(`limit, **${spelled(resources.limits.memory)}**`);
    expect(doc).toContain(`request, **${spelled(resources.requests.memory)}**`);
    expect(doc).toMatch(/cached\s+users per GiB/);
    expect(doc).toMatch(/indexed installations per GiB/);
  });
});

describe("installs from the committed lockfile", () => {
  const commands = (file: string) => read(file).split("\n").filter((l) => !l.trimStart().startsWith("#"));

  it("the Dockerfile runs npm ci, never npm install", () => {
    expect(read("Dockerfile")).toMatch(/^RUN npm ci --omit=dev\b/m);
    expect(commands("Dockerfile")).not.toContainEqual(expect.stringMatching(/npm install/));
  });

  it("CI installs with npm ci, then runs the README's npm install only to fail if it changes the tree", () => {
    const lines = commands(".ci/run");
    const ci = lines.findIndex((l) => /^npm ci\b/.test(l));
    const installs = lines.flatMap((l, at) => (/^\s*npm install(\s|$)/.test(l) ? [at] : []));
    expect(ci).toBeGreaterThanOrEqual(0);
    expect(installs.map((at) => lines[at])).toEqual(["npm install --no-audit --no-fund"]);
    expect(installs[0]!).toBeGreaterThan(ci);
    expect(lines[installs[0]! + 1]).toBe('tree_unchanged "npm install"');
    expect(lines.slice(ci + 1, installs[0]!)).toContain('tree_unchanged "npm ci"');
  });
});
