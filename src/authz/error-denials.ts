/**
 * Errors that decide a denial. A dependency that fails, times out or is not yet synced is a 503,
 * never an allow; anything else thrown while deciding is a bug, denied as 500.
 */

import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { type Deny, deny } from "./decision.ts";

/** The denial for an error thrown while deciding: the one place that decides which errors are which denials. */
export function denialFor(err: unknown): Deny {
  if (err instanceof DependencyUnavailable) return deny("dependency-unavailable", `${err.dependency} is unavailable`);
  return deny("internal-error", "internal error");
}
