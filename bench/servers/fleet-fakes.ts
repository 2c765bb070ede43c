/**
 * The fleet benchmark's dependencies, all wire-level fakes in one process (so their memory and CPU
 * are not charged to portcullis):
 *  - the member clusters' API servers: ONE HTTPS server standing in for every registered cluster.
 *    Each cluster has its own bearer token (`fleet-<clusterId>`), which is how the fake tells the
 *    clusters apart; it serves the PluginInstallation list and watch (the same installations for
 *    every cluster, with a bookmark every `bookmarkMs` on each watch), SubjectAccessReview (always
 *    allowed), TokenRequest (any ServiceAccount) and /readyz;
 *  - the management cluster: another HTTPS server with the registry's Secrets (core/v1, one
 *    namespace, list and watch with a label selector, bookmarks);
 *  - OpenFGA's check endpoint (every can_view allowed);
 *  - a control port on 127.0.0.1 for the runner: register or remove a cluster (a Secret), read and
 *    reset the call counters, count the open watches.
 * Every call that portcullis makes is counted here, with the distinct keys it was for, so the runner
 * can say how many calls a fleet of replicas makes per unique (user, cluster, request).
 *
 *   node bench/servers/fleet-fakes.ts --ready-file F --dir DIR [--installations 100] [--namespace N]
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createHttpsServer, type Server } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { TestPki } from "../../test/support/certificates.ts";
import { announceReady } from "./common.ts";

/** The label a registry Secret carries (the cluster registry's contract). */
export const CLUSTER_SECRET_LABEL = { key: "portcullis.fundament.io/secret-type", value: "cluster" } as const;
export const REGISTRY_NAMESPACE = "fundament-clusters";
const MANAGEMENT_TOKEN = `management-${randomBytes(12).toString("hex")}`;

/** The bearer token of one registered cluster: how the shared fake knows which cluster is calling. */
export const clusterToken = (clusterId: string) => `fleet-${clusterId}`;

/** What the control port reports. */
export interface FleetCounts {
  readonly openfgaChecks: number;
  readonly subjectAccessReviews: number;
  readonly tokenRequests: number;
  readonly installationLists: number;
  /** Distinct keys among the calls since the last reset, as each cache keys them. */
  readonly distinct: { readonly openfga: number; readonly subjectAccessReviews: number; readonly tokenRequests: number };
  /** PluginInstallation watches open right now, and on how many distinct clusters. */
  readonly openWatches: number;
  readonly watchedClusters: number;
  /** Secret watches open on the management fake. */
  readonly registryWatches: number;
  readonly registeredClusters: number;
}

export interface FleetFakesInfo {
  readonly port: number;
  readonly controlUrl: string;
  readonly memberPort: number;
  readonly memberUrl: string;
  readonly managementPort: number;
  readonly openfgaUrl: string;
  readonly storeId: string;
  /** PEM of the CA that signed both HTTPS fakes' certificates. */
  readonly caPem: string;
  readonly managementKubeconfig: string;
  readonly namespace: string;
  readonly installations: Array<{ uid: string; name: string; pluginName: string; definitionHash: string }>;
}

