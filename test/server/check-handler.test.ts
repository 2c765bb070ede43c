/**
 * The Check handler (src/server/check-handler.ts): every call answered with its own check's answer,
 * in arrival order; the first call of a turn of the event loop decided at once, the rest of the turn's
 * together, after it;
 * a check that throws or rejects answers INTERNAL without holding up the rest of its batch.
 */
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import type { CheckRequestMessage } from "../../src/envoy/check-request.ts";
import type { CheckResponseMessage } from "../../src/envoy/check-response-message.ts";
import { type CheckActivity, checkHandler } from "../../src/server/check-handler.ts";

const OK = (message: string): CheckResponseMessage => ({ status: { code: 0, message } });

interface Answered {
  readonly err: Partial<grpc.ServiceError> | null;
  readonly value: unknown;
}

/** Calls the handler as grpc-js does, `ids` in one synchronous run (one turn of the loop); resolves with every answer. */
function callAll(handler: grpc.handleUnaryCall<CheckRequestMessage, unknown>, ids: readonly string[]): Promise<Answered[]> {
  return Promise.all(
    ids.map(
      (id) =>
        new Promise<Answered>((resolve) =>
          handler({ request: { id } as unknown as CheckRequestMessage, metadata: new grpc.Metadata() } as unknown as grpc.ServerUnaryCall<CheckRequestMessage, unknown>, (err, value) =>
            resolve({ err: err as Partial<grpc.ServiceError> | null, value }),
          ),
        ),
    ),
  );
}

const idOf = (message: CheckRequestMessage) => (message as unknown as { id: string }).id;

describe("checkHandler", () => {
  it("answers each call with its own check's answer, and counts it in flight until then", async () => {
    const activity: CheckActivity = { inFlight: 0, started: 0 };
    const handler = checkHandler(async (message) => OK(idOf(message)), activity);
    const answers = callAll(handler, ["a", "b", "c"]);
    expect(activity).toEqual({ inFlight: 3, started: 3 });
    expect(await answers).toEqual(["a", "b", "c"].map((id) => ({ err: null, value: OK(id) })));
    expect(activity).toEqual({ inFlight: 0, started: 3 });
  });

  it("decides a loop turn's first call at once and the rest together, in arrival order, once the turn's reads are done", async () => {
    const events: string[] = [];
    const handler = checkHandler((message) => {
      events.push(`decide ${idOf(message)}`);
      return Promise.resolve(OK(idOf(message)));
    }, { inFlight: 0, started: 0 });
    const first = callAll(handler, ["a", "b"]);
    events.push("handler returned");
    // Still this turn (a later read's callback): joins the same batch.
    await Promise.resolve();
    const second = callAll(handler, ["c"]);
    events.push("turn over");
    await Promise.all([first, second]);
    expect(events).toEqual(["decide a", "handler returned", "turn over", "decide b", "decide c"]);
  });

  it("answers INTERNAL for a check that throws or rejects, and the rest of the batch as decided", async () => {
    const activity: CheckActivity = { inFlight: 0, started: 0 };
    const handler = checkHandler((message) => {
      const id = idOf(message);
      if (id === "throws") throw new Error("thrown");
      if (id === "rejects") return Promise.reject(new Error("rejected"));
      return Promise.resolve(OK(id));
    }, activity);
    const answers = await callAll(handler, ["throws", "a", "rejects", "b"]);
    expect(answers.map((a) => a.err?.code ?? a.value)).toEqual([grpc.status.INTERNAL, OK("a"), grpc.status.INTERNAL, OK("b")]);
    expect(answers[0]!.err?.details).toBe("internal error");
    expect(activity.inFlight).toBe(0);
  });

  it("starts a new batch for a call that arrives after the last one was decided", async () => {
    let decided = 0;
    const handler = checkHandler(async (message) => {
      decided++;
      return OK(idOf(message));
    }, { inFlight: 0, started: 0 });
    expect((await callAll(handler, ["a"]))[0]!.value).toEqual(OK("a"));
    expect((await callAll(handler, ["b"]))[0]!.value).toEqual(OK("b"));
    expect(decided).toBe(2);
  });
});
