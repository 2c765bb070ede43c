import { generateKeyPairSync, randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ApiException, KubeConfig, KubernetesObjectApi, type KubernetesObject } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { makeTempDir, resolveBinary, spawnManaged, waitUntilReady, type ManagedProcess } from "./binaries.ts";
import { startEtcd, type Etcd } from "./etcd.ts";
import { freePort } from "./ports.ts";

export interface KubeApiserverOptions {
  /** Extra kube-apiserver flags, e.g. `--feature-gates=...`; they override the defaults. */
  extraArgs?: string[];
  /** Extra etcd flags, e.g. `--experimental-watch-progress-notify-interval=1s`. */
  etcdArgs?: string[];
  /** The authorizer chain (`--authorization-mode`), "RBAC" by default; a repeated flag would append to it. */
  authorizationMode?: string;
}

export interface KubeApiserver {
  /** https://127.0.0.1:port; also the ServiceAccount token issuer and API audience. */
  readonly url: string;
  /** PEM bundle that verifies the serving certificate. */
  readonly caPem: string;
  /** Bearer token of user `admin` in group `system:masters`. */
  readonly adminToken: string;
  /** Kubeconfig with the admin token, for `KubeConfig.loadFromFile`. */
  readonly kubeconfigPath: string;
  /** Its etcd, for fault injection. */
  readonly etcd: Etcd;
  /** The running kube-apiserver process, for fault injection (replaced by each start()). */
  process(): ManagedProcess;
  /** SIGKILLs kube-apiserver and waits for it to exit; etcd, the port, certificates and keys stay. */
  kill(): Promise<void>;
  /** Starts kube-apiserver again after kill(), as before; resolves once it is ready. */
  start(): Promise<void>;
  /** Stops kube-apiserver and its etcd, removing their data. */
  stop(): Promise<void>;
}

/**
 * Starts kube-apiserver (RBAC only) on its own etcd. There is no
 * controller-manager, so: ServiceAccounts get no token Secrets (use
 * TokenRequest), namespaces get no `default` ServiceAccount, and the
 * aggregated ClusterRoles (view, edit, admin) have no rules.
 */
export async function startKubeApiserver(opts: KubeApiserverOptions = {}): Promise<KubeApiserver> {
  const bin = resolveBinary("kubeApiserver");
  const etcd = await startEtcd(opts.etcdArgs);
  let proc: ManagedProcess | undefined;
  const dir = makeTempDir("kube-apiserver");
  try {
    const port = await freePort();
    const url = `https://127.0.0.1:${port}`;

    // A static token file is the simplest admin credential (still supported
    // in 1.37); system:masters bypasses RBAC.
    const adminToken = randomBytes(24).toString("hex");
    writeFileSync(join(dir, "tokens.csv"), `${adminToken},admin,admin,system:masters\n`, { mode: 0o600 });

    const { privateKey, publicKey } = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
      publicKeyEncoding: { type: "spki", format: "pem" },
    });
    writeFileSync(join(dir, "sa.key"), privateKey, { mode: 0o600 });
    writeFileSync(join(dir, "sa.pub"), publicKey);

    const certDir = join(dir, "certs");
    const args = [
      `--etcd-servers=${etcd.clientUrl}`,
      `--secure-port=${port}`,
      "--bind-address=127.0.0.1",
      // No serving cert given: kube-apiserver self-signs one (with its own
      // CA) for localhost/127.0.0.1 and writes both into apiserver.crt.
      `--cert-dir=${certDir}`,
      `--authorization-mode=${opts.authorizationMode ?? "RBAC"}`,
      `--token-auth-file=${join(dir, "tokens.csv")}`,
      // Issuer = the server itself, so its OIDC discovery/JWKS endpoints are
      // reachable at the issuer URL.
      `--service-account-issuer=${url}`,
      `--service-account-key-file=${join(dir, "sa.pub")}`,
      `--service-account-signing-key-file=${join(dir, "sa.key")}`,
      `--api-audiences=${url}`,
      "--service-cluster-ip-range=10.0.0.0/24",
      "--profiling=false",
      ...(opts.extraArgs ?? []),
    ];
    // The directory outlives each process: a restart reuses its certificates and keys.
    const spawnServer = () => spawnManaged("kube-apiserver", bin, args, dir, false);

    const caPath = join(certDir, "apiserver.crt");
    let caPem = "";
    const untilReady = (server: ManagedProcess) => waitUntilReady(server, async () => {
      // Written before the server listens; re-read until ready in case the
      // first read caught it half-written.
      if (!existsSync(caPath)) return false;
      caPem = readFileSync(caPath, "utf8");
      // /readyz covers the post-start hooks (bootstrap RBAC roles among
      // them); the default namespace is created by a controller right after.
      return (await httpsStatus(url, "/readyz", caPem, adminToken)) === 200 &&
        (await httpsStatus(url, "/api/v1/namespaces/default", caPem, adminToken)) === 200;
    }, 90_000);
    proc = spawnServer();
    await untilReady(proc);
    let server = proc;

    const kubeconfigPath = join(dir, "kubeconfig");
    writeFileSync(kubeconfigPath, kubeconfigYaml(url, caPem, adminToken), { mode: 0o600 });

    return {
      url,
      caPem,
      adminToken,
      kubeconfigPath,
      etcd,
      process: () => server,
      async kill() {
        server.signal("SIGKILL");
        await server.exited;
      },
      async start() {
        server = spawnServer();
        await untilReady(server);
      },
      async stop() {
        await server.stop();
        await etcd.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await proc?.stop();
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** A client config for `api` acting as the holder of `token` (default: admin). */
export function kubeConfig(api: KubeApiserver, token: string = api.adminToken): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromString(kubeconfigYaml(api.url, api.caPem, token));
  return kc;
}

function kubeconfigYaml(server: string, caPem: string, token: string): string {
  // JSON is YAML, and needs no extra serializer.
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "test", cluster: { server, "certificate-authority-data": Buffer.from(caPem).toString("base64") } }],
    users: [{ name: "test", user: { token } }],
    contexts: [{ name: "test", context: { cluster: "test", user: "test", namespace: "default" } }],
    "current-context": "test",
  }, null, 2);
}

