/**
 * The gates a decision passed through, for `POST /explain` on the admin port. Recording is off
 * unless an explanation is running: then each gate's verdict is appended to that request's trace
 * (found through AsyncLocalStorage), and every other request only pays one integer comparison.
 */
import { AsyncLocalStorage } from "node:async_hooks";

export interface TraceStep {
  readonly gate: string;
  readonly outcome: string;
}

const recorder = new AsyncLocalStorage<TraceStep[]>();
/** How many explanations are running; zero means nothing records. */
let recording = 0;

/** Records a gate's outcome (a kind, a reason code) when an explanation is running. */
export function trace(gate: string, outcome: string): void {
  if (recording !== 0) recorder.getStore()?.push({ gate, outcome });
}

/** Records a yes/no gate's verdict (`pass` or `fail`) and returns it, so the gate's `if` stays one line. */
export function traceVerdict(gate: string, ok: boolean): boolean {
  if (recording !== 0) recorder.getStore()?.push({ gate, outcome: ok ? "pass" : "fail" });
  return ok;
}

/** Runs `work` with recording on for it (and only it), returning its result and its trace. */
export async function traced<T>(work: () => Promise<T>): Promise<{ readonly result: T; readonly trace: readonly TraceStep[] }> {
  const steps: TraceStep[] = [];
  recording++;
  try {
    const result = await recorder.run(steps, work);
    return { result, trace: steps };
  } finally {
    recording--;
  }
}
