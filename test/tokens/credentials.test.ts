/** Where credentials are read from: a table per source, adversarial values included. */
import { describe, expect, it } from "vitest";
import {
  bearerToken,
  carriedTokens,
  carriesNoOtherToken,
  credentialHeadersTooLarge,
  cookieCredentialAllowed,
  cookieToken,
  holdsTokenOf,
  websocketBearerToken,
  withoutCookie,
  withoutWebsocketBearer,
} from "../../src/tokens/credentials.ts";
import { prng } from "../support/prng.ts";

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

describe("carriedTokens: every token in any carrier, read as the credential or not", () => {
  const A = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnYQ";
  const B = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiIn0.c2lnYg";
  const ws = (token: string) => `base64url.bearer.authorization.k8s.io.${Buffer.from(token).toString("base64url")}`;
  it.each<{ name: string; headers: Record<string, string>; expected: Array<[string, string]> }>([
    { name: "nothing", headers: { cookie: "theme=dark", "sec-websocket-protocol": "v5.channel.k8s.io" }, expected: [] },
    { name: "Bearer, any spelling", headers: { authorization: `  bEaReR   ${A} ` }, expected: [["bearer", A]] },
    { name: "a scheme portcullis refuses still carries its token", headers: { authorization: `Basic ${A}` }, expected: [["bearer", A]] },
    { name: "merged Authorization values", headers: { authorization: `Bearer ${A}, Bearer ${B}` }, expected: [["bearer", A], ["bearer", B]] },
    { name: "the cookie, whatever the Origin", headers: { cookie: `theme=dark; fundament_auth=${A}`, origin: "https://evil.example" }, expected: [["cookie", A]] },
    { name: "the cookie twice, and behind a comma", headers: { cookie: `fundament_auth=${A}; x=1, fundament_auth=${B}` }, expected: [["cookie", A], ["cookie", B]] },
    { name: "a similar cookie name is not the cookie", headers: { cookie: `xfundament_auth=${A}; fundament_auth_=${B}` }, expected: [] },
    { name: "a cookie value that is no token", headers: { cookie: "fundament_auth=deleted" }, expected: [] },
    { name: "the subprotocol", headers: { "sec-websocket-protocol": `v5.channel.k8s.io, ${ws(A)}` }, expected: [["websocket-protocol", A]] },
    { name: "a subprotocol that is not base64url is no token", headers: { "sec-websocket-protocol": "base64url.bearer.authorization.k8s.io.a+b" }, expected: [] },
    { name: "every carrier at once", headers: { authorization: `Bearer ${A}`, cookie: `fundament_auth=${B}`, "sec-websocket-protocol": ws(B) }, expected: [["bearer", A], ["cookie", B], ["websocket-protocol", B]] },
    { name: "four tokens: the most a request may carry", headers: { authorization: `Bearer ${A}`, cookie: `fundament_auth=${A}; fundament_auth=${A}; fundament_auth=${A}` }, expected: [["bearer", A], ["cookie", A], ["cookie", A], ["cookie", A]] },
    { name: "five tokens: all read (the caller refuses)", headers: { authorization: `Bearer ${A}`, cookie: `fundament_auth=${A}; fundament_auth=${A}; fundament_auth=${A}; fundament_auth=${B}` }, expected: [["bearer", A], ["cookie", A], ["cookie", A], ["cookie", A], ["cookie", B]] },
  ])("$name", ({ headers, expected }) => {
    expect([...carriedTokens(headers, "fundament_auth")]).toEqual(expected.map(([source, token]) => ({ source, token })));
  });
});

