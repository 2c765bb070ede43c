/**
 * Subjects of a Project's roleBindings (ADR-0028): validated as the CRD validates them, compiled
 * once when the Project arrives, matched per request.
 *
 * A subject is exactly one of
 *  - `session {memberOf}`: an interactive user whose groups overlap memberOf (OR; exact,
 *    case-sensitive group names);
 *  - `jwks {endpoint, audience, claims}`: a workload token verified by the provider behind the
 *    https discovery `endpoint`, carrying `audience`, with EVERY listed claim a string matching its
 *    glob (AND).
 * A subject that fails validation, or names a provider the platform does not trust, never matches;
 * compiling reports why, and the rest of the Project keeps working.
 */
import { discoveryEndpoint } from "./discovery-url.ts";
import { compileGlob, type Glob } from "./glob.ts";

export interface SessionSubject {
  readonly kind: "session";
  readonly memberOf: readonly string[];
}

export interface ClaimMatcher {
  readonly name: string;
  readonly glob: Glob;
}

export interface JwksSubject {
  readonly kind: "jwks";
  /** Normalized discovery URL (discovery-url.ts). */
  readonly endpoint: string;
  readonly audience: string;
  readonly claims: readonly ClaimMatcher[];
}

export type Subject = SessionSubject | JwksSubject;

/** Why a subject never matches; a closed set, so it can label a metric. */
export type SubjectProblem =
  | "not-exactly-one-kind"
  | "unknown-kind"
  | "session-invalid"
  | "jwks-endpoint-invalid"
  | "jwks-audience-missing"
  | "jwks-claims-missing"
  | "jwks-claims-unconstrained"
  | "jwks-claim-invalid"
  | "untrusted-provider";

export type CompiledSubject = { readonly ok: true; readonly subject: Subject } | { readonly ok: false; readonly problem: SubjectProblem };

/** Whether the platform trusts the provider behind a (normalized) discovery endpoint (ADR open question 1). */
export type ProviderTrust = (endpoint: string) => boolean;

/** Claims that never narrow a subject to fewer than all the tokens its provider issues for its audience. */
const NON_NARROWING_CLAIMS: ReadonlySet<string> = new Set(["iss", "aud"]);

export function compileSubject(raw: unknown, trusts: ProviderTrust): CompiledSubject {
  if (!isRecord(raw)) return invalid("not-exactly-one-kind");
  // The subject is an open union: any other set field is a kind this version does not know.
  const kinds = Object.keys(raw).filter((k) => raw[k] !== undefined && raw[k] !== null);
  if (kinds.length !== 1) return invalid("not-exactly-one-kind");
  const kind = kinds[0]!;
  if (kind === "session") return compileSession(raw["session"]);
  if (kind === "jwks") return compileJwks(raw["jwks"], trusts);
  return invalid("unknown-kind");
}

function compileSession(raw: unknown): CompiledSubject {
  if (!isRecord(raw)) return invalid("session-invalid");
  const memberOf = raw["memberOf"];
  if (!Array.isArray(memberOf) || memberOf.length === 0) return invalid("session-invalid");
  if (!memberOf.every((g): g is string => typeof g === "string" && g !== "")) return invalid("session-invalid");
  return { ok: true, subject: { kind: "session", memberOf: [...memberOf] } };
}

function compileJwks(raw: unknown, trusts: ProviderTrust): CompiledSubject {
  if (!isRecord(raw)) return invalid("jwks-endpoint-invalid");
  const endpoint = typeof raw["endpoint"] === "string" ? discoveryEndpoint(raw["endpoint"]) : undefined;
  if (endpoint === undefined) return invalid("jwks-endpoint-invalid");
  const audience = raw["audience"];
  if (typeof audience !== "string" || audience === "") return invalid("jwks-audience-missing");
  const claims = raw["claims"];
  if (!isRecord(claims) || Object.keys(claims).length === 0) return invalid("jwks-claims-missing");
  const matchers: ClaimMatcher[] = [];
  for (const [name, pattern] of Object.entries(claims)) {
    if (name === "" || typeof pattern !== "string") return invalid("jwks-claim-invalid");
    matchers.push({ name, glob: compileGlob(pattern) });
  }
  // Claims exist so a subject cannot match every token a provider issues (ADR-0028); `*` alone would,
  // and so would `iss` and `aud`: every verified token carries the provider's issuer, and the
  // subject's audience is one any of the provider's callers may request.
  if (Object.entries(claims).every(([name, pattern]) => NON_NARROWING_CLAIMS.has(name) || /^\*+$/.test(pattern as string))) {
    return invalid("jwks-claims-unconstrained");
  }
  // Checked last, so a subject that is also malformed reports the malformation.
  if (!trusts(endpoint)) return invalid("untrusted-provider");
  return { ok: true, subject: { kind: "jwks", endpoint, audience, claims: matchers } };
}

/** Any overlap between the caller's groups and memberOf. */
export function sessionMatches(subject: SessionSubject, groups: ReadonlySet<string>): boolean {
  return subject.memberOf.some((group) => groups.has(group));
}

/**
 * The token carries the subject's audience and every listed claim is a string matching its glob.
 * The token must already be verified by the subject's provider; the caller checks that.
 */
export function jwksMatches(subject: JwksSubject, audiences: readonly string[], claims: Readonly<Record<string, unknown>>): boolean {
  if (!audiences.includes(subject.audience)) return false;
  return subject.claims.every(({ name, glob }) => {
    const value = Object.hasOwn(claims, name) ? claims[name] : undefined;
    return typeof value === "string" && glob.matches(value);
  });
}

function invalid(problem: SubjectProblem): CompiledSubject {
  return { ok: false, problem };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
