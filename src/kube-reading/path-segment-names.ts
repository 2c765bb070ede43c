/**
 * Which name a path segment may hold (k8s.io/apimachinery/pkg/api/validation/path), as RequestInfo
 * asks of the name a fieldSelector gives a list. Pure.
 */

/** path.NameMayNotBe: names from a fieldSelector that are not taken as the request's name. */
const NAME_MAY_NOT_BE: ReadonlySet<string> = new Set([".", ".."]);
/** path.NameMayNotContain. */
const NAME_MAY_NOT_CONTAIN: readonly string[] = ["/", "%"];

/** path.IsValidPathSegmentName reports no error. */
export function isValidPathSegmentName(name: string): boolean {
  if (NAME_MAY_NOT_BE.has(name)) return false;
  return !NAME_MAY_NOT_CONTAIN.some((illegal) => name.includes(illegal));
}
