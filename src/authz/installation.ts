/**
 * Whether the installation a PluginToken names may be acted through (FUN-17 §11, FUN-19 §4):
 * it exists, is the one the token names, is not being deleted, and pins a definition.
 */
import { type Deny, deny } from "./decision.ts";
import type { Installation } from "./ports.ts";
import { isPinnedHash } from "../tokens/claim-formats.ts";
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
  // Fail closed (FUN-19 §4): an unpinned install is only usable behind the explicit local-dev switch.
  if (!isPinnedHash(installation.definitionHash) && !allowUnpinned) {
    return deny("installation-unavailable", "the plugin installation does not pin a definition");
  }
  return undefined;
}

/**
 * Being deleted: a deletionTimestamp is set, or the controller reports phase Terminating (it may
 * do so before the API server sets the timestamp, e.g. while it drains the plugin). The gateway
 * and GetInstallationManifest both ask this, so authn-api never mints a token the gateway refuses.
 */
export function isBeingDeleted(installation: Installation): boolean {
  return installation.terminating || installation.phase === "Terminating";
}
