/**
 * The ext_authz Check method. Checks that arrive together are decided together: grpc-js calls the
 * handler for each request as it reads the request's frames, between its own and HTTP/2's work for
 * the next one, and under load a check costs several times what it costs in a loop (bench/FINDINGS.md,
 * issue 55). So the first call of a loop turn is decided at once, and the calls read after it in the
 * same turn are queued; once the event loop has read what the sockets hold (setImmediate: the loop's
 * check phase, right after the reads), they are started in arrival order. Each step of the decision
 * then runs for all of them in a row, and their answers leave in one write. The first is not queued:
 * a warm answer then leaves with the write that follows the read that brought it, not in a write and a
 * loop turn of its own, and at a moderate rate nearly every call is the first of its turn.
 */
import * as grpc from "@grpc/grpc-js";
import type { CheckRequestMessage } from "../envoy/check-request.ts";
import type { CheckResponseMessage } from "../envoy/check-response-message.ts";
import type { TracedCheck } from "../tracing/spans.ts";

/** Checks started and not yet answered: what the drain logs and the idle GC read. */
export interface CheckActivity {
  inFlight: number;
  started: number;
}

type CheckCall = grpc.ServerUnaryCall<CheckRequestMessage, unknown>;
type Answer = grpc.sendUnaryData<unknown>;

/** `check`'s answer to each call; a call counts in `activity` from its arrival until it is answered. */
export function checkHandler(check: TracedCheck<CheckResponseMessage>, activity: CheckActivity): grpc.handleUnaryCall<CheckRequestMessage, unknown> {
  /** The calls read after the first of this loop turn; undefined until a turn's first call. */
  let waiting: Array<{ readonly call: CheckCall; readonly callback: Answer }> | undefined;

  function decideWaiting(): void {
    const batch = waiting!;
    waiting = undefined;
    for (const { call, callback } of batch) decide(call, callback);
  }

  function decide(call: CheckCall, callback: Answer): void {
    let answered: Promise<CheckResponseMessage>;
    try {
      answered = check(call.request, call.metadata);
    } catch (err) {
      // Never thrown by check(); were it, the rest of the batch must still be decided.
      answered = Promise.reject(err);
    }
    // Counted out before the answer is handed over: no .finally(), which is two more promises per check.
    answered.then(
      (response) => {
        activity.inFlight--;
        callback(null, response);
      },
      // check() never rejects; this is the last line of fail-closed.
      () => {
        activity.inFlight--;
        callback({ code: grpc.status.INTERNAL, details: "internal error" });
      },
    );
  }

  return (call, callback) => {
    activity.inFlight++;
    activity.started++;
    if (waiting !== undefined) {
      waiting.push({ call, callback });
      return;
    }
    waiting = [];
    setImmediate(decideWaiting);
    decide(call, callback);
  };
}
