import { createHook } from "node:async_hooks";

/** How many timers (setTimeout, setInterval) `run` arms while it runs, synchronously. */
export function timersArmedBy(run: () => unknown): number {
  let armed = 0;
  const hook = createHook({
    init: (_id, type) => {
      if (type === "Timeout") armed += 1;
    },
  });
  hook.enable();
  try {
    run();
  } finally {
    hook.disable();
  }
  return armed;
}