describe("withoutCookie: one cookie removed, every other pair verbatim", () => {
  it.each([
    { name: "absent: the value itself", value: "theme=dark;lang=en", expected: "theme=dark;lang=en" },
    { name: "first", value: `fundament_auth=${JWT}; theme=dark`, expected: "theme=dark" },
    { name: "last", value: `theme=dark; fundament_auth=${JWT}`, expected: "theme=dark" },
    { name: "middle", value: `a=1; fundament_auth=${JWT}; b=2`, expected: "a=1; b=2" },
    { name: "only", value: `fundament_auth=${JWT}`, expected: undefined },
    { name: "twice", value: `fundament_auth=${JWT}; a=1; fundament_auth=x`, expected: "a=1" },
    { name: "padded name", value: `a=1;  fundament_auth =${JWT}`, expected: "a=1" },
    { name: "behind a comma: that segment goes whole", value: `a=1; b=2, fundament_auth=${JWT}; c=3`, expected: "a=1; c=3" },
    { name: "a comma inside another cookie's value stays", value: "prefs=a,b; theme=dark", expected: "prefs=a,b; theme=dark" },
    { name: "similar names stay", value: "xfundament_auth=1; fundament_auth_x=2; fundament_auth=3", expected: "xfundament_auth=1; fundament_auth_x=2" },
    { name: "a value holding the name stays", value: "next=fundament_auth=1", expected: "next=fundament_auth=1" },
  ])("$name", ({ value, expected }) => {
    expect(withoutCookie(value, "fundament_auth")).toBe(expected);
  });
});

describe("holdsTokenOf: a token the issuer minted, or one for its audiences, read unverified", () => {
  const jws = (payload: unknown) => `eyJhbGciOiJIUzI1NiJ9.${Buffer.from(typeof payload === "string" ? payload : JSON.stringify(payload)).toString("base64url")}.c2ln`;
  const ISSUER = "fundament-authn-api";
  const AUDIENCES = ["fundament-user", "fundament-plugin"];
  it.each([
    { name: "absent", value: undefined, holds: false },
    { name: "an API key", value: "Bearer fun_0123456789ABCDEFGHIJKLMNOPQRSTabcdef", holds: false },
    { name: "a PluginToken", value: `Bearer ${jws({ iss: ISSUER, aud: "fundament-plugin" })}`, holds: true },
    { name: "a UserToken, lower-case scheme", value: `bearer ${jws({ iss: ISSUER, aud: ["fundament-user"] })}`, holds: true },
    { name: "the issuer's token for another audience", value: `Bearer ${jws({ iss: ISSUER, aud: "dcim-api" })}`, holds: true },
    { name: "another issuer's token for a Fundament audience", value: `Bearer ${jws({ iss: "someone", aud: ["x", "fundament-plugin"] })}`, holds: true },
    { name: "a workload's ServiceAccount token", value: `Bearer ${jws({ iss: "https://kubernetes.default.svc", aud: ["authn-api"], sub: "system:serviceaccount:ci:deployer" })}`, holds: false },
    { name: "claim names in another case (Go's encoding/json reads them)", value: `Bearer ${jws({ ISS: ISSUER })}`, holds: true },
    { name: "ſ for s (Go folds it)", value: `Bearer ${jws({ "iſs": ISSUER })}`, holds: true },
    { name: "AUD in capitals", value: `Bearer ${jws({ AUD: ["fundament-user"] })}`, holds: true },
    { name: "behind another value merged by Envoy", value: `Bearer fun_0123456789ABCDEFGHIJKLMNOPQRSTabcdef, Bearer ${jws({ iss: ISSUER })}`, holds: true },
    { name: "no scheme", value: jws({ iss: ISSUER }), holds: true },
    { name: "a payload that is not JSON", value: `Bearer ${jws("not json")}`, holds: false },
    { name: "a payload that is an array", value: `Bearer ${jws([ISSUER])}`, holds: false },
    { name: "an issuer that only starts alike", value: `Bearer ${jws({ iss: `${ISSUER}/` })}`, holds: false },
  ])("$name → $holds", ({ value, holds }) => {
    expect(holdsTokenOf(value, ISSUER, AUDIENCES)).toBe(holds);
  });
});

