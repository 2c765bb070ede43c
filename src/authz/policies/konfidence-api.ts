/**
 * konfidence-api: the Konfidence API's authorization (ADR-0028), enforced in front of it. In order:
 *  0. the endpoint, from the route table: unknown → 404 `not-found`; public ones (the login flow)
 *     are allowed as they are;
 *  1. the caller's identity: a workload's Bearer token, verified by the provider its `iss` names
 *     (only providers some Project's jwks subject names are ever contacted) and carrying an
 *     audience some Project's jwks subject names for that provider, or one of the configured
 *     platform audiences; or an interactive user's session credential, verified by the platform's
 *     session provider → 401 on failure; the `authenticated` routes (project list, identity,
 *     logout) need nothing more;
 *  2. resolve the Project by name (`{projectId}` = metadata.name) → 404 `project-not-found`;
 *  3. match the caller against that Project's subjects only; the union of matched roles
 *     → 403 `no-role` when empty;
 *  4. the roles' permissions on the endpoint's resource kind and verb → 403 `role-denied`.
 * Identity comes before the Project, so a caller without a valid credential cannot probe which
 * projects exist.
 *
 * Precedence: a Bearer token is the caller's explicit choice and wins over a session cookie, which
 * browsers attach to every request; a Bearer token that fails is a 401, never a fallback to the
 * cookie. A session carried in a header is as explicit as Bearer, so both together are refused.
 *
 * On allow, `x-konfidence-issuer` (a workload token's verified `iss`, an https URL; for a session
 * user `session:` and the session provider's issuer), `x-konfidence-subject` (the `sub`, unique only
 * together with the issuer) and, inside a project, `x-konfidence-roles` (sorted, comma-separated)
 * are always overwritten, and every other x-konfidence-* / x-fundament-* header the caller sent is
 * removed.
 */
import { allow, type Decision, type Deny, deny } from "../decision.ts";
import type { Policy } from "../policy.ts";
import { trace, traceVerdict } from "../trace.ts";
import type { HttpRequest } from "../../envoy/check-request.ts";
import { isSafeHeaderValue, mutations } from "../../headers/mutations.ts";
import { discoveryEndpointFor } from "../../konfidence-model/discovery-url.ts";
import { unverifiedIssuer } from "../../konfidence/oidc.ts";
import type { Permissions, RouteTable } from "../../konfidence-model/permissions.ts";
import type { ProjectLookup, SessionTokens, WorkloadTokens } from "../../konfidence/ports.ts";
import { type Caller, rolesOf } from "../../konfidence-model/role-bindings.ts";
import { type SessionCredentialSource, sessionCredential } from "../../konfidence/session.ts";
import { bearerToken, type CredentialLookup } from "../../tokens/credentials.ts";

export interface KonfidenceApiDeps {
  readonly routes: RouteTable;
  readonly permissions: Permissions;
  readonly projects: ProjectLookup;
  readonly workloadTokens: WorkloadTokens;
  /** Audiences a workload token may carry besides those the Projects' jwks subjects name for its provider. */
  readonly platformAudiences?: readonly string[];
  /** Absent when no session provider is configured: only workloads can call. */
  readonly session?: { readonly tokens: SessionTokens; readonly credential: SessionCredentialSource };
}

export const KONFIDENCE_HEADERS = { issuer: "x-konfidence-issuer", subject: "x-konfidence-subject", roles: "x-konfidence-roles" } as const;

/** Prefixes the session provider's issuer, so no workload (whose issuer is an https URL) ever shares a session user's issuer. */
export const SESSION_ISSUER_PREFIX = "session:";

/** Longer subjects and issuers are refused rather than truncated: the upstream must see exactly who it is. */
const MAX_IDENTITY_LENGTH = 512;

interface Identified {
  readonly kind: "identified";
  /** The `x-konfidence-issuer` value: with the subject, the caller's identity. */
  readonly issuer: string;
  readonly subject: string;
  readonly caller: Caller;
}

