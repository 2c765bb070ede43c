/**
 * A Project's `spec.roleBindings` (ADR-0028): a map of role name → subjects, compiled once when the
 * Project arrives. A caller holds a role when any of its subjects matches; the union of the roles
 * held decides the request.
 */
import {
  compileSubject,
  jwksMatches,
  type JwksSubject,
  type ProviderTrust,
  type SessionSubject,
  sessionMatches,
  type SubjectProblem,
} from "./subjects.ts";

export interface RoleBindings {
  readonly session: ReadonlyArray<{ readonly role: string; readonly subject: SessionSubject }>;
  /** jwks subjects by provider (discovery endpoint): a token is only held against its own provider's subjects. */
  readonly jwks: ReadonlyMap<string, ReadonlyArray<{ readonly role: string; readonly subject: JwksSubject }>>;
}

export type BindingProblemCode = SubjectProblem | "role-invalid" | "subjects-not-a-list";

/** One part of the roleBindings that never grants anything, and why. `index` is the subject's position. */
export interface BindingProblem {
  readonly role: string;
  readonly index?: number;
  readonly problem: BindingProblemCode;
}

/** Role names travel in `x-konfidence-roles` (comma-separated), so they are plain lower-case labels. */
const ROLE_NAME = /^[a-z][a-z0-9-]{0,62}$/;

export function isRoleName(name: string): boolean {
  return ROLE_NAME.test(name);
}

export function compileRoleBindings(raw: unknown, trusts: ProviderTrust): { bindings: RoleBindings; problems: BindingProblem[] } {
  const session: Array<{ role: string; subject: SessionSubject }> = [];
  const jwks = new Map<string, Array<{ role: string; subject: JwksSubject }>>();
  const problems: BindingProblem[] = [];
  const entries = typeof raw === "object" && raw !== null && !Array.isArray(raw) ? Object.entries(raw) : [];
  for (const [role, subjects] of entries) {
    if (!isRoleName(role)) {
      problems.push({ role, problem: "role-invalid" });
      continue;
    }
    if (!Array.isArray(subjects)) {
      problems.push({ role, problem: "subjects-not-a-list" });
      continue;
    }
    subjects.forEach((rawSubject: unknown, index) => {
      const compiled = compileSubject(rawSubject, trusts);
      if (!compiled.ok) {
        problems.push({ role, index, problem: compiled.problem });
        return;
      }
      const { subject } = compiled;
      if (subject.kind === "session") {
        session.push({ role, subject });
      } else {
        const forProvider = jwks.get(subject.endpoint) ?? [];
        forProvider.push({ role, subject });
        jwks.set(subject.endpoint, forProvider);
      }
    });
  }
  return { bindings: { session, jwks }, problems };
}

/** Who is asking, as far as matching subjects goes. */
export type Caller =
  | { readonly kind: "session"; readonly groups: ReadonlySet<string> }
  | {
      readonly kind: "workload";
      /** The provider that verified the token. */
      readonly endpoint: string;
      readonly audiences: readonly string[];
      readonly claims: Readonly<Record<string, unknown>>;
    };

/** The union of the roles whose subjects match the caller; a role already held is not matched again. */
export function rolesOf(bindings: RoleBindings, caller: Caller): ReadonlySet<string> {
  const roles = new Set<string>();
  if (caller.kind === "session") {
    for (const { role, subject } of bindings.session) {
      if (!roles.has(role) && sessionMatches(subject, caller.groups)) roles.add(role);
    }
    return roles;
  }
  for (const { role, subject } of bindings.jwks.get(caller.endpoint) ?? []) {
    if (!roles.has(role) && jwksMatches(subject, caller.audiences, caller.claims)) roles.add(role);
  }
  return roles;
}