describe("credentialHeadersTooLarge: Authorization, Cookie and Sec-WebSocket-Protocol together", () => {
  const KIB = 1024;
  it.each<{ name: string; headers: Record<string, string>; tooLarge: boolean }>([
    { name: "nothing", headers: {}, tooLarge: false },
    // Envoy's default max_request_headers_kb: the whole header map, so these never exceed it.
    { name: "60 KiB in one cookie (Envoy's default limit)", headers: { cookie: "a".repeat(60 * KIB) }, tooLarge: false },
    { name: "exactly 64 KiB across the three", headers: { authorization: "a".repeat(16 * KIB), cookie: "c".repeat(32 * KIB), "sec-websocket-protocol": "p".repeat(16 * KIB) }, tooLarge: false },
    { name: "one character more", headers: { authorization: "a".repeat(16 * KIB), cookie: "c".repeat(32 * KIB + 1), "sec-websocket-protocol": "p".repeat(16 * KIB) }, tooLarge: true },
    { name: "a 3 MB cookie full of tokens", headers: { cookie: "fundament_auth=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnYQ; ".repeat(50_000) }, tooLarge: true },
    { name: "other headers do not count", headers: { "x-padding": "x".repeat(100 * KIB), cookie: "a=b" }, tooLarge: false },
  ])("$name", ({ headers, tooLarge }) => {
    expect(credentialHeadersTooLarge(headers)).toBe(tooLarge);
  });
});

describe("carriesNoOtherToken: the common request, where the other carriers need no split", () => {
  const A = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnYQ";
  it.each<{ name: string; headers: Record<string, string>; read: "bearer" | "cookie" | undefined; expected: boolean }>([
    { name: "nothing carried", headers: {}, read: undefined, expected: true },
    { name: "Authorization, read", headers: { authorization: `Bearer ${A}` }, read: "bearer", expected: true },
    { name: "Authorization, not read (refused, or not accepted here)", headers: { authorization: `Bearer ${A}` }, read: undefined, expected: false },
    { name: "Authorization beside the cookie read", headers: { authorization: `Bearer ${A}`, cookie: `fundament_auth=${A}` }, read: "cookie", expected: false },
    { name: "any cookie", headers: { authorization: `Bearer ${A}`, cookie: "theme=dark" }, read: "bearer", expected: false },
    { name: "any subprotocol", headers: { authorization: `Bearer ${A}`, "sec-websocket-protocol": "v5.channel.k8s.io" }, read: "bearer", expected: false },
  ])("$name", ({ headers, read, expected }) => {
    expect(carriesNoOtherToken(headers, read)).toBe(expected);
  });

  // The claim it rests on, against carriedTokens itself: where bearerToken() reads a token and no
  // other carrier is present, Authorization holds that token and no other, whatever its spelling.
  it("agrees with carriedTokens on 100,000 generated Authorization values (seed 55)", () => {
    const next = prng(55);
    const pick = <T,>(xs: readonly T[]) => xs[Math.floor(next() * xs.length)]!;
    const part = {
      lead: ["", " ", "\t", " \t ", "\v", ",", "\u00a0"],
      scheme: ["Bearer", "bearer", "BEARER", "Basic", "Bear er", "", "a.b.c"],
      gap: [" ", "   ", "\t", ", ", "\u00a0", ""],
      token: [A, `${A},${A}`, `${A} ${A}`, `${A}\t${A}`, `${A}\v${A}`, `${A}\u2028${A}`, "a.b", "a.b.c.d", `${A}.`, `${A}=`],
      trail: ["", " ", "\t", " \t", ",", ", x.y.z", "\u00a0", "\n"],
    };
    let read = 0;
    for (let i = 0; i < 100_000; i++) {
      const authorization = pick(part.lead) + pick(part.scheme) + pick(part.gap) + pick(part.token) + pick(part.trail);
      const headers = { authorization };
      const found = bearerToken(headers);
      const source = found.kind === "found" ? "bearer" : undefined;
      if (!carriesNoOtherToken(headers, source)) continue;
      read += 1;
      expect([...carriedTokens(headers, "fundament_auth")], JSON.stringify(authorization)).toEqual([{ source: "bearer", token: (found as { token: string }).token }]);
    }
    // The generator reaches the fast path, or the test shows nothing.
    expect(read).toBeGreaterThan(300);
  });
});
