/**
 * The `konfidence` section: the konfidence-api policy (ADR-0028). Optional; without it the policy
 * is not registered and its routes are denied `no-policy`. The permission matrix and route table
 * are validated here against the fixed vocabularies of resource kinds, verbs and methods, and the
 * route table is compiled once to reject ambiguous or malformed templates before the server starts.
 */
import { z } from "zod";
import { discoveryEndpoint } from "../konfidence-model/discovery-url.ts";
import {
  compileRoutes,
  DEFAULT_PERMISSIONS,
  DEFAULT_ROUTES,
  RESOURCE_KINDS,
  ROUTE_METHODS,
  RouteTableError,
  type RouteSpec,
  VERBS,
} from "../konfidence-model/permissions.ts";
import { isRoleName } from "../konfidence-model/role-bindings.ts";
import { deadlineMs, periodMs } from "./durations.ts";
import { origin } from "./envoy-schema.ts";

const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, "expected a lower-case UUID");
const discoveryUrl = z
  .string()
  .refine((u) => discoveryEndpoint(u) !== undefined, "expected an https URL ending in /.well-known/openid-configuration, without query or fragment");

const permissions = z
  .record(
    z.string().refine(isRoleName, "expected a role name: a lower-case label"),
    z.partialRecord(z.enum(RESOURCE_KINDS), z.array(z.enum(VERBS))),
  )
  .describe("role → resource kind → verbs");

const route = z.union([
  z.object({ methods: z.array(z.enum(ROUTE_METHODS)).min(1), path: z.string(), access: z.enum(["public", "authenticated"]) }).strict(),
  z.object({ methods: z.array(z.enum(ROUTE_METHODS)).min(1), path: z.string(), kind: z.enum(RESOURCE_KINDS), verb: z.enum(VERBS) }).strict(),
]);

const routes = z
  .array(route)
  .superRefine((specs, ctx) => {
    try {
      compileRoutes(specs as RouteSpec[]);
    } catch (err) {
      if (!(err instanceof RouteTableError)) throw err;
      ctx.addIssue({ code: "custom", message: err.message });
    }
  })
  .describe("endpoint → resource kind and verb; HEAD is read as GET");

export const konfidenceSchema = z
  .object({
    cluster: z
      .union([
        z.object({ clusterId: uuid.describe("an id from clusters[], or of a cluster the clusterRegistry registers") }).strict(),
        z
          .object({
            kubeconfig: z.string().min(1).optional().describe("kubeconfig file; in-cluster configuration when absent"),
            context: z.string().min(1).optional(),
          })
          .strict(),
      ])
      .default({})
      .describe("the one cluster whose Projects are watched"),
    providers: z
      .object({
        trust: z
          .enum(["allowList", "any-https"])
          .default("allowList")
          .describe("allowList: only the discovery URLs below; any-https: any https provider a Project names"),
        allowList: z.array(discoveryUrl).default([]),
        platformAudiences: z
          .array(z.string().min(1))
          .default([])
          .describe("audiences a workload token may carry besides those the Projects' jwks subjects name for its provider"),
        caFile: z.string().min(1).optional().describe("PEM bundle trusted for providers in addition to the system roots"),
        timeoutMs: deadlineMs().default(500).describe("per discovery, JWKS or UserInfo request"),
        maxResponseBytes: z.number().int().min(1024).default(262_144),
        discoveryTtlMs: periodMs().default(3_600_000),
        jwksCooldownMs: periodMs(0).default(30_000).describe("minimum time between refetches for unknown key ids"),
        jwksMaxAgeMs: periodMs().default(600_000).describe("keys, and tokens verified with them, are rechecked after this"),
        clockToleranceSeconds: z.number().int().min(0).max(300).default(5),
        verifiedCacheMaxEntries: z.number().int().positive().default(20_000),
        failureBackoffInitialMs: periodMs().default(1_000).describe("after a provider's discovery or JWKS fetch fails, no fetch to it for this long"),
        failureBackoffMaxMs: periodMs().default(30_000).describe("each further failure doubles the pause, up to this"),
      })
      .strict()
      .refine((p) => p.failureBackoffInitialMs <= p.failureBackoffMaxMs, {
        message: "failureBackoffInitialMs must not exceed failureBackoffMaxMs",
        path: ["failureBackoffMaxMs"],
      })
      .prefault({}),
    session: z
      .object({
        discoveryUrl: discoveryUrl.describe("the platform's single OIDC provider"),
        audience: z.string().min(1).describe("the platform's client id: session tokens must carry it"),
        cookie: z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, "expected a cookie name").optional(),
        cookieOrigins: z
          .array(origin)
          .default([])
          .describe(
            "browser origins (Konfidence's UI) whose requests may authenticate with the session cookie; without an Origin, only a request with Sec-Fetch-Site: same-origin does",
          ),
        header: z
          .string()
          .regex(/^[a-z0-9-]+$/, "expected a lower-case header name")
          .refine((h) => h !== "authorization" && h !== "cookie", "authorization and cookie are read already")
          .optional(),
        groupsClaim: z.string().min(1).default("groups"),
        userInfo: z.boolean().default(false).describe("read groups from UserInfo when the token has no groups claim"),
        userInfoTtlMs: periodMs().default(300_000),
      })
      .strict()
      .refine((s) => (s.cookie === undefined) !== (s.header === undefined), "expected exactly one of cookie or header")
      .optional()
      .describe("interactive users; without it only workload tokens are accepted"),
    permissions: permissions.default(DEFAULT_PERMISSIONS as z.input<typeof permissions>),
    routes: routes.default(DEFAULT_ROUTES as z.input<typeof routes>),
  })
  .strict();

export type KonfidenceConfig = z.infer<typeof konfidenceSchema>;

/**
 * A Project cluster named by id must be one portcullis has credentials for: in clusters[], or one
 * the cluster registry may register at run time (its Projects answer 503 until it is registered).
 */
export function checkKonfidenceSection(
  config: { konfidence?: KonfidenceConfig | undefined; clusters: ReadonlyArray<{ id: string }>; clusterRegistry?: unknown },
  ctx: z.RefinementCtx,
): void {
  const cluster = config.konfidence?.cluster;
  if (cluster === undefined || !("clusterId" in cluster) || config.clusterRegistry !== undefined) return;
  if (!config.clusters.some((c) => c.id === cluster.clusterId)) {
    ctx.addIssue({ code: "custom", path: ["konfidence", "cluster", "clusterId"], message: `${cluster.clusterId} is not in clusters[] (and no clusterRegistry could register it)` });
  }
}
