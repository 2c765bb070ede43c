/**
 * A list read a page at a time, and the metadata the watches keep of what they list: shared by the
 * watched indexes (watched-index.ts) and the change feeds (change-feed-watch.ts).
 */
import type { KubernetesListObject, KubernetesObject, V1ObjectMeta } from "#kubernetes-client";

/**
 * The longest a list may take before it counts as failed and is retried with backoff, from when it
 * got a list slot (list-slots.ts): waiting for one is not a failure.
 */
export const LIST_TIMEOUT_MS = 10_000;

/**
 * The metadata ListWatch itself reads — namespace and name (its cache key), resourceVersion (an
 * update or a repeat; where the watch resumes) — and the uid, which stores key by or compare.
 */
export function keepListWatchMetadata(metadata: V1ObjectMeta): Pick<V1ObjectMeta, "name" | "namespace" | "uid" | "resourceVersion"> {
  return { name: metadata.name, namespace: metadata.namespace, uid: metadata.uid, resourceVersion: metadata.resourceVersion };
}

/**
 * Objects per list request. An answer is held whole while it is read — its bytes, its text, every
 * object parsed — so the page, not the whole list, sets that peak; and the heap and malloc keep the
 * pages they grew into long after. 10,000 real-looking PluginInstallations (2.2 KB of JSON each,
 * bench/servers/upstream-fakes.ts), idle after a full GC: 256-262 MiB RSS listed at once, 211-213
 * paged (one installation: 180-183). 500 is client-go's reflector's page too.
 */
const LIST_PAGE_SIZE = 500;

/** One page of a list: from `_continue` (the previous page's token), at most `limit` objects. */
export type ListPage<T extends KubernetesObject> = (page: { limit: number; _continue?: string }, signal: AbortSignal) => Promise<KubernetesListObject<T>>;

/**
 * The whole list, a page at a time, each page's objects kept (IndexStore.keep) before the next is
 * asked for. The pages are one snapshot: the API server serves every continuation at the first
 * page's resourceVersion, or answers 410 if that is compacted away (a failed list, listed afresh).
 */
export async function listInPages<T extends KubernetesObject>(listPage: ListPage<T>, keep: (obj: T) => T, signal: AbortSignal): Promise<KubernetesListObject<T>> {
  const items: T[] = [];
  let _continue: string | undefined;
  for (;;) {
    const page = await listPage({ limit: LIST_PAGE_SIZE, _continue }, signal);
    // A list without an array of items reaches ListWatch as it came, to fail there as before.
    if (!Array.isArray(page.items)) return page;
    for (const item of page.items) items.push(keep(item));
    // CoreV1Api deserializes the metadata (`_continue`); CustomObjectsApi hands over the JSON (`continue`).
    const metadata = page.metadata as { _continue?: string; continue?: string } | undefined;
    _continue = metadata?._continue ?? metadata?.continue;
    if (_continue === undefined || _continue === "") return { ...page, items };
  }
}
