/**
 * Formats of values that travel from token claims into headers, logs and Kubernetes names. A claim
 * that fails these is rejected before use: no CR/LF, no control characters, no path tricks.
 */

/** Lower-case hyphenated UUID, as Fundament issues them. */
export function isUuid(v: unknown): v is string {
  return typeof v === "string" && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(v);
}

/**
 * RFC 1123 label, at most 56 characters so that `plugin-<name>` (namespace and ServiceAccount) is
 * still a valid 63-character label.
 */
export function isDnsLabel(v: unknown): v is string {
  return typeof v === "string" && v.length <= 56 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(v);
}

export function isPluginVersion(v: unknown): v is string {
  return typeof v === "string" && /^[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}$/.test(v);
}

/** `sha256:<64 hex>`, or the unpinned forms FUN-19 names (empty, `sha256:unknown`). */
export function isDefinitionHash(v: unknown): v is string {
  return typeof v === "string" && (v === "" || v === UNPINNED_PLACEHOLDER || PINNED_HASH.test(v));
}

export const UNPINNED_PLACEHOLDER = "sha256:unknown";
const PINNED_HASH = /^sha256:[0-9a-f]{64}$/;

/** A definition hash that really pins a definition (FUN-19 §4): not empty, not the placeholder. */
export function isPinnedHash(v: string): boolean {
  return PINNED_HASH.test(v);
}
