/** The policies a route can name: Envoy names one per route (`context_extensions.policy`); authz/policy.ts decides each. */
export const POLICY_NAMES = ["kube-api-proxy", "plugin-proxy", "plugin-assets", "konfidence-api", "platform-api", "public"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];