const PINNED = `sha256:${"ab".repeat(32)}`;

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function kubeStatus(res: ServerResponse, code: number, reason: string, message: string): void {
  json(res, code, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code });
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolveBody, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolveBody(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

/** Holds a watch response open, with a bookmark every `intervalMs` (jittered, so 1,000 watches do not beat together). */
function holdWatch(res: ServerResponse, watchers: Set<ServerResponse>, intervalMs: number, bookmark: () => string): void {
  res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
  res.flushHeaders();
  watchers.add(res);
  const timer = setInterval(() => res.write(bookmark()), intervalMs * (0.75 + Math.random() * 0.5));
  res.on("close", () => {
    watchers.delete(res);
    clearInterval(timer);
  });
}

/**
 * Idle connections kept for two minutes, as an API server keeps them (Node's default closes them
 * after 5 s, racing portcullis's pools, which keep theirs 30 s: a reused socket the server is
 * closing is an ECONNRESET, which the benchmark would count as a dependency failure of the fake's).
 */
function keepConnections(server: { keepAliveTimeout: number; headersTimeout: number; requestTimeout: number }): void {
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 130_000;
  server.requestTimeout = 0;
}

async function listen(server: Server | ReturnType<typeof createHttpServer>): Promise<number> {
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  return (server.address() as AddressInfo).port;
}

export async function startFleetFakes(options: { dir: string; installations: number; namespace: string; bookmarkMs: number }) {
  const pki = new TestPki();
  pki.ca("fleet-ca");
  const leaf = pki.leaf("fleet-api", "fleet-ca", { server: ["IP:127.0.0.1", "DNS:localhost"] });
  const caPem = pki.pem("fleet-ca.crt").toString("utf8");
  pki.remove();

  const installations = Array.from({ length: options.installations }, (_, k) => ({
    uid: `5eed0003-${k.toString(16).padStart(4, "0")}-4000-8000-${k.toString(16).padStart(12, "0")}`,
    name: `plugin-${k}`,
    pluginName: `plugin-${k % 20}`,
    definitionHash: PINNED,
  }));
  const installationObjects = installations.map((i) => ({
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name: i.name, uid: i.uid, resourceVersion: "1" },
    spec: { organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03", definitionRef: { pluginName: i.pluginName, pluginVersion: "1.4.0", definitionHash: i.definitionHash } },
    status: { phase: "Running" },
  }));
  const installationList = JSON.stringify({ apiVersion: "plugins.fundament.io/v1", kind: "PluginInstallationList", metadata: { resourceVersion: "1" }, items: installationObjects });
  const installationBookmark = `${JSON.stringify({ type: "BOOKMARK", object: { apiVersion: "plugins.fundament.io/v1", kind: "PluginInstallation", metadata: { resourceVersion: "1" } } })}\n`;

  const counts = { subjectAccessReviews: 0, tokenRequests: 0, installationLists: 0, openfgaChecks: 0 };
  const distinct = { openfga: new Set<string>(), subjectAccessReviews: new Set<string>(), tokenRequests: new Set<string>() };
  const memberWatches = new Map<ServerResponse, string>();
  const memberWatchSet = new Set<ServerResponse>();
  /** Registered clusters: id → bearer token; a token the fake does not know is a 401. */
  const knownTokens = new Map<string, string>();

  const memberSockets = new Set<Socket>();
  const member = createHttpsServer({ cert: leaf.cert, key: leaf.key }, (req, res) => {
    void (async () => {
      const body = await readBody(req);
      const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
      const clusterId = knownTokens.get(token);
      if (clusterId === undefined) return kubeStatus(res, 401, "Unauthorized", "Unauthorized");
      const url = new URL(req.url ?? "/", "https://fake");
      const path = url.pathname;
      if (req.method === "GET" && path === "/readyz") {
        res.writeHead(200, { "content-type": "text/plain" }).end("ok");
      } else if (req.method === "POST" && path === "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
        const review = JSON.parse(body) as { spec: unknown };
        counts.subjectAccessReviews++;
        distinct.subjectAccessReviews.add(`${clusterId} ${JSON.stringify(review.spec)}`);
        json(res, 201, { apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", spec: review.spec, status: { allowed: true } });
      } else if (req.method === "POST" && /^\/api\/v1\/namespaces\/[^/]+\/serviceaccounts\/[^/]+\/token$/.test(path)) {
        counts.tokenRequests++;
        distinct.tokenRequests.add(`${clusterId} ${path}`);
        // About the size of a real ServiceAccount token (~1 KB).
        const saToken = `eyJhbGciOiJSUzI1NiJ9.${randomBytes(520).toString("base64url")}.${randomBytes(256).toString("base64url")}`;
        json(res, 201, {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: (JSON.parse(body) as { spec: unknown }).spec,
          status: { token: saToken, expirationTimestamp: new Date(Date.now() + 3_600_000).toISOString() },
        });
      } else if (req.method === "GET" && path === "/apis/plugins.fundament.io/v1/plugininstallations") {
        if (url.searchParams.get("watch") === "true") {
          memberWatches.set(res, clusterId);
          res.on("close", () => memberWatches.delete(res));
          holdWatch(res, memberWatchSet, options.bookmarkMs, () => installationBookmark);
        } else {
          counts.installationLists++;
          res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(installationList) }).end(installationList);
        }
      } else {
        kubeStatus(res, 404, "NotFound", "the server could not find the requested resource");
      }
    })().catch(() => res.destroy());
  });
  keepConnections(member);
  member.on("connection", (s: Socket) => {
    memberSockets.add(s);
    s.on("close", () => memberSockets.delete(s));
  });
  const memberPort = await listen(member);
  const memberUrl = `https://127.0.0.1:${memberPort}`;

  // The management cluster: the registry's Secrets, by namespace, with resource versions and a watch.
  let rv = 1;
  const secrets = new Map<string, Map<string, Record<string, unknown>>>();
  const secretEvents: Array<{ rv: number; namespace: string; line: string }> = [];
  const registryWatchers = new Map<ServerResponse, string>();
  const registryWatchSet = new Set<ServerResponse>();
  const inNamespace = (namespace: string) => {
    let m = secrets.get(namespace);
    if (m === undefined) secrets.set(namespace, (m = new Map()));
    return m;
  };
  const emitSecret = (namespace: string, type: "ADDED" | "MODIFIED" | "DELETED", object: Record<string, unknown>) => {
    const line = `${JSON.stringify({ type, object })}\n`;
    secretEvents.push({ rv, namespace, line });
    for (const [w, ns] of registryWatchers) if (ns === namespace) w.write(line);
  };
  const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");
  const register = (namespace: string, clusterId: string) => {
    knownTokens.set(clusterToken(clusterId), clusterId);
    const name = `cluster-${clusterId}`;
    const store = inNamespace(namespace);
    const type = store.has(name) ? "MODIFIED" : "ADDED";
    const object = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace, uid: clusterId, resourceVersion: String(++rv), labels: { [CLUSTER_SECRET_LABEL.key]: CLUSTER_SECRET_LABEL.value } },
      type: "Opaque",
      data: { clusterId: b64(clusterId), server: b64(memberUrl), "ca.crt": b64(caPem), token: b64(clusterToken(clusterId)) },
    };
    store.set(name, object);
    emitSecret(namespace, type, object);
  };
  const unregister = (namespace: string, clusterId: string) => {
    const name = `cluster-${clusterId}`;
    const store = inNamespace(namespace);
    const object = store.get(name);
    if (object === undefined) return;
    store.delete(name);
    rv++;
    emitSecret(namespace, "DELETED", { ...object, metadata: { ...(object["metadata"] as object), resourceVersion: String(rv) } });
  };
  const matchesSelector = (object: Record<string, unknown>, selector: string | null) => {
    if (selector === null || selector === "") return true;
    const labels = (object["metadata"] as { labels?: Record<string, string> }).labels ?? {};
    return selector.split(",").every((term) => {
      const [k, v] = term.split(/==?/);
      return v === undefined ? labels[k!] !== undefined : labels[k!] === v;
    });
  };
  const SECRETS_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/secrets$/;
  const management = createHttpsServer({ cert: leaf.cert, key: leaf.key }, (req, res) => {
    void (async () => {
      await readBody(req);
      if (req.headers.authorization !== `Bearer ${MANAGEMENT_TOKEN}`) return kubeStatus(res, 401, "Unauthorized", "Unauthorized");
      const url = new URL(req.url ?? "/", "https://fake");
      if (req.method === "GET" && url.pathname === "/readyz") {
        res.writeHead(200, { "content-type": "text/plain" }).end("ok");
        return;
      }
      const namespace = SECRETS_PATH.exec(url.pathname)?.[1];
      if (req.method !== "GET" || namespace === undefined) return kubeStatus(res, 404, "NotFound", "the server could not find the requested resource");
      const selector = url.searchParams.get("labelSelector");
      if (url.searchParams.get("watch") === "true") {
        const from = Number(url.searchParams.get("resourceVersion") ?? "0");
        registryWatchers.set(res, namespace);
        res.on("close", () => registryWatchers.delete(res));
        holdWatch(res, registryWatchSet, options.bookmarkMs, () => `${JSON.stringify({ type: "BOOKMARK", object: { apiVersion: "v1", kind: "Secret", metadata: { resourceVersion: String(rv) } } })}\n`);
        // Only what matches the selector: a label removed would be a DELETED event to a real watcher; not exercised here.
        for (const e of secretEvents) if (e.rv > from && e.namespace === namespace) res.write(e.line);
        return;
      }
      const items = [...inNamespace(namespace).values()].filter((s) => matchesSelector(s, selector));
      json(res, 200, { apiVersion: "v1", kind: "SecretList", metadata: { resourceVersion: String(rv) }, items });
    })().catch(() => res.destroy());
  });
  keepConnections(management);
  const managementPort = await listen(management);
  const managementKubeconfig = join(options.dir, "management-kubeconfig.yaml");
  writeFileSync(
    managementKubeconfig,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      "- name: management",
      "  cluster:",
      `    server: https://127.0.0.1:${managementPort}`,
      `    certificate-authority-data: ${b64(caPem)}`,
      "users:",
      "- name: portcullis",
      "  user:",
      `    token: ${MANAGEMENT_TOKEN}`,
      "contexts:",
      "- name: management",
      "  context: {cluster: management, user: portcullis}",
      "current-context: management",
      "",
    ].join("\n"),
  );

  // OpenFGA's check endpoint (every can_view allowed), with the keep-alive of the HTTPS fakes.
  const OPENFGA_STORE = "01HVMMBCMGZNT3SED4Z17ECXCA";
  const openfga = createHttpServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      if (req.method !== "POST" || req.url !== `/stores/${OPENFGA_STORE}/check`) return json(res, 404, { code: "undefined_endpoint", message: "Not Found" });
      const tuple = (JSON.parse(body) as { tuple_key: { user: string; object: string } }).tuple_key;
      counts.openfgaChecks++;
      distinct.openfga.add(`${tuple.user} ${tuple.object}`);
      json(res, 200, { allowed: true, resolution: "" });
    })().catch(() => res.destroy());
  });
  keepConnections(openfga);
  const openfgaPort = await listen(openfga);

  const snapshot = (): FleetCounts => {
    return {
      ...counts,
      distinct: { openfga: distinct.openfga.size, subjectAccessReviews: distinct.subjectAccessReviews.size, tokenRequests: distinct.tokenRequests.size },
      openWatches: memberWatches.size,
      watchedClusters: new Set(memberWatches.values()).size,
      registryWatches: registryWatchers.size,
      registeredClusters: [...secrets.values()].reduce((n, m) => n + m.size, 0),
    };
  };

  const control = createHttpServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      const url = new URL(req.url ?? "/", "http://control");
      if (req.method === "GET" && url.pathname === "/counts") return json(res, 200, snapshot());
      if (req.method === "POST" && url.pathname === "/reset") {
        for (const k of Object.keys(counts) as Array<keyof typeof counts>) counts[k] = 0;
        for (const s of Object.values(distinct)) s.clear();
        return json(res, 200, {});
      }
      if (req.method === "POST" && url.pathname === "/clusters") {
        // {"namespace"?, "register": [ids], "unregister": [ids]}; a registered cluster's token is known before its Secret appears.
        const change = JSON.parse(body) as { namespace?: string; register?: string[]; unregister?: string[] };
        const namespace = change.namespace ?? options.namespace;
        for (const id of change.register ?? []) register(namespace, id);
        for (const id of change.unregister ?? []) unregister(namespace, id);
        return json(res, 200, { registeredClusters: inNamespace(namespace).size });
      }
      if (req.method === "POST" && url.pathname === "/tokens") {
        // Static `clusters:` entries: the cluster's credential is known, without a Secret.
        for (const id of JSON.parse(body) as string[]) knownTokens.set(clusterToken(id), id);
        return json(res, 200, {});
      }
      json(res, 404, { error: "not found" });
    })().catch(() => res.destroy());
  });
  const controlPort = await listen(control);

  const info: FleetFakesInfo = {
    port: controlPort,
    controlUrl: `http://127.0.0.1:${controlPort}`,
    memberPort,
    memberUrl,
    managementPort,
    openfgaUrl: `http://127.0.0.1:${openfgaPort}`,
    storeId: OPENFGA_STORE,
    caPem,
    managementKubeconfig,
    namespace: options.namespace,
    installations,
  };
  return {
    info,
    async stop() {
      for (const s of memberSockets) s.destroy();
      for (const w of [...memberWatchSet, ...registryWatchSet]) w.destroy();
      openfga.closeAllConnections();
      await Promise.all([
        new Promise((r) => openfga.close(r)),
        new Promise((r) => member.close(r)),
        new Promise((r) => management.close(r)),
        new Promise((r) => control.close(r)),
      ]);
    },
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      "ready-file": { type: "string" },
      dir: { type: "string" },
      installations: { type: "string", default: "100" },
      namespace: { type: "string", default: REGISTRY_NAMESPACE },
      "bookmark-ms": { type: "string", default: "20000" },
    },
    strict: true,
  });
  if (values["ready-file"] === undefined || values.dir === undefined) throw new Error("--ready-file and --dir are required");
  const fakes = await startFleetFakes({
    dir: values.dir,
    installations: Number(values.installations),
    namespace: values.namespace,
    bookmarkMs: Number(values["bookmark-ms"]),
  });
  announceReady(values["ready-file"], { ...fakes.info });
  process.on("SIGTERM", () => {
    void fakes.stop().then(() => process.exit(0));
  });
}
