/**
 * The revocation gate the policies run (FUN-17 §10, issue 17): the request's subject — the token's
 * claims as minted, or the installation as pinned now — against the deny-list
 * (src/kube-watch/revocations.ts).
 */
import { type Deny, deny } from "./decision.ts";
import { traceVerdict } from "./trace.ts";
import type { RevocationList, RevocationSubject } from "../kube-watch/revocations.ts";
import { publishRevoked } from "../metrics/events.ts";
import type { Installation } from "../ports/policy-ports.ts";
import type { PluginClaims } from "../tokens/fundament.ts";

/** A PluginToken's request: the token's own claims, as minted. */
export function tokenSubject(claims: PluginClaims): RevocationSubject {
  return {
    installationId: claims.installationId,
    pluginName: claims.pluginName,
    pluginVersion: claims.pluginVersion,
    definitionHash: claims.definitionHash,
    userId: claims.sub,
  };
}

/** The installation as it is pinned now (a re-pin may have moved it onto a revoked version since the mint). */
export function pinnedSubject(installation: Installation, userId?: string): RevocationSubject {
  return {
    installationId: installation.uid,
    pluginName: installation.pluginName,
    pluginVersion: installation.pluginVersion,
    definitionHash: installation.definitionHash,
    ...(userId === undefined ? {} : { userId }),
  };
}

/**
 * The revocation gate: a 403 `revoked` when an entry covers the subject, counted by the kind of
 * entry. The caller is not told which entry (its name may name the incident). Throws
 * DependencyUnavailable while the list is not synced: a 503, never an allow.
 */
export function revokedDenial(list: RevocationList, subject: RevocationSubject, policy: string, gate: "revocation" | "revocation-pinned"): Deny | undefined {
  const entry = list.revoked(subject);
  if (traceVerdict(gate, entry === undefined)) return undefined;
  publishRevoked(policy, entry!.target.scope);
  return deny("revoked", "access through this plugin has been revoked");
}
