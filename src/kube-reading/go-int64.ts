/** Go's strconv.ParseInt(value, 10, 64), as the ListOptions decode and label selectors use it. Pure. */

/** strconv.ParseInt(value, 10, 64) succeeds. */
export function isGoInt64(value: string): boolean {
  const negative = value.startsWith("-");
  const digits = negative || value.startsWith("+") ? value.slice(1) : value;
  if (digits.length === 0) return false;
  for (let i = 0; i < digits.length; i++) {
    const c = digits.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  let significant = 0;
  while (significant < digits.length - 1 && digits.charCodeAt(significant) === 0x30) significant++;
  const magnitude = digits.slice(significant);
  const limit = negative ? "9223372036854775808" : "9223372036854775807";
  if (magnitude.length !== limit.length) return magnitude.length < limit.length;
  return magnitude <= limit;
}