/** Status code of an authenticated GET; fetch() cannot take a custom CA. */
function httpsStatus(base: string, path: string, ca: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, base), { ca, headers: { authorization: `Bearer ${token}` }, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on("error", reject);
    req.end();
  });
}

/**
 * Applies every document of the given YAML files, in order, as the admin:
 * create, or replace when it exists. After a CustomResourceDefinition it
 * waits for the CRD to be Established, so later documents may use its kind.
 */
export async function applyManifests(api: KubeApiserver, files: string[]): Promise<KubernetesObject[]> {
  const client = KubernetesObjectApi.makeApiClient(kubeConfig(api));
  const applied: KubernetesObject[] = [];
  for (const file of files) {
    for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`);
      const obj = doc.toJS() as KubernetesObject | null;
      if (obj === null) continue; // empty document, e.g. a trailing `---`
      if (obj.kind === "CustomResourceDefinition") {
        applied.push(await applyCrd(api, obj));
        await waitForCrdEstablished(client, obj.metadata?.name ?? "");
      } else {
        applied.push(await applyObject(client, obj));
      }
    }
  }
  return applied;
}

async function applyObject(client: KubernetesObjectApi, obj: KubernetesObject): Promise<KubernetesObject> {
  // Discovery of a just-established CRD's kind can lag by a moment.
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      return await client.create(obj);
    } catch (err) {
      if (err instanceof ApiException && err.code === 409) {
        const existing = await client.read({
          apiVersion: obj.apiVersion ?? "",
          kind: obj.kind ?? "",
          metadata: { name: obj.metadata?.name ?? "", namespace: obj.metadata?.namespace },
        });
        return await client.replace({ ...obj, metadata: { ...obj.metadata, resourceVersion: existing.metadata?.resourceVersion } });
      }
      const unknownKind = err instanceof Error &&
        /Unrecognized API version and kind|Failed to fetch resource metadata/.test(err.message);
      if (!unknownKind || Date.now() > deadline) throw err;
      await sleep(200);
    }
  }
}

/**
 * CRDs go to the API server as raw JSON: client-node's typed serializer drops the `x-kubernetes-*`
 * schema keys (the CEL `x-kubernetes-validations` among them), and those are what a CRD test is for.
 */
async function applyCrd(api: KubeApiserver, obj: KubernetesObject): Promise<KubernetesObject> {
  const base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
  const send = (method: string, path: string, body: unknown) =>
    rawRequest(api, method, path, body).then(({ status, json }) => {
      if (status >= 300) throw new Error(`${method} ${path}: ${status} ${JSON.stringify(json)}`);
      return json as KubernetesObject;
    });
  const created = await rawRequest(api, "POST", base, obj);
  if (created.status < 300) return created.json as KubernetesObject;
  if (created.status !== 409) throw new Error(`POST ${base}: ${created.status} ${JSON.stringify(created.json)}`);
  const existing = await send("GET", `${base}/${obj.metadata?.name}`, undefined);
  return send("PUT", `${base}/${obj.metadata?.name}`, { ...obj, metadata: { ...obj.metadata, resourceVersion: existing.metadata?.resourceVersion } });
}

/** One JSON request as the admin; resolves with the status and the parsed body. */
export async function rawRequest(api: KubeApiserver, method: string, path: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const { status, text } = await rawTextRequest(api, method, path, body);
  return { status, json: text === "" ? undefined : JSON.parse(text) };
}

/** rawRequest's answer as text: for what is not JSON, such as /metrics. */
export function rawTextRequest(api: KubeApiserver, method: string, path: string, body: unknown): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      new URL(path, api.url),
      {
        method,
        ca: api.caPem,
        timeout: 10_000,
        headers: {
          authorization: `Bearer ${api.adminToken}`,
          accept: "application/json",
          ...(payload === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on("error", reject);
    req.end(payload);
  });
}

interface CrdStatus {
  status?: { conditions?: { type: string; status: string }[] };
}

async function waitForCrdEstablished(client: KubernetesObjectApi, name: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const crd = await client.read<KubernetesObject & CrdStatus>({
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name },
    });
    if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    if (Date.now() > deadline) throw new Error(`CRD ${name} not Established after 30 s: ${JSON.stringify(crd.status)}`);
    await sleep(100);
  }
}
