/**
 * What an OIDC discovery endpoint is, as portcullis accepts it: an https URL whose path ends in
 * `/.well-known/openid-configuration`, without credentials, query or fragment. URLs are compared in
 * their normalized form (`URL.href`: lower-case host, default port dropped, dot segments resolved).
 */

const WELL_KNOWN = "/.well-known/openid-configuration";

/** The normalized discovery URL, or undefined when `raw` is not one. */
export function discoveryEndpoint(raw: string): string | undefined {
  // An empty query or fragment ("…?", "…#") survives in href, so both characters are refused outright.
  if (raw.includes("?") || raw.includes("#")) return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  if (url.protocol !== "https:" || url.username !== "" || url.password !== "") return undefined;
  if (!url.pathname.endsWith(WELL_KNOWN)) return undefined;
  return url.href;
}

/**
 * The discovery URL of an issuer (OpenID Connect Discovery 1.0 §4: any trailing `/` of the issuer
 * is removed before the suffix is appended). This is how a token's `iss` names its provider without
 * any network call.
 */
export function discoveryEndpointFor(issuer: string): string | undefined {
  return discoveryEndpoint(issuer.replace(/\/$/, "") + WELL_KNOWN);
}

/** An https URL a discovery document may point at (jwks_uri, userinfo_endpoint), normalized. */
export function httpsUrl(raw: unknown): string | undefined {
  if (typeof raw !== "string") return undefined;
  try {
    const url = new URL(raw);
    return url.protocol === "https:" && url.username === "" && url.password === "" ? url.href : undefined;
  } catch {
    return undefined;
  }
}
