/**
 * `workers: N` with N > 1: the primary process forks N workers (node:cluster); each worker runs the
 * whole server exactly as a single process does, and they share the gRPC listening sockets (the
 * primary accepts connections and hands them to workers round-robin). Each worker has its own
 * caches, index watches, health and internal server: caches warm per worker, and each worker opens
 * its own watches on every API server.
 *
 * The admin port is the primary's, so that one scrape or probe sees every worker: /metrics sums the
 * workers' registries (prom-client's AggregatorRegistry over the cluster IPC channel; see the
 * aggregators in src/server/prometheus.ts), /readyz is ready only while all N workers listen and
 * each is ready (readiness.ts), and POST /explain is handed to one worker. A worker that does not
 * answer within ADMIN_ANSWER_MS counts as not ready; a scrape fails (500) when a worker does not
 * answer prom-client's request within its 5 s.
 *
 * SIGTERM or SIGINT to the primary is passed on to every worker, which drains as a single process
 * does (NOT_SERVING, in-flight checks answered, logs flushed); the primary exits once every worker
 * has, 0 if they all exited cleanly. SIGHUP is passed on too: each worker reloads its configuration
 * (reload.ts). A worker that dies after it was listening is replaced; one that
 * dies before (a start-up failure: configuration, credentials) stops them all, and the primary exits 1,
 * as a single process would.
 */
import cluster, { type Worker } from "node:cluster";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { AggregatorRegistry, type Registry } from "prom-client";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import { type AdminOptions, createAdminServer } from "./admin.ts";
import type { Readiness } from "./readiness.ts";
import { workersReadiness } from "./readiness.ts";

export interface WorkerOptions {
  readonly count: number;
  readonly logger: Logger;
  /** How long workers get to drain before they are killed. */
  readonly graceMs: number;
  /** Delay before a worker that died is replaced. */
  readonly restartDelayMs?: number;
  /** The admin port the primary serves for every worker (`listen.admin`), and whether /explain is on. */
  readonly admin: { readonly address: string; readonly explain: boolean };
}

const LISTENING = "portcullis:listening";

/** The longest the primary waits for a worker's readiness or explanation. */
const ADMIN_ANSWER_MS = 2_000;

/** primary → worker: a question for the admin port; worker → primary: its answer, by id. */
interface AdminQuestion {
  readonly type: "portcullis:admin-question";
  readonly id: number;
  readonly ask: "readiness" | "explain";
  readonly request?: CheckRequestMessage;
}
interface AdminAnswer {
  readonly type: "portcullis:admin-answer";
  readonly id: number;
  readonly readiness?: Readiness;
  readonly explanation?: unknown;
  readonly failed?: boolean;
}

function isAdminQuestion(m: unknown): m is AdminQuestion {
  return typeof m === "object" && m !== null && (m as { type?: unknown }).type === "portcullis:admin-question";
}

function isAdminAnswer(m: unknown): m is AdminAnswer {
  return typeof m === "object" && m !== null && (m as { type?: unknown }).type === "portcullis:admin-answer";
}

/**
 * In a worker, instead of listening on the admin port: answers the primary's readiness and explain
 * questions, and hands `registry` to prom-client's cluster aggregation.
 */
export function answerPrimary(admin: AdminOptions, registry: Registry): void {
  AggregatorRegistry.setRegistries([registry]);
  // Its constructor installs the worker's listener for the primary's metrics requests.
  new AggregatorRegistry();
  process.on("message", (m: unknown) => {
    if (!isAdminQuestion(m)) return;
    const answer = (reply: Omit<AdminAnswer, "type" | "id">) => process.send?.({ type: "portcullis:admin-answer", id: m.id, ...reply } satisfies AdminAnswer);
    const asked =
      m.ask === "readiness"
        ? Promise.resolve(admin.readiness()).then((readiness) => ({ readiness }))
        : admin.explain === undefined || m.request === undefined
          ? Promise.reject(new Error("explain is not served"))
          : admin.explain(m.request).then((explanation) => ({ explanation }));
    asked.then(answer, () => answer({ failed: true }));
  });
}

/** True in a worker forked by superviseWorkers: it runs the server. */
export function isWorker(): boolean {
  return cluster.isWorker;
}

/** Called by a worker once its servers listen. */
export function reportListening(): void {
  process.send?.(LISTENING);
}

/** Called by a worker whose start failed: without its IPC channel it can exit as a single process would. */
export function abandonStart(): void {
  if (cluster.isWorker) process.disconnect();
}

