/**
 * Impersonation headers (Kubernetes' `Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`): a plugin
 * request carrying them is refused 403 `impersonation-forbidden` on every route that takes a
 * PluginToken (DESIGN.md "Denials"). Impersonation would let the plugin act outside the user's
 * SubjectAccessReview on kube-api-proxy, and nothing behind plugin-proxy may be handed a
 * client-chosen identity to relay.
 */
export function impersonates(headers: Readonly<Record<string, string>>): boolean {
  for (const name in headers) if (name.startsWith("impersonate-")) return true;
  return false;
}
