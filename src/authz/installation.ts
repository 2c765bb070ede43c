/**
 * Whether the installation a PluginToken names may be acted through (FUN-17 §11, FUN-19 §4):
 * it exists, is the one the token names, is not being deleted, and pins a definition.
 */
import { type Deny, deny } from "./decision.ts";
import type { Installation } from "../ports/policy-ports.ts";
import { pinnedSubject, revokedDenial } from "./revocation-gate.ts";
import type { RevocationList } from "../kube-watch/revocations.ts";
import { trace } from "./trace.ts";
import { isDefinitionHash, isPinnedHash } from "../tokens/claim-formats.ts";
import type { PluginClaims } from "../tokens/fundament.ts";

export function unusableInstallation(
  installation: Installation | undefined,
  claims: PluginClaims,
  allowUnpinned: boolean,
): Deny | undefined {
  if (installation === undefined) return deny("installation-unavailable", "no such plugin installation");
  // A uid names one object forever; a name that differs means the token was not minted for it.
  if (installation.name !== claims.installationName) {
    return deny("installation-mismatch", "the token names another installation");
  }
  if (isBeingDeleted(installation)) return deny("installation-unavailable", "the plugin installation is being deleted");
  // Fail closed (FUN-19 §4): an unpinned install ("empty or the sha256:unknown placeholder") is only
  // usable behind the explicit local-dev switch; a hash of any other shape pins nothing and never is.
  const hash = installation.definitionHash;
  if (!isPinnedHash(hash) && !(allowUnpinned && isDefinitionHash(hash))) {
    return deny("installation-unavailable", "the plugin installation does not pin a definition");
  }
  return undefined;
}

/** unusableInstallation()'s verdict, reached once: kube-api-proxy's TokenRequest waits on it, its gate 6 reports it. */
export type InstallationVerdict = Deny | { readonly kind: "usable"; readonly installation: Installation };

export function installationVerdict(installation: Installation | undefined, claims: PluginClaims, allowUnpinned: boolean): InstallationVerdict {
  return unusableInstallation(installation, claims, allowUnpinned) ?? { kind: "usable", installation: installation! };
}

/**
 * The installation gate both PluginToken policies run once the remote gates passed: usable (above),
 * and not revoked as it is pinned now — a re-pin since the mint may have moved it onto a revoked
 * plugin version or definition the token's own claims do not name.
 */
export function installationDenial(
  verdict: InstallationVerdict,
  claims: PluginClaims,
  options: { readonly revocations: RevocationList; readonly policy: string },
): Deny | undefined {
  trace("installation", verdict.kind === "usable" ? "usable" : verdict.message);
  if (verdict.kind === "deny") return verdict;
  return revokedDenial(options.revocations, pinnedSubject(verdict.installation, claims.sub), options.policy, "revocation-pinned");
}

/**
 * Being deleted: a deletionTimestamp is set, or the controller reports phase Terminating (it may
 * do so before the API server sets the timestamp, e.g. while it drains the plugin). The gateway
 * and GetInstallationManifest both ask this, so authn-api never mints a token the gateway refuses.
 */
export function isBeingDeleted(installation: Installation): boolean {
  return installation.terminating || installation.phase === "Terminating";
}