export function konfidenceApi(deps: KonfidenceApiDeps): Policy {
  return {
    name: "konfidence-api",
    bodyShape: "json",
    async decide(request: HttpRequest): Promise<Decision> {
      const route = deps.routes.match(request.method, request.path);
      trace("endpoint", route.kind);
      if (route.kind === "malformed") return deny("bad-request", route.detail);
      if (route.kind === "not-found") return deny("not-found", "no such endpoint");
      if (route.kind === "method-not-allowed") return deny("method-not-allowed", "method not allowed here", { allow: route.allow.join(", ") });
      if (route.kind === "public") return allow(mutations(request.headers));

      const identity = await identifyKonfidenceCaller(request.headers, deps);
      trace("identity", identity.kind === "deny" ? identity.reason : `${identity.caller.kind} caller`);
      if (identity.kind === "deny") return identity;
      if (route.kind === "authenticated") return allow(mutations(request.headers, { set: identityHeaders(identity) }));

      // 1. Resolve the Project and load its roleBindings.
      const project = deps.projects.byName(route.projectId);
      if (!traceVerdict("project", project !== undefined)) return deny("project-not-found", "no such project");
      // 2. Match the caller against this Project's subjects; 3. the union of matched roles decides.
      const roles = rolesOf(project!.bindings, identity.caller);
      if (!traceVerdict("role", roles.size > 0)) return deny("no-role", "the caller holds no role in this project");
      if (!traceVerdict("permission", deps.permissions.allows(roles, route.resource, route.verb))) {
        return deny("role-denied", `no role of the caller may ${route.verb} ${route.resource}`);
      }
      return allow(
        mutations(request.headers, { set: { ...identityHeaders(identity), [KONFIDENCE_HEADERS.roles]: [...roles].sort().join(",") } }),
      );
    },
  };
}

async function identifyKonfidenceCaller(headers: Readonly<Record<string, string>>, deps: KonfidenceApiDeps): Promise<Identified | Deny> {
  const bearer = bearerToken(headers);
  const session: CredentialLookup = deps.session === undefined ? { kind: "absent" } : sessionCredential(headers, deps.session.credential);
  if (bearer.kind === "invalid") return deny("invalid-token", "the credential is malformed");
  if (bearer.kind === "found") {
    if (session.kind !== "absent" && deps.session !== undefined && "header" in deps.session.credential) {
      return deny("invalid-token", "more than one credential");
    }
    return workload(bearer.token, deps);
  }
  if (session.kind === "invalid") return deny("invalid-token", "the credential is malformed");
  if (session.kind === "found" && deps.session !== undefined) return sessionUser(session.token, deps.session.tokens);
  return deny("missing-token", "no credentials");
}

/** A workload token, verified once per provider (cached), by the one provider its `iss` names. */
async function workload(token: string, deps: KonfidenceApiDeps): Promise<Identified | Deny> {
  const claimedIssuer = unverifiedIssuer(token);
  const endpoint = claimedIssuer === undefined ? undefined : discoveryEndpointFor(claimedIssuer);
  if (endpoint === undefined) return deny("invalid-token", "the token names no https issuer");
  if (!deps.projects.namesProvider(endpoint)) return deny("invalid-token", "no project trusts the token's issuer");
  const verified = await deps.workloadTokens.verify(endpoint, token);
  if (!verified.ok) return deny("invalid-token", `the token is not valid: ${verified.detail}`);
  const { issuer, sub, audiences, claims } = verified.token;
  // A token minted for another service (or for none) must not pass for a Konfidence caller. Checked
  // for every route: the authenticated ones match no subject, and on project routes it keeps a
  // replayed token from probing which projects exist. 401, not 403 (FUN-12): such a token says who
  // the caller is to another audience, never to Konfidence, so no identity was established; the
  // caller needs another token, not another role.
  if (!deps.platformAudiences?.some((a) => audiences.includes(a)) && !deps.projects.namesAudience(endpoint, audiences)) {
    return deny("wrong-audience", "no project and no platform audience names the token's audience for its issuer");
  }
  if (!isIdentityHeaderValue(issuer)) return deny("invalid-token", "the token's issuer cannot be passed on");
  if (!isIdentityHeaderValue(sub)) return deny("invalid-token", "the token's sub cannot be passed on");
  return { kind: "identified", issuer, subject: sub, caller: { kind: "workload", endpoint, audiences, claims } };
}

async function sessionUser(token: string, sessions: SessionTokens): Promise<Identified | Deny> {
  const verified = await sessions.verify(token);
  if (!verified.ok) return deny("invalid-token", `the session is not valid: ${verified.detail}`);
  const issuer = `${SESSION_ISSUER_PREFIX}${verified.issuer}`;
  if (!isIdentityHeaderValue(issuer)) return deny("invalid-token", "the session's issuer cannot be passed on");
  if (!isIdentityHeaderValue(verified.sub)) return deny("invalid-token", "the session's sub cannot be passed on");
  return { kind: "identified", issuer, subject: verified.sub, caller: { kind: "session", groups: verified.groups } };
}

function identityHeaders(identity: Identified): Record<string, string> {
  return { [KONFIDENCE_HEADERS.issuer]: identity.issuer, [KONFIDENCE_HEADERS.subject]: identity.subject };
}

function isIdentityHeaderValue(value: string): boolean {
  return value !== "" && value.length <= MAX_IDENTITY_LENGTH && isSafeHeaderValue(value);
}
