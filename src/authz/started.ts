/**
 * Remote gates run concurrently but are reported in the seed's order: each is prefetched (started
 * at once) and awaited later, in order, where its error (if any) is rethrown. A gate that is never
 * awaited (an earlier one denied) must not surface as an unhandled rejection, so its promise is
 * marked handled when the work starts.
 */
export function prefetch<T>(work: () => Promise<T>): Promise<T> {
  let started: Promise<T>;
  try {
    started = Promise.resolve(work());
  } catch (error) {
    started = Promise.reject(error);
  }
  return markHandled(started);
}

/** `promise`, with its rejection marked handled: whoever awaits it still sees the error. */
function markHandled<T>(promise: Promise<T>): Promise<T> {
  promise.catch(ignore);
  return promise;
}

function ignore(): void {}
