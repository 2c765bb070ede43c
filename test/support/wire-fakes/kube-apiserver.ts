/**
 * Enough of a kube-apiserver for portcullis's real Kubernetes ports, over plain HTTP (client-node
 * allows `http:` servers only with `insecure-skip-tls-verify: true`, which the kubeconfig sets):
 *  - SubjectAccessReview  `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`
 *  - TokenRequest         `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`
 *  - list and watch       `GET /apis/plugins.fundament.io/v1/plugininstallations[?watch=true]`
 *  - readiness            `GET /readyz` (200, or 500 naming the failed check while `ready` is false)
 * The watch streams JSON lines from an event log with resource versions; a watch from a compacted
 * version gets the real API server's `ERROR` event with a 410 Status. A watch that asks for
 * bookmarks gets a `BOOKMARK` every `bookmarkIntervalMs`, as the real watch cache sends them, and
 * one with a timeoutSeconds is ended cleanly after it.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { type Fault, HttpFake, json } from "./http-fake.ts";

export interface FakeInstallation {
  readonly uid: string;
  readonly name: string;
  readonly definitionHash: string;
  readonly phase?: string;
  readonly deleting?: boolean;
  /** More fields, as a real API server's objects carry (merged into each part; realistic-objects.ts). */
  readonly extra?: { readonly metadata?: Record<string, unknown>; readonly spec?: Record<string, unknown>; readonly status?: Record<string, unknown> };
}

interface WatchEvent {
  readonly rv: number;
  readonly type: "ADDED" | "MODIFIED" | "DELETED";
  readonly object: Record<string, unknown>;
}

export interface SubjectAccessReviewSpec {
  readonly user?: string;
  readonly groups?: string[];
  readonly resourceAttributes?: Record<string, string>;
  readonly nonResourceAttributes?: { verb: string; path: string };
}

const PLUGIN_INSTALLATIONS = "/apis/plugins.fundament.io/v1/plugininstallations";
const SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const TOKEN_REQUEST = /^\/api\/v1\/namespaces\/([^/]+)\/serviceaccounts\/([^/]+)\/token$/;

export class FakeKubeApi extends HttpFake {
  /** portcullis's own credential for this API server; requests without it get 401. */
  readonly bearer = `kubeconfig-${randomBytes(16).toString("hex")}`;
  readonly faults: { sar: Fault; tokenRequest: Fault; list: Fault; watch: Fault; readyz: Fault } = {
    readyz: "healthy",
    sar: "healthy",
    tokenRequest: "healthy",
    list: "healthy",
    watch: "healthy",
  };
  sarAllowed: (spec: SubjectAccessReviewSpec) => boolean = () => true;
  /** Set to answer every review with this `status.evaluationError` (an authorizer that failed). */
  sarEvaluationError: string | undefined = undefined;
  /** What `/readyz` says: false for a server still starting (its RBAC informers not synced). */
  ready = true;
  /** How often a watch that allows bookmarks gets one; undefined sends none. */
  bookmarkIntervalMs: number | undefined = undefined;
  /** While true, open watches stay connected but receive nothing: no events, no bookmarks. */
  watchesSilent = false;
  /** `namespace/name` of every ServiceAccount that exists; TokenRequest for others is a 404. */
  readonly serviceAccounts = new Set<string>();
  /** The lifetime of issued tokens; portcullis refreshes at 80% of it. */
  tokenLifetimeSeconds = 3600;
  /** When set, the text of every token handed out (a broken or hostile API server's); a random token otherwise. */
  tokenText: string | undefined = undefined;
  /** Every ServiceAccount token handed out: none of them may ever appear in a log. */
  readonly issuedTokens: string[] = [];
  readonly sarSpecs: SubjectAccessReviewSpec[] = [];
  #rv = 1;
  #compactedBefore = 0;
  readonly #objects = new Map<string, Record<string, unknown>>();
  readonly #events: WatchEvent[] = [];
  readonly #watchers = new Set<ServerResponse>();
  readonly #bookmarkTimers = new Set<NodeJS.Timeout>();

  /** Watch streams open right now. */
  get watchers(): number {
    return this.#watchers.size;
  }

  put(installation: FakeInstallation): void {
    const type = this.#objects.has(installation.uid) ? "MODIFIED" : "ADDED";
    const object = this.#object(installation, ++this.#rv);
    this.#objects.set(installation.uid, object);
    this.#emit({ rv: this.#rv, type, object });
  }

