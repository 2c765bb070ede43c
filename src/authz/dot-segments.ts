/**
 * Whether a request path holds a `.` or `..` segment once percent-decoded (`%2e%2e`, or one hidden
 * behind an encoded slash: `a%2F..%2Fb`), or does not decode at all. Envoy's normalize_path should
 * have removed dot segments; one that still arrives could climb out of the route the policy matched
 * (e.g. from one installation's controller route into another's), so it is refused, not guessed at.
 */
export function hasDotSegment(path: string): boolean {
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return true;
  }
  return decoded.split("/").some((s) => s === "." || s === "..");
}
