/** The ServiceAccounts Fundament creates on each cluster, by name. */

export interface ServiceAccountRef {
  readonly namespace: string;
  readonly name: string;
}

export const USER_SERVICE_ACCOUNT_NAMESPACE = "fundament-system";

/** The per-user identity that carries the user's project-driven RBAC: `fundament-{userID}` in `fundament-system`. */
export function userServiceAccount(userId: string): ServiceAccountRef {
  return { namespace: USER_SERVICE_ACCOUNT_NAMESPACE, name: `fundament-${userId}` };
}

/** The SubjectAccessReview subject for that ServiceAccount, as the API server's authenticator would name it. */
export function serviceAccountSubject(sa: ServiceAccountRef): { user: string; groups: string[] } {
  return {
    user: `system:serviceaccount:${sa.namespace}:${sa.name}`,
    groups: ["system:serviceaccounts", `system:serviceaccounts:${sa.namespace}`, "system:authenticated"],
  };
}

/** The plugin installation's ServiceAccount (FUN-11, reused by FUN-17): `plugin-{name}` in namespace `plugin-{name}`. */
export function pluginServiceAccount(installationName: string): ServiceAccountRef {
  return { namespace: `plugin-${installationName}`, name: `plugin-${installationName}` };
}
