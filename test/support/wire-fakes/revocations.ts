/**
 * The management cluster's API server as far as the deny-list reads it: list and watch of
 * `/apis/portcullis.fundament.io/v1alpha1/revocations` over plain HTTP, with the same faults as
 * the other wire fakes, plus cutting and hanging the open watches. Objects are put and removed
 * by name; each change is an event with a new resource version. A watch ends cleanly after its
 * timeoutSeconds, as kube-apiserver's does; while `watchesHung`, watches (open and new) get nothing
 * and never end — the stream open, the bytes stopped — while lists are still answered.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { type Fault, HttpFake, json } from "./http-fake.ts";

const REVOCATIONS = "/apis/portcullis.fundament.io/v1alpha1/revocations";

export class FakeRevocationApi extends HttpFake {
  readonly bearer = `kubeconfig-${randomBytes(16).toString("hex")}`;
  readonly faults: { list: Fault; watch: Fault } = { list: "healthy", watch: "healthy" };
  #rv = 1;
  readonly #objects = new Map<string, Record<string, unknown>>();
  readonly #events: Array<{ rv: number; line: string }> = [];
  readonly #watchers = new Set<ServerResponse>();
  /** Watches hung one by one (hangOpenWatches). */
  readonly #hung = new Set<ServerResponse>();
  watchesHung = false;

  /** Hangs every watch, open and new: nothing sent, no end. */
  hangWatches(): void {
    this.watchesHung = true;
  }

  /** Hangs the watches open now, as a frozen connection would (nothing more sent, no end); new watches are served. */
  hangOpenWatches(): void {
    for (const w of this.#watchers) this.#hung.add(w);
  }

  /** Ends every hung watch cleanly (as a late timeout would) and serves watches again. */
  releaseWatches(): void {
    this.watchesHung = false;
    this.#hung.clear();
    for (const w of this.#watchers) w.end();
  }

  get watchers(): number {
    return this.#watchers.size;
  }

  put(name: string, spec: Record<string, unknown>): void {
    const type = this.#objects.has(name) ? "MODIFIED" : "ADDED";
    const object = { apiVersion: "portcullis.fundament.io/v1alpha1", kind: "Revocation", metadata: { name, resourceVersion: String(++this.#rv) }, spec };
    this.#objects.set(name, object);
    this.#emit(type, object);
  }

  remove(name: string): void {
    const object = this.#objects.get(name);
    if (object === undefined) return;
    this.#objects.delete(name);
    this.#emit("DELETED", { ...object, metadata: { name, resourceVersion: String(++this.#rv) } });
  }

  /** Cuts every open watch in the middle of an event line, as a dropped connection would. */
  cutWatches(): void {
    for (const w of this.#watchers) {
      w.write('{"type":"ADDED","object":{"kind":"Revoc');
      w.socket?.destroy();
    }
    this.#watchers.clear();
  }

  writeKubeconfig(dir: string): string {
    const path = join(dir, `kubeconfig-revocations-${this.port}.yaml`);
    writeFileSync(
      path,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: management",
        "  cluster:",
        `    server: ${this.url}`,
        "    insecure-skip-tls-verify: true",
        "users:",
        "- name: portcullis",
        "  user:",
        `    token: ${this.bearer}`,
        "contexts:",
        "- name: management",
        "  context: {cluster: management, user: portcullis}",
        "current-context: management",
        "",
      ].join("\n"),
    );
    return path;
  }

  protected handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://fake");
    if (req.headers.authorization !== `Bearer ${this.bearer}`) {
      json(res, 401, { kind: "Status", apiVersion: "v1", status: "Failure", reason: "Unauthorized", code: 401 });
    } else if (req.method === "GET" && url.pathname === REVOCATIONS && url.searchParams.get("watch") === "true") {
      this.answer(this.faults.watch, res, () => this.#watch(res, Number(url.searchParams.get("resourceVersion") ?? "0"), Number(url.searchParams.get("timeoutSeconds") ?? "0")));
    } else if (req.method === "GET" && url.pathname === REVOCATIONS) {
      this.answer(this.faults.list, res, () =>
        json(res, 200, {
          apiVersion: "portcullis.fundament.io/v1alpha1",
          kind: "RevocationList",
          metadata: { resourceVersion: String(this.#rv) },
          items: [...this.#objects.values()],
        }),
      );
    } else {
      json(res, 404, { kind: "Status", apiVersion: "v1", status: "Failure", reason: "NotFound", code: 404 });
    }
  }

  #watch(res: ServerResponse, from: number, timeoutSeconds: number): void {
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
    res.flushHeaders();
    this.longLived(res);
    if (!this.watchesHung) for (const e of this.#events) if (e.rv > from) res.write(e.line);
    this.#watchers.add(res);
    const timeout = timeoutSeconds > 0 ? setTimeout(() => this.watchesHung || this.#hung.has(res) || res.end(), timeoutSeconds * 1_000) : undefined;
    res.on("close", () => {
      clearTimeout(timeout);
      this.#watchers.delete(res);
      this.#hung.delete(res);
    });
  }

  #emit(type: string, object: Record<string, unknown>): void {
    const line = `${JSON.stringify({ type, object })}\n`;
    this.#events.push({ rv: this.#rv, line });
    if (!this.watchesHung) for (const w of this.#watchers) if (!this.#hung.has(w)) w.write(line);
  }
}
