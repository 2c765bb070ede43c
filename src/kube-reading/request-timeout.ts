/**
 * kube-apiserver's WithRequestDeadline filter reads `?timeout=` (the first value) with Go's
 * time.ParseDuration and answers 400 before any authorization when it does not parse. The gateway
 * refuses the same requests rather than review one kube-apiserver will never run. (kube skips the
 * filter for long-running requests; refusing those too only ever denies more.) Pure.
 */

/** time.ParseDuration's units, in nanoseconds (µ as U+00B5 and U+03BC, as Go accepts both). */
const UNITS: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["\u00b5s", 1_000n],
  ["\u03bcs", 1_000n],
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);

const MAX = 1n << 63n;

const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";

/** Why kube-apiserver would refuse this query's timeout, or undefined when it would not. */
export function invalidRequestTimeout(query: URLSearchParams): string | undefined {
  const value = query.get("timeout");
  if (value === null || value === "") return undefined;
  return isGoDuration(value) ? undefined : "invalid timeout specified in the request URL";
}

/** time.ParseDuration(s) returns no error: [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+, or "0", without overflow. */
export function isGoDuration(input: string): boolean {
  // Go walks bytes; the units are the only non-ASCII it knows, so code points do here.
  let s = input;
  let negative = false;
  if (s.startsWith("-") || s.startsWith("+")) {
    negative = s.startsWith("-");
    s = s.slice(1);
  }
  if (s === "0") return true;
  if (s === "") return false;
  let total = 0n;
  while (s !== "") {
    if (!(s[0] === "." || isDigit(s[0]))) return false;
    let i = 0;
    let whole = 0n;
    while (isDigit(s[i])) {
      whole = whole * 10n + BigInt(s.charCodeAt(i) - 0x30);
      if (whole > MAX) return false;
      i++;
    }
    const hasWhole = i > 0;
    s = s.slice(i);
    let fraction = 0n;
    let scale = 1;
    let hasFraction = false;
    if (s.startsWith(".")) {
      s = s.slice(1);
      let j = 0;
      let overflowed = false;
      while (isDigit(s[j])) {
        // leadingFraction stops adding digits once they would overflow, but still consumes them.
        if (!overflowed) {
          const next = fraction * 10n + BigInt(s.charCodeAt(j) - 0x30);
          if (fraction > (MAX - 1n) / 10n || next > MAX) overflowed = true;
          else {
            fraction = next;
            scale *= 10;
          }
        }
        j++;
      }
      hasFraction = j > 0;
      s = s.slice(j);
    }
    if (!hasWhole && !hasFraction) return false;
    let u = 0;
    while (u < s.length && s[u] !== "." && !isDigit(s[u])) u++;
    if (u === 0) return false;
    const unit = UNITS.get(s.slice(0, u));
    s = s.slice(u);
    if (unit === undefined) return false;
    if (whole > MAX / unit) return false;
    let v = whole * unit;
    if (fraction > 0n) {
      v += BigInt(Math.trunc(Number(fraction) * (Number(unit) / scale)));
      if (v > MAX) return false;
    }
    total += v;
    if (total > MAX) return false;
  }
  return negative || total <= MAX - 1n;
}
