/**
 * Envoy's ext_authz filter applying an OkHttpResponse's `query_parameters_to_set` to the request's
 * `:path`, step for step as Envoy does it (source/extensions/filters/http/ext_authz/ext_authz.cc,
 * Http::Utility::QueryParamsMulti in source/common/http/utility.cc, Envoy 1.28 onwards):
 *  - the query (after the first `?`) is split on `&` only; each piece is a key up to its first `=`
 *    and a value after it ("" with no `=`), neither decoded; an empty piece (`&&`) is the key "";
 *  - the pieces are grouped by key in a byte-ordered map (absl::btree_map<std::string, …>), each
 *    key's values in their order;
 *  - each parameter set replaces every value of its key (`overwrite`);
 *  - the query is written back as `?key=value&…` in the map's order: keys sorted, each piece
 *    `key=value`.
 * Pure. The caller reads the result as the upstream will (a key spelled two ways, `timeoutSeconds`
 * and `timeout%53econds`, is two keys here and one to Go).
 */

/** The `:path` Envoy sends upstream once `set` is applied. */
export function withQueryParametersSet(path: string, set: Readonly<Record<string, string>>): string {
  const q = path.indexOf("?");
  const params = new Map<string, string[]>();
  if (q !== -1) {
    let start = q + 1;
    while (start < path.length) {
      let end = path.indexOf("&", start);
      if (end === -1) end = path.length;
      const piece = path.slice(start, end);
      const eq = piece.indexOf("=");
      const key = eq === -1 ? piece : piece.slice(0, eq);
      const value = eq === -1 ? "" : piece.slice(eq + 1);
      const values = params.get(key);
      if (values === undefined) params.set(key, [value]);
      else values.push(value);
      start = end + 1;
    }
  }
  for (const key in set) params.set(key, [set[key]!]);
  const base = q === -1 ? path : path.slice(0, q);
  if (params.size === 0) return base;
  const pieces: string[] = [];
  for (const key of [...params.keys()].sort(byBytes)) for (const value of params.get(key)!) pieces.push(`${key}=${value}`);
  return `${base}?${pieces.join("&")}`;
}

/**
 * std::string's order: its bytes, unsigned (the path's UTF-8). Outside the surrogates, UTF-16 code
 * units sort as UTF-8 bytes do, so two keys are compared as written up to their first difference;
 * only a surrogate there (U+10000 and up, or a lone one) is settled by encoding both.
 */
function byBytes(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (isSurrogate(x) || isSurrogate(y)) return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
    return x - y;
  }
  return a.length - b.length;
}

function isSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdfff;
}
