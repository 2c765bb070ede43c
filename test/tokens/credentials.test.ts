/** Where credentials are read from: a table per source, adversarial values included. */
import { describe, expect, it } from "vitest";
import { bearerToken, cookieCredentialAllowed, cookieToken, websocketBearerToken, withoutWebsocketBearer } from "../../src/tokens/credentials.ts";

const JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";

describe("bearerToken", () => {
  it.each([
    { name: "absent", value: undefined, expected: { kind: "absent" } },
    { name: "empty", value: "", expected: { kind: "absent" } },
    { name: "canonical", value: `Bearer ${JWT}`, expected: { kind: "found", source: "bearer", token: JWT } },
    { name: "lower-case scheme", value: `bearer ${JWT}`, expected: { kind: "found", source: "bearer", token: JWT } },
    { name: "upper-case scheme", value: `BEARER ${JWT}`, expected: { kind: "found", source: "bearer", token: JWT } },
    { name: "two spaces", value: `Bearer  ${JWT}`, expected: { kind: "found", source: "bearer", token: JWT } },
    { name: "trailing space", value: `Bearer ${JWT} `, expected: { kind: "found", source: "bearer", token: JWT } },
    { name: "tab separator", value: `Bearer\t${JWT}`, expected: { kind: "invalid" } },
    { name: "scheme alone", value: "Bearer", expected: { kind: "invalid" } },
    { name: "Basic", value: "Basic dXNlcjpwYXNz", expected: { kind: "invalid" } },
    { name: "merged by Envoy", value: `Bearer ${JWT}, Bearer ${JWT}`, expected: { kind: "invalid" } },
    { name: "two segments", value: "Bearer a.b", expected: { kind: "invalid" } },
    { name: "four segments", value: `Bearer ${JWT}.x`, expected: { kind: "invalid" } },
    { name: "empty signature", value: "Bearer a.b.", expected: { kind: "invalid" } },
    { name: "non-ASCII", value: `Bearer ${JWT}é`, expected: { kind: "invalid" } },
    { name: "too large", value: `Bearer a.${"b".repeat(100_000)}.c`, expected: { kind: "invalid" } },
  ])("$name", ({ value, expected }) => {
    expect(bearerToken(value === undefined ? {} : { authorization: value })).toMatchObject(expected);
  });
});

describe("cookieToken", () => {
  it.each([
    { name: "absent", value: "theme=dark", expected: { kind: "absent" } },
    { name: "one", value: `theme=dark; fundament_auth=${JWT}`, expected: { kind: "found", source: "cookie", token: JWT } },
    { name: "two with that name", value: `fundament_auth=${JWT}; fundament_auth=${JWT}`, expected: { kind: "invalid" } },
    { name: "merged with a comma", value: `fundament_auth=${JWT}, fundament_auth=${JWT}`, expected: { kind: "invalid" } },
    { name: "similar name only", value: `xfundament_auth=${JWT}`, expected: { kind: "absent" } },
    { name: "not a JWT", value: "fundament_auth=hello", expected: { kind: "invalid" } },
  ])("$name", ({ value, expected }) => {
    expect(cookieToken({ cookie: value }, "fundament_auth")).toMatchObject(expected);
  });
});

