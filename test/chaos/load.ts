/**
 * Steady Check load from a real gRPC client (the vendored Envoy protos), Envoy-shaped requests at a
 * fixed rate, each answer recorded with what the oracle expected and how long it took.
 */
import { authorizationClient } from "../../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import { type AnswerKind, type ChaosRequest, type Expected, randomRequest } from "./oracle.ts";

export interface Answer {
  /** When the check was sent (performance.now()). */
  readonly sentAt: number;
  readonly latencyMs: number;
  readonly user: string;
  readonly expected: Expected;
  readonly kind: AnswerKind;
  /** The 503 carried retry-after, as every dependency-unavailable denial must. */
  readonly retryAfter: boolean;
  /** A 503's message (which dependency was unavailable), or a failed call's gRPC status. */
  readonly detail?: string;
}

/** Envoy would have given up long before; this only bounds a frozen server's hold on the client. */
const CLIENT_DEADLINE_MS = 5_000;
const TICK_MS = 10;

export class CheckLoad {
  readonly answers: Answer[] = [];
  #timer: NodeJS.Timeout | undefined;
  #inFlight = 0;
  #client: ReturnType<typeof authorizationClient>;

  readonly ratePerSecond: number;
  readonly clusterId: string;
  /** A PluginToken per user the oracle names. */
  readonly tokens: Readonly<Record<string, string>>;

  constructor(address: string, ratePerSecond: number, clusterId: string, tokens: Readonly<Record<string, string>>) {
    this.#client = authorizationClient(address);
    this.ratePerSecond = ratePerSecond;
    this.clusterId = clusterId;
    this.tokens = tokens;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  start(): void {
    let owed = 0;
    let last = performance.now();
    this.#timer = setInterval(() => {
      const now = performance.now();
      owed += ((now - last) * this.ratePerSecond) / 1000;
      last = now;
      for (; owed >= 1; owed--) this.#send(randomRequest());
    }, TICK_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    while (this.#inFlight > 0) await new Promise((r) => setTimeout(r, 20));
  }

  close(): void {
    this.#client.close();
  }

  #send(request: ChaosRequest): void {
    const sentAt = performance.now();
    this.#inFlight++;
    const message = envoyCheckRequest({
      path: `/clusters/${this.clusterId}${request.path}`,
      headers: { authorization: `Bearer ${this.tokens[request.user]}` },
      policy: "kube-api-proxy",
    });
    const record = (kind: AnswerKind, retryAfter = false, detail?: string) => {
      this.#inFlight--;
      const answer: Answer = { sentAt, latencyMs: performance.now() - sentAt, user: request.user, expected: request.expected, kind, retryAfter };
      this.answers.push(detail === undefined ? answer : { ...answer, detail });
    };
    this.#client.check(message, { deadline: new Date(Date.now() + CLIENT_DEADLINE_MS) }).then(
      (res) => {
        const answer = summarize(res as CheckResponse);
        if (answer.allowed) return record("allowed");
        const reason = String(answer.reason);
        const message = (answer.body as { message?: unknown } | null)?.message;
        record(
          KNOWN_REASONS.has(reason) ? (reason as AnswerKind) : `other:${reason}`,
          answer.headers["retry-after"] !== undefined,
          reason === "dependency-unavailable" ? String(message) : undefined,
        );
      },
      (err: { code?: number; details?: string }) =>
        err.code === 4 /* DEADLINE_EXCEEDED */
          ? record("timeout")
          : record("grpc-error", false, `gRPC ${String(err.code)} ${String(err.details).replace(/\d+(\.\d+)?/g, "N")}`.slice(0, 80)),
    );
  }
}

const KNOWN_REASONS = new Set(["user-sar-denied", "can-view-denied", "dependency-unavailable"]);
