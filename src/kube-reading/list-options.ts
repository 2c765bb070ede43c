/**
 * What kube-apiserver's RequestInfo takes from a list's query: whether the ListOptions decode
 * (metainternalversionscheme.ParameterCodec.DecodeParameters of url.Values into
 * internalversion.ListOptions via v1.ListOptions) succeeds, and then `watch` and the name a
 * fieldSelector asks for. Pure, total.
 */

import { parseFieldSelector, requiresExactMatch } from "./field-selectors.ts";
import { isGoInt64 } from "./go-int64.ts";
import { isValidLabelSelector } from "./label-selectors.ts";

export type DecodedListOptions = { ok: true; watch: boolean; metadataName: string | undefined } | { ok: false };

function firstValue(query: URLSearchParams, key: string): string | undefined {
  const values = query.getAll(key);
  return values.length > 0 ? values[0] : undefined;
}

/**
 * Whether decoding would succeed, and what it yields for `watch` and for
 * `fieldSelector.RequiresExactMatch("metadata.name")`. Decoding fails when
 * labelSelector does not parse (labels.Parse), fieldSelector does not parse
 * (fields.ParseSelector), or timeoutSeconds / limit is not a base-10 int64
 * (strconv.ParseInt). The other ListOptions parameters (resourceVersion,
 * resourceVersionMatch, continue, allowWatchBookmarks, sendInitialEvents) cannot
 * fail; unknown parameters are ignored.
 */
export function decodeListOptions(query: URLSearchParams): DecodedListOptions {
  const labelSelector = firstValue(query, "labelSelector");
  if (labelSelector !== undefined && !isValidLabelSelector(labelSelector)) return { ok: false };

  let metadataName: string | undefined;
  const fieldSelector = firstValue(query, "fieldSelector");
  if (fieldSelector !== undefined) {
    const terms = parseFieldSelector(fieldSelector);
    if (terms === undefined) return { ok: false };
    metadataName = requiresExactMatch(terms, "metadata.name");
  }

  for (const key of ["timeoutSeconds", "limit"]) {
    const value = firstValue(query, key);
    if (value !== undefined && !isGoInt64(value)) return { ok: false };
  }

  const watch = firstValue(query, "watch");
  return { ok: true, watch: watch !== undefined && codecBool(watch), metadataName };
}

/**
 * runtime.Convert_Slice_string_To_bool: only "0" and (Unicode simple case-folded)
 * "false" are false; anything else, the empty string included, is true.
 */
function codecBool(value: string): boolean {
  return !(value === "0" || goEqualFold(value, "false"));
}

/** requestinfo.go's fallback after a decode error: strings.ToLower(v) is "false" or "0". */
export function fallbackWatch(query: URLSearchParams): boolean {
  const value = firstValue(query, "watch");
  if (value === undefined) return false;
  // Only ASCII letters lower-case onto f, a, l, s, e, so ASCII lowering is exact here.
  const lower = asciiLower(value);
  return !(lower === "false" || lower === "0");
}

function asciiLower(value: string): string {
  return value.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
}

/**
 * Go's strings.EqualFold against an all-lower-case ASCII target. Beyond ASCII
 * case, Unicode simple folding puts U+017F (long s) in the orbit of "s" and
 * U+212A (Kelvin sign) in the orbit of "k"; no other letter used by the targets
 * here has a non-ASCII fold partner.
 */
function goEqualFold(value: string, lowerAsciiTarget: string): boolean {
  const codePoints = Array.from(value);
  if (codePoints.length !== lowerAsciiTarget.length) return false;
  for (let i = 0; i < codePoints.length; i++) {
    const c = codePoints[i] ?? "";
    const t = lowerAsciiTarget[i] ?? "";
    if (c === t || asciiLower(c) === t) continue;
    if (t === "s" && c === "\u017f") continue;
    if (t === "k" && c === "\u212a") continue;
    return false;
  }
  return true;
}