describe("cookieCredentialAllowed: the browser vouches for the page (a listed Origin, or same-origin)", () => {
  const CONSOLE = "https://console.fundament.io";
  const listed = new Set([CONSOLE]);
  it.each<{ name: string; headers: Record<string, string>; expected: boolean }>([
    { name: "a listed Origin (the Console's fetch or WebSocket)", headers: { origin: CONSOLE, "sec-fetch-site": "same-site" }, expected: true },
    { name: "a listed Origin, cross-site", headers: { origin: CONSOLE, "sec-fetch-site": "cross-site" }, expected: true },
    { name: "a listed Origin without Sec-Fetch-Site (older browser)", headers: { origin: CONSOLE }, expected: true },
    { name: "same-origin without Origin (a same-origin GET)", headers: { "sec-fetch-site": "same-origin" }, expected: true },
    { name: "nothing: curl, or a client that is no browser", headers: {}, expected: false },
    { name: "a GET navigation or form from a plugin page (no Origin, same-site)", headers: { "sec-fetch-site": "same-site", "sec-fetch-mode": "navigate" }, expected: false },
    { name: "a cross-site navigation", headers: { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate" }, expected: false },
    { name: "a typed-in URL or bookmark (none)", headers: { "sec-fetch-site": "none" }, expected: false },
    { name: "an unlisted Origin (a plugin page's WebSocket)", headers: { origin: "https://plugin-proxy.fundament.io" }, expected: false },
    { name: "an unlisted Origin claiming same-origin", headers: { origin: "https://plugin-proxy.fundament.io", "sec-fetch-site": "same-origin" }, expected: false },
    { name: "an opaque Origin (sandboxed iframe)", headers: { origin: "null" }, expected: false },
    { name: "an opaque Origin claiming same-origin", headers: { origin: "null", "sec-fetch-site": "same-origin" }, expected: false },
    { name: "the listed Origin with a trailing slash", headers: { origin: `${CONSOLE}/` }, expected: false },
    { name: "the listed Origin in another case", headers: { origin: "https://Console.fundament.io" }, expected: false },
    { name: "the listed Origin over http", headers: { origin: "http://console.fundament.io" }, expected: false },
    { name: "two Origins merged by Envoy", headers: { origin: `${CONSOLE}, https://evil.example` }, expected: false },
    { name: "an empty Origin", headers: { origin: "" }, expected: false },
    { name: "Sec-Fetch-Site merged by Envoy", headers: { "sec-fetch-site": "same-origin, cross-site" }, expected: false },
    { name: "Sec-Fetch-Site in another case", headers: { "sec-fetch-site": "Same-Origin" }, expected: false },
    { name: "Sec-Fetch-Site with spaces", headers: { "sec-fetch-site": " same-origin" }, expected: false },
  ])("$name → $expected", ({ headers, expected }) => {
    expect(cookieCredentialAllowed(headers, listed)).toBe(expected);
  });

  it("no listed origins: only same-origin", () => {
    expect(cookieCredentialAllowed({ origin: CONSOLE }, new Set())).toBe(false);
    expect(cookieCredentialAllowed({ "sec-fetch-site": "same-origin" }, new Set())).toBe(true);
  });
});

describe("websocketBearerToken", () => {
  const entry = `base64url.bearer.authorization.k8s.io.${Buffer.from(JWT).toString("base64url")}`;
  it.each([
    { name: "absent", value: "v5.channel.k8s.io", expected: { kind: "absent" } },
    { name: "present among others", value: `v5.channel.k8s.io, ${entry}`, expected: { kind: "found", source: "websocket-protocol", token: JWT } },
    { name: "twice", value: `${entry}, ${entry}`, expected: { kind: "invalid" } },
    { name: "not base64url", value: "base64url.bearer.authorization.k8s.io.a+b/c=", expected: { kind: "invalid" } },
    { name: "decodes to a non-JWT", value: `base64url.bearer.authorization.k8s.io.${Buffer.from("hello").toString("base64url")}`, expected: { kind: "invalid" } },
  ])("$name", ({ value, expected }) => {
    expect(websocketBearerToken({ "sec-websocket-protocol": value })).toMatchObject(expected);
  });

  it.each([
    { name: "bearer among others", value: `v5.channel.k8s.io, ${entry}`, expected: "v5.channel.k8s.io" },
    { name: "bearer only", value: entry, expected: undefined },
    { name: "no bearer", value: "v5.channel.k8s.io, v4.channel.k8s.io", expected: "v5.channel.k8s.io, v4.channel.k8s.io" },
  ])("withoutWebsocketBearer: $name", ({ value, expected }) => {
    expect(withoutWebsocketBearer(value)).toBe(expected);
  });
});
