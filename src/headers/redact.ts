/**
 * Credentials in header values, blanked for display (`portcullis check`, `POST /explain`): the
 * injected ServiceAccount token is a live credential and never leaves portcullis in an explanation.
 */
import { WEBSOCKET_BEARER_PREFIX } from "../tokens/credentials.ts";

export const REDACTED = "<redacted>";

export function redactHeader(name: string, value: string): string {
  switch (name.toLowerCase()) {
    case "authorization": {
      const scheme = /^\s*([A-Za-z]+)\s/.exec(value)?.[1];
      return scheme === undefined ? REDACTED : `${scheme} ${REDACTED}`;
    }
    case "cookie":
    case "set-cookie":
      return REDACTED;
    case "sec-websocket-protocol":
      return value
        .split(",")
        .map((p) => p.trim())
        .map((p) => (p.startsWith(WEBSOCKET_BEARER_PREFIX) ? `${WEBSOCKET_BEARER_PREFIX}${REDACTED}` : p))
        .join(", ");
    default:
      return value;
  }
}

export function redactHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, redactHeader(name, value)]));
}
