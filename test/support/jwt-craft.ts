/**
 * Hand-made JWTs for the adversarial suite: raw header and payload text (so duplicate keys and odd
 * types survive), signed with node:crypto directly rather than through jose, which would refuse
 * to produce most of them.
 */
import { createHmac, createSign, generateKeyPairSync, type KeyObject, sign as cryptoSign } from "node:crypto";
import { pluginClaims, SECRET, userClaims } from "./tokens.ts";

export const b64url = (text: string | Buffer): string => Buffer.from(text).toString("base64url");

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/** How the third segment is made. */
export type Signer =
  | { readonly hmac: "sha256" | "sha384" | "sha512"; readonly secret: string | Buffer }
  | { readonly rsa: "RSA-SHA256"; readonly key: KeyObject }
  | { readonly ec: KeyObject }
  | { readonly ed25519: KeyObject }
  | { readonly signature: string };

export function craft(header: object | string, payload: object | string, signer: Signer = { hmac: "sha256", secret: SECRET }): string {
  const h = typeof header === "string" ? header : JSON.stringify(header);
  const p = typeof payload === "string" ? payload : JSON.stringify(payload);
  const input = `${b64url(h)}.${b64url(p)}`;
  return `${input}.${signature(input, signer)}`;
}

function signature(input: string, signer: Signer): string {
  if ("signature" in signer) return signer.signature;
  if ("hmac" in signer) return createHmac(signer.hmac, signer.secret).update(input).digest("base64url");
  if ("rsa" in signer) return createSign(signer.rsa).update(input).sign(signer.key).toString("base64url");
  if ("ec" in signer) return cryptoSign("sha256", Buffer.from(input), { key: signer.ec, dsaEncoding: "ieee-p1363" }).toString("base64url");
  return cryptoSign(null, Buffer.from(input), signer.ed25519).toString("base64url");
}

/**
 * Registered claims as authn-api stamps them, valid for 15 minutes from now; `claims` override them,
 * and a claim set to undefined is left out of the JSON.
 */
export function stamped(claims: Record<string, unknown>): Record<string, unknown> {
  const iat = nowSeconds();
  return { iss: "fundament-authn-api", iat, exp: iat + 900, ...claims };
}

export const validPluginPayload = (overrides: Record<string, unknown> = {}) => stamped(pluginClaims(overrides));
export const validUserPayload = (overrides: Record<string, unknown> = {}) => stamped(userClaims(overrides));

/** Keys an attacker holds: none of them is the configured HS256 secret. */
export const attacker = {
  rsa: generateKeyPairSync("rsa", { modulusLength: 2048 }),
  ec: generateKeyPairSync("ec", { namedCurve: "P-256" }),
  ed25519: generateKeyPairSync("ed25519"),
  secret: "attacker-chosen-secret-0123456789abcdef0123456789",
};

/** Every upper/lower-case spelling of a word: none, None, nOnE, … */
export function caseVariants(word: string): string[] {
  let variants = [""];
  for (const c of word) variants = variants.flatMap((v) => (c.toLowerCase() === c.toUpperCase() ? [v + c] : [v + c.toLowerCase(), v + c.toUpperCase()]));
  return variants;
}

/** The third segment of a compact JWS: what must never appear in a log. */
export const signatureOf = (jwt: string): string => jwt.split(".")[2] ?? "";