/** Runs in the primary: forks and supervises the workers; resolves with the exit code once they have all stopped. */
export function superviseWorkers(options: WorkerOptions): Promise<number> {
  const { logger } = options;
  const live = new Set<Worker>();
  const listeningWorkers = new Set<Worker>();
  const reloadWhenListening = new Set<Worker>();
  const waiting = new Map<number, (answer: AdminAnswer | undefined) => void>();
  let nextQuestion = 0;
  let stopping = false;
  let failed = false;

  /** Asks one worker; undefined when it does not answer in time (or exits first). */
  const ask = (worker: Worker, question: Omit<AdminQuestion, "type" | "id">): Promise<AdminAnswer | undefined> =>
    new Promise((resolveAnswer) => {
      const id = nextQuestion++;
      const timer = setTimeout(() => settle(undefined), ADMIN_ANSWER_MS);
      const settle = (answer: AdminAnswer | undefined) => {
        clearTimeout(timer);
        waiting.delete(id);
        resolveAnswer(answer);
      };
      waiting.set(id, settle);
      try {
        worker.send({ type: "portcullis:admin-question", id, ...question } satisfies AdminQuestion);
      } catch {
        settle(undefined);
      }
    });

  const aggregator = new AggregatorRegistry();
  let explainTurn = 0;
  const admin = createAdminServer({
    readiness: async () =>
      workersReadiness(
        options.count,
        await Promise.all([...listeningWorkers].map(async (w) => ({ pid: w.process.pid, readiness: (await ask(w, { ask: "readiness" }))?.readiness }))),
      ),
    metrics: { contentType: aggregator.contentType, metrics: () => aggregator.clusterMetrics() },
    explain: options.admin.explain
      ? async (request) => {
          const workers = [...listeningWorkers];
          const worker = workers[explainTurn++ % Math.max(workers.length, 1)];
          const answer = worker === undefined ? undefined : await ask(worker, { ask: "explain", request });
          if (answer === undefined || answer.failed === true) throw new Error("no worker explained the request");
          return answer.explanation as Awaited<ReturnType<NonNullable<AdminOptions["explain"]>>>;
        }
      : undefined,
  });

  return new Promise<number>((resolveExit) => {
    const finish = (code: number) => {
      admin.close();
      admin.closeAllConnections();
      resolveExit(code);
    };
    const fork = () => {
      const worker = cluster.fork();
      let listening = false;
      live.add(worker);
      worker.on("message", (m: unknown) => {
        if (m === LISTENING) {
          listening = true;
          listeningWorkers.add(worker);
          if (reloadWhenListening.delete(worker)) worker.process.kill("SIGHUP");
        } else if (isAdminAnswer(m)) waiting.get(m.id)?.(m);
      });
      worker.once("exit", (code, signal) => {
        live.delete(worker);
        listeningWorkers.delete(worker);
        reloadWhenListening.delete(worker);
        if (stopping) {
          if (code !== 0) failed = true;
          if (live.size === 0) finish(failed ? 1 : 0);
          return;
        }
        if (!listening) {
          logger.error({ worker_pid: worker.process.pid, code, signal }, "a worker failed to start; stopping");
          failed = true;
          stop("worker start failed");
          return;
        }
        logger.error({ worker_pid: worker.process.pid, code, signal }, "worker died; starting a replacement");
        setTimeout(() => {
          if (!stopping) fork();
        }, options.restartDelayMs ?? 1_000).unref();
      });
    };

    function stop(reason: string): void {
      if (stopping) return;
      stopping = true;
      logger.info({ reason, workers: live.size }, "stopping workers");
      if (live.size === 0) {
        finish(failed ? 1 : 0);
        return;
      }
      for (const worker of live) worker.process.kill("SIGTERM");
      setTimeout(() => {
        for (const worker of live) {
          logger.error({ worker_pid: worker.process.pid }, "worker did not stop in time; killing it");
          worker.process.kill("SIGKILL");
        }
      }, options.graceMs).unref();
    }
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
    // A signal to the primary's pid reaches the primary only: each worker reloads its own configuration.
    // A worker still starting may have read the file before it changed, and would die of a SIGHUP
    // before its handler exists: it gets the signal once it listens.
    process.on("SIGHUP", () => {
      logger.info({ signal: "SIGHUP", workers: live.size }, "signal received: passing the reload on to every worker");
      for (const worker of live) {
        if (listeningWorkers.has(worker)) worker.process.kill("SIGHUP");
        else reloadWhenListening.add(worker);
      }
    });

    const { host, port } = splitAddress(options.admin.address);
    admin.once("error", (err) => {
      logger.error({ err, address: options.admin.address }, "the admin port cannot be bound; stopping");
      failed = true;
      stop("admin port");
    });
    admin.listen(port, host, () => {
      logger.info({ workers: options.count, admin: (admin.address() as AddressInfo).port }, "starting workers; the admin port serves all of them");
      for (let i = 0; i < options.count; i++) fork();
    });
  });
}

function splitAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(":");
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(address.slice(i + 1)) };
}