  remove(uid: string): void {
    const object = this.#objects.get(uid);
    if (object === undefined) return;
    this.#objects.delete(uid);
    this.#emit({ rv: ++this.#rv, type: "DELETED", object });
  }

  /** Changes the store without telling open watches: only a relist can see it. */
  putSilently(installation: FakeInstallation): void {
    this.#objects.set(installation.uid, this.#object(installation, ++this.#rv));
  }

  removeSilently(uid: string): void {
    this.#objects.delete(uid);
    this.#rv++;
  }

  /** Compacts history: every open watch gets ERROR 410 and ends, and older versions cannot be watched. */
  compact(): void {
    this.#compactedBefore = this.#rv;
    for (const w of this.#watchers) this.#gone(w);
    this.#watchers.clear();
  }

  /** Cuts every open watch in the middle of an event line, as a dropped connection would. */
  cutWatches(): void {
    for (const w of this.#watchers) {
      w.write('{"type":"MODIFIED","object":{"kind":"PluginIns');
      w.socket?.destroy();
    }
    this.#watchers.clear();
  }

  /** Ends every open watch cleanly, as the API server does when a watch reaches its timeout. */
  endWatches(): void {
    for (const w of this.#watchers) w.end();
    this.#watchers.clear();
  }

  writeKubeconfig(dir: string): string {
    const path = join(dir, `kubeconfig-${this.port}.yaml`);
    writeFileSync(
      path,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: fake",
        "  cluster:",
        `    server: ${this.url}`,
        "    insecure-skip-tls-verify: true",
        "users:",
        "- name: portcullis",
        "  user:",
        `    token: ${this.bearer}`,
        "contexts:",
        "- name: fake",
        "  context: {cluster: fake, user: portcullis}",
        "current-context: fake",
        "",
      ].join("\n"),
    );
    return path;
  }

  protected handle(req: IncomingMessage, res: ServerResponse, body: string): void {
    if (req.headers.authorization !== `Bearer ${this.bearer}`) {
      status(res, 401, "Unauthorized", "Unauthorized");
      return;
    }
    const url = new URL(req.url ?? "/", "http://fake");
    const token = TOKEN_REQUEST.exec(url.pathname);
    if (req.method === "GET" && url.pathname === "/readyz") {
      this.answer(this.faults.readyz, res, () => {
        if (this.ready) res.writeHead(200, { "content-type": "text/plain" }).end("ok");
        else res.writeHead(500, { "content-type": "text/plain" }).end("[-]poststarthook/rbac/bootstrap-roles failed: not finished\nreadyz check failed");
      });
    } else if (req.method === "POST" && url.pathname === SAR) {
      this.answer(this.faults.sar, res, () => this.#review(res, body));
    } else if (req.method === "POST" && token !== null) {
      this.answer(this.faults.tokenRequest, res, () => this.#tokenRequest(res, decodeURIComponent(token[1]!), decodeURIComponent(token[2]!), body));
    } else if (req.method === "GET" && url.pathname === PLUGIN_INSTALLATIONS && url.searchParams.get("watch") === "true") {
      this.answer(this.faults.watch, res, () =>
        this.#watch(res, Number(url.searchParams.get("resourceVersion") ?? "0"), url.searchParams.get("allowWatchBookmarks") === "true", Number(url.searchParams.get("timeoutSeconds") ?? "0")),
      );
    } else if (req.method === "GET" && url.pathname === PLUGIN_INSTALLATIONS) {
      this.answer(this.faults.list, res, () => this.#list(res, Number(url.searchParams.get("limit") ?? 0), Number(url.searchParams.get("continue") ?? 0)));
    } else {
      status(res, 404, "NotFound", "the server could not find the requested resource");
    }
  }

  /**
   * A page of `limit` objects (all of them without one) from position `from`, with a continue token
   * while more follow. Unlike a real API server, later pages are not the first page's snapshot.
   */
  #list(res: ServerResponse, limit: number, from: number): void {
    const all = [...this.#objects.values()];
    const more = limit > 0 && from + limit < all.length;
    json(res, 200, {
      apiVersion: "plugins.fundament.io/v1",
      kind: "PluginInstallationList",
      metadata: { resourceVersion: String(this.#rv), ...(more ? { continue: String(from + limit) } : {}) },
      items: limit > 0 ? all.slice(from, from + limit) : all,
    });
  }

  #review(res: ServerResponse, body: string): void {
    const review = JSON.parse(body) as { spec: SubjectAccessReviewSpec };
    this.sarSpecs.push(review.spec);
    const allowed = this.sarAllowed(review.spec);
    const evaluationError = this.sarEvaluationError === undefined ? {} : { evaluationError: this.sarEvaluationError };
    json(res, 201, { apiVersion: "authorization.k8s.io/v1", kind: "SubjectAccessReview", spec: review.spec, status: { allowed, ...evaluationError } });
  }

  #tokenRequest(res: ServerResponse, namespace: string, name: string, body: string): void {
    if (!this.serviceAccounts.has(`${namespace}/${name}`)) {
      status(res, 404, "NotFound", `serviceaccounts "${name}" not found`);
      return;
    }
    const token = this.tokenText ?? `sa-${randomBytes(24).toString("base64url")}`;
    this.issuedTokens.push(token);
    json(res, 201, {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: (JSON.parse(body) as { spec: unknown }).spec,
      status: { token, expirationTimestamp: new Date(Date.now() + this.tokenLifetimeSeconds * 1000).toISOString() },
    });
  }

  #watch(res: ServerResponse, from: number, bookmarks: boolean, timeoutSeconds: number): void {
    if (from < this.#compactedBefore) {
      this.#gone(res);
      return;
    }
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
    res.flushHeaders();
    this.longLived(res);
    for (const e of this.#events) if (e.rv > from && !this.watchesSilent) res.write(line(e));
    this.#watchers.add(res);
    const interval = this.bookmarkIntervalMs;
    const timer = bookmarks && interval !== undefined ? setInterval(() => this.#bookmark(res), interval) : undefined;
    if (timer !== undefined) this.#bookmarkTimers.add(timer);
    // Ended cleanly after its timeoutSeconds, as kube-apiserver's are (a silent watch never ends).
    const timeout = timeoutSeconds > 0 ? setTimeout(() => this.watchesSilent || res.end(), timeoutSeconds * 1_000) : undefined;
    res.on("close", () => {
      clearTimeout(timeout);
      this.#watchers.delete(res);
      clearInterval(timer);
      if (timer !== undefined) this.#bookmarkTimers.delete(timer);
    });
  }

  #bookmark(res: ServerResponse): void {
    if (this.watchesSilent || res.destroyed) return;
    const object = { apiVersion: "plugins.fundament.io/v1", kind: "PluginInstallation", metadata: { resourceVersion: String(this.#rv) } };
    res.write(`${JSON.stringify({ type: "BOOKMARK", object })}\n`);
  }

  override async stop(): Promise<void> {
    for (const t of this.#bookmarkTimers) clearInterval(t);
    this.#bookmarkTimers.clear();
    await super.stop();
  }

  #gone(res: ServerResponse): void {
    if (!res.headersSent) res.writeHead(200, { "content-type": "application/json" });
    res.end(
      `${JSON.stringify({
        type: "ERROR",
        object: { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message: "too old resource version", reason: "Expired", code: 410 },
      })}\n`,
    );
  }

  #emit(event: WatchEvent): void {
    this.#events.push(event);
    if (this.watchesSilent) return;
    for (const w of this.#watchers) w.write(line(event));
  }

  #object(i: FakeInstallation, rv: number): Record<string, unknown> {
    return {
      apiVersion: "plugins.fundament.io/v1",
      kind: "PluginInstallation",
      metadata: {
        name: i.name,
        uid: i.uid,
        resourceVersion: String(rv),
        ...(i.deleting ? { deletionTimestamp: new Date().toISOString() } : {}),
        ...i.extra?.metadata,
      },
      spec: {
        organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03",
        definitionRef: { pluginName: i.name, pluginVersion: "1.4.0", definitionHash: i.definitionHash },
        ...i.extra?.spec,
      },
      status: { phase: i.phase ?? "Running", ...i.extra?.status },
    };
  }
}

function line(e: WatchEvent): string {
  return `${JSON.stringify({ type: e.type, object: e.object })}\n`;
}

function status(res: ServerResponse, code: number, reason: string, message: string): void {
  json(res, code, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code });
}
