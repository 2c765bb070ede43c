/**
 * grpc.health.v1.Health: SERVING only while every index and dependency the server needs is ready,
 * NOT_SERVING from the moment shutdown begins.
 */
import type * as grpc from "@grpc/grpc-js";
import * as grpcJs from "@grpc/grpc-js";

type ServingStatus = "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN";

/** The services a health client may name: "" (the whole server) and the ext_authz service. */
const KNOWN_SERVICES: ReadonlySet<string> = new Set(["", "envoy.service.auth.v3.Authorization"]);

export class Health {
  readonly #isReady: () => boolean;
  #shuttingDown = false;
  /** Each Watch call, by the function that sends it the current status. */
  readonly #watchers = new Map<() => void, grpc.ServerWritableStream<{ service?: string }, unknown>>();
  #poll: NodeJS.Timeout | undefined;
  #last: boolean | undefined;

  constructor(isReady: () => boolean) {
    this.#isReady = isReady;
  }

  get serving(): boolean {
    return !this.#shuttingDown && this.#isReady();
  }

  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  beginShutdown(): void {
    this.#shuttingDown = true;
    this.#notify();
  }

  #statusFor(service: string): ServingStatus {
    if (!KNOWN_SERVICES.has(service)) return "SERVICE_UNKNOWN";
    return this.serving ? "SERVING" : "NOT_SERVING";
  }

  #notify(): void {
    for (const w of this.#watchers.keys()) w();
  }

  handlers(): grpc.UntypedServiceImplementation {
    return {
      Check: (call: grpc.ServerUnaryCall<{ service?: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        const status = this.#statusFor(call.request.service ?? "");
        if (status === "SERVICE_UNKNOWN") callback({ code: grpcJs.status.NOT_FOUND, details: "unknown service" });
        else callback(null, { status });
      },
      Watch: (call: grpc.ServerWritableStream<{ service?: string }, unknown>) => {
        const service = call.request.service ?? "";
        let sent: ServingStatus | undefined;
        const send = () => {
          const status = this.#statusFor(service);
          if (status !== sent) {
            sent = status;
            call.write({ status });
          }
        };
        this.#watchers.set(send, call);
        this.#startPolling();
        call.on("cancelled", () => this.#watchers.delete(send));
        call.on("close", () => this.#watchers.delete(send));
        send();
      },
    };
  }

  /** Readiness changes come from watches syncing; a light poll turns them into Watch updates. */
  #startPolling(): void {
    if (this.#poll !== undefined) return;
    this.#poll = setInterval(() => {
      const now = this.serving;
      if (now !== this.#last) {
        this.#last = now;
        this.#notify();
      }
    }, 1000);
    this.#poll.unref();
  }

  /** Stops polling and ends every Watch stream (they never end on their own), after NOT_SERVING was sent. */
  stop(): void {
    clearInterval(this.#poll);
    for (const call of this.#watchers.values()) call.end();
    this.#watchers.clear();
  }
}
