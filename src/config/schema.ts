/**
 * The configuration file, validated once at start. Unknown keys are errors (a typo must not
 * silently fall back to a default); every field says what it expects.
 */
import { z } from "zod";
import { checkCookieOrigins } from "./cookie-origins.ts";
import { checkEnvoySection, envoySchema } from "./envoy-schema.ts";
import { buildRouteTable, routeTableProblems } from "./route-table.ts";
import { checkKonfidenceSection, konfidenceSchema } from "./konfidence-schema.ts";
import { platformSchema } from "./platform-schema.ts";
import { deadlineMs, graceMs, periodMs, wholeSeconds } from "./durations.ts";

/** `streams.pluginWatchMaxSeconds`'s default: a revocation reaches an open PluginToken watch within a minute (issue 54). */
export const DEFAULT_PLUGIN_WATCH_MAX_SECONDS = 60;
/** kube-apiserver's default --min-request-timeout: a watch asked without a timeout lasts at least this; a bound past it would lengthen one. */
const KUBE_SHORTEST_DEFAULT_WATCH_SECONDS = 1800;

const address = z
  .string()
  .regex(/^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$/, { message: "expected host:port, e.g. 0.0.0.0:9001", abort: true })
  .refine((a) => {
    const port = Number(a.slice(a.lastIndexOf(":") + 1));
    return port >= 1 && port <= 65535;
  }, "expected a port from 1 to 65535");
const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, "expected a lower-case UUID");
/** What @openfga/sdk accepts as a store or model id (a ULID); anything else fails every call. */
const ulid = (what: string) => z.string().regex(/^[0-7][0-9A-HJKMNP-TV-Z]{25}$/, `expected ${what}: a ULID, 26 characters of Crockford base32 (e.g. 01HVMMBCMGZNT3SED4Z17ECXCA)`);
/** http or https only: z.url() alone admits any scheme (file:, javascript:, …). */
const httpUrl = z.url({ protocol: /^https?$/, error: "expected an http:// or https:// URL" });
const dnsLabel = z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "expected a DNS label");

/** A secret is never written in the file itself: it comes from an environment variable or a file. */
const secretSource = z
  .object({
    env: z.string().min(1).optional().describe("name of an environment variable holding the secret"),
    file: z.string().min(1).optional().describe("path of a file holding the secret (trailing newline ignored)"),
  })
  .strict()
  .refine((s) => (s.env === undefined) !== (s.file === undefined), "expected exactly one of env or file");

/** Files portcullis reads for its gRPC listeners; re-read every reloadIntervalMs (rotation without restart). */
const listenTls = z
  .object({
    certFile: z.string().min(1).describe("PEM certificate chain of the grpc and internal listeners"),
    keyFile: z.string().min(1).describe("PEM private key of certFile"),
    clientCaFile: z.string().min(1).optional().describe("PEM CA bundle that signs client certificates (Envoy's, authn-api's); client certificates are requested when set"),
    requireClientCert: z.boolean().default(false).describe("mTLS: refuse a handshake without a client certificate signed by clientCaFile"),
    reloadIntervalMs: periodMs(100).default(60_000).describe("how often the three files are re-read; new handshakes use the new certificate"),
  })
  .strict()
  .refine((t) => !t.requireClientCert || t.clientCaFile !== undefined, { message: "requireClientCert needs clientCaFile", path: ["requireClientCert"] });

/** The CA bundle of Envoy's image (Debian/Ubuntu's path): clusterRegistry.envoyCaFile's default. */
export const ENVOY_IMAGE_CA_FILE = "/etc/ssl/certs/ca-certificates.crt";

export const configSchema = z
  .object({
    listen: z
      .object({
        grpc: address.default("0.0.0.0:9001").describe("ext_authz Check and grpc.health.v1"),
        admin: address.default("0.0.0.0:9090").describe("/healthz, /readyz, /metrics"),
        internal: address.default("0.0.0.0:9002").describe("PluginInstallationService, for authn-api only"),
        tls: listenTls.optional().describe("TLS (mTLS with clientCaFile) on the grpc and internal listeners; plaintext h2c when absent"),
      })
      .strict()
      .default({ grpc: "0.0.0.0:9001", admin: "0.0.0.0:9090", internal: "0.0.0.0:9002" }),
    workers: z.number().int().min(1).max(64).default(1).describe("processes sharing the gRPC port"),
    logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
    check: z
      .object({
        timeoutMs: deadlineMs().default(800).describe("whole-decision deadline; keep below Envoy's ext_authz timeout"),
        retryAfterSeconds: z.number().int().min(0).max(3600).default(1),
        policyFrom: z
          .enum(["contextExtensions", "request"])
          .default("contextExtensions")
          .describe(
            "where a Check's policy comes from: contextExtensions (the front proxy names it per route, as the generated Envoy does), or request (the route table built from the envoy section chooses it from the request's authority and path, for gateways that do not name it: Istio's CUSTOM provider, Envoy Gateway's SecurityPolicies on the platform's own routes; context_extensions still win where present, and portcullis also answers CORS preflights)",
          ),
      })
      .strict()
      .default({ timeoutMs: 800, retryAfterSeconds: 1, policyFrom: "contextExtensions" }),
    shutdown: z
      .object({
        drainMs: graceMs()
          .default(5_000)
          .describe("after SIGTERM, keep answering Checks this long while health is NOT_SERVING (Envoy's health check moves traffic away), then stop accepting"),
      })
      .strict()
      .default({ drainMs: 5_000 }),
    watchdog: z
      .object({
        enabled: z.boolean().default(true).describe("a child process (bash) ends the process when the event loop stops answering"),
        timeoutMs: graceMs(500).default(5_000).describe("how long the event loop may go without answering before the process is killed"),
      })
      .strict()
      .default({ enabled: true, timeoutMs: 5_000 }),
    idleGc: z
      .object({
        enabled: z.boolean().default(true).describe("when no Check has arrived for quietMs and the V8 heap has grown, one memory-reducing GC gives its unused pages back (needs Node's --expose-gc, which the shipped flags include)"),
        quietMs: periodMs(1_000).default(30_000).describe("how long no Check may arrive before the heap is given back; the GC stops the event loop for up to a few hundred ms"),
      })
      .strict()
      .default({ enabled: true, quietMs: 30_000 }),
    admin: z
      .object({
        explain: z
          .boolean()
          .default(false)
          .describe("serve POST /explain and POST /can-i on the admin port, to loopback peers only: they run real checks, TokenRequests and rules reviews, and /explain writes (marked) audit lines"),
      })
      .strict()
      .default({ explain: false }),
    tokens: z
      .object({
        mode: z
          .enum(["hs256", "migration", "asymmetric"])
          .default("hs256")
          .describe("which signatures are accepted: hs256 (the shared secret), migration (both, counted per algorithm), asymmetric (authn-api's JWKS only; HS256 refused)"),
        secrets: z.array(secretSource).min(1).optional().describe("HS256 secrets; any verifies (rotation). Required in modes hs256 and migration, refused in asymmetric"),
        jwks: z
          .object({
            url: z.url({ protocol: /^https$/, error: "expected an https:// URL" }).describe("authn-api's JWKS (its public keys), e.g. https://authn-api/.well-known/jwks.json"),
            algorithms: z
              .array(z.enum(["EdDSA", "ES256", "RS256"]))
              .min(1)
              .default(["EdDSA", "ES256", "RS256"])
              .describe("the asymmetric algorithms accepted; a token naming another is refused"),
            cacheMaxAgeMs: periodMs(1_000).default(600_000).describe("the key set is refetched once older than this; a key removed from the JWKS stops verifying within it"),
            cooldownMs: periodMs(100).default(30_000).describe("an unknown kid refetches the key set at most once per this (a new key is seen on first use)"),
            timeoutMs: deadlineMs().default(2_000).describe("deadline of one JWKS fetch; a failed or timed-out fetch is a 503"),
            caFile: z.string().min(1).optional().describe("PEM bundle trusted for the JWKS URL in addition to the system roots"),
          })
          .strict()
          .optional()
          .describe("authn-api's public keys (FUN-17 §9); required in modes migration and asymmetric, refused in hs256"),
        issuer: z.string().min(1).default("fundament-authn-api"),
        clockToleranceSeconds: z.number().int().min(0).max(300).default(5),
        maxLifetimeSeconds: z
          .object({
            user: wholeSeconds(60, 2_592_000)
              .default(86_400)
              .describe("longest exp - iat of a UserToken; authn-api's TOKEN_EXPIRY (24 h unless set)"),
            plugin: wholeSeconds(60, 86_400)
              .default(900)
              .describe("longest exp - iat of a PluginToken; FUN-17 §3: 15 minutes, no refresh (§10's revocation bound rests on it)"),
          })
          .strict()
          .default({ user: 86_400, plugin: 900 })
          .describe("a token whose exp - iat exceeds its type's bound plus clockToleranceSeconds is refused (invalid-token); iat is required"),
        cacheMaxEntries: z.number().int().positive().default(20_000),
        cookieOrigins: z
          .array(httpUrl)
          .default([])
          .describe(
            "browser origins (e.g. the Console) whose requests may authenticate with the fundament_auth cookie; a request with any other Origin is not authenticated by its cookie",
          ),
      })
      .strict()
      .superRefine((t, ctx) => {
        // Each mode takes exactly the key material it verifies with: a secret configured in
        // asymmetric mode would still be a forge path, a JWKS in hs256 mode would be unused.
        if ((t.mode !== "asymmetric") !== (t.secrets !== undefined)) {
          ctx.addIssue({ code: "custom", path: ["secrets"], message: t.mode === "asymmetric" ? "mode asymmetric takes no secrets" : `mode ${t.mode} needs secrets` });
        }
        if ((t.mode !== "hs256") !== (t.jwks !== undefined)) {
          ctx.addIssue({ code: "custom", path: ["jwks"], message: t.mode === "hs256" ? "mode hs256 takes no jwks" : `mode ${t.mode} needs jwks` });
        }
      })
      .optional()
      .describe("Fundament tokens (FUN-17); with openfga, or neither in a Konfidence-only deployment"),
    openfga: z
      .object({
        apiUrl: httpUrl.describe("OpenFGA HTTP API, e.g. http://openfga:8080"),
        storeId: ulid("an OpenFGA store id").optional().describe("the store's id (a ULID); exactly one of storeId and storeName"),
        storeName: z
          .string()
          .regex(/^[a-zA-Z0-9\s./^_&@-]{3,64}$/, "expected an OpenFGA store name (3–64 letters, digits, spaces, . - / ^ _ & @)")
          .optional()
          .describe("the store's name, looked up at start and again when its id stops answering (a re-created store); exactly one of storeId and storeName"),
        authorizationModelId: ulid("an OpenFGA authorization model id").optional().describe("pin a model of the store named by storeId; the store's latest when absent"),
        apiToken: secretSource.optional(),
        timeoutMs: deadlineMs().default(300),
        allowTtlMs: periodMs()
          .default(5_000)
          .describe("how long an allowed can_view answer is served while the store's changes are not followed (ReadChanges failing or not caught up)"),
        denyTtlMs: periodMs().default(2_000).describe("the same for a denied answer"),
        safetyNetTtlMs: periodMs()
          .default(60_000)
          .describe("the longest an answer is kept while ReadChanges is followed and caught up: a tuple change drops it at once, this bounds what the changes might miss"),
        changesPollMs: periodMs(50)
          .default(250)
          .describe("how often the store's ReadChanges is read for tuple changes; a read that fails or is late puts the answers back on allowTtlMs/denyTtlMs"),
        cacheMaxEntries: z.number().int().positive().default(50_000),
      })
      .strict()
      .refine((o) => (o.storeId === undefined) !== (o.storeName === undefined), "expected exactly one of storeId or storeName")
      // A model id belongs to one store; a store re-created under its name has new model ids.
      .refine((o) => o.storeName === undefined || o.authorizationModelId === undefined, "authorizationModelId needs storeId, not storeName")
      .optional()
      .describe("the can_view gate (FUN-17); with tokens, or neither in a Konfidence-only deployment"),
    clusters: z
      .array(
        z
          .object({
            id: uuid,
            kubeconfig: z.string().min(1).optional().describe("kubeconfig file; in-cluster configuration when absent"),
            context: z.string().min(1).optional(),
          })
          .strict(),
      )
      .default([])
      .refine((cs) => new Set(cs.map((c) => c.id)).size === cs.length, "cluster ids must be unique"),
    clusterRegistry: z
      .object({
        namespace: dnsLabel.describe("namespace of the management cluster holding the cluster Secrets (label portcullis.fundament.io/secret-type: cluster)"),
        kubeconfig: z.string().min(1).optional().describe("kubeconfig of the management cluster; in-cluster configuration (portcullis's own cluster) when absent"),
        context: z.string().min(1).optional(),
        envoyCaFile: z
          .string()
          .regex(/^\//, "expected an absolute file path (as Envoy sees it)")
          .default(ENVOY_IMAGE_CA_FILE)
          .describe("CA bundle, as Envoy sees it, that Envoy verifies a registered cluster's API server with when its Secret has no ca.crt (served by CDS); the default is the bundle of Envoy's image"),
      })
      .strict()
      .optional()
      .describe("the live cluster registry: clusters added, changed and removed while portcullis runs, one labelled Secret each; combined with clusters[], whose ids it may not take"),
    kube: z
      .object({
        sar: z
          .object({
            timeoutMs: deadlineMs().default(300),
            allowTtlMs: periodMs()
              .default(5_000)
              .describe("how long an allowed review is served while the cluster's RBAC watches are not synced or not caught up"),
            denyTtlMs: periodMs().default(2_000).describe("the same for a denied review"),
            safetyNetTtlMs: periodMs()
              .default(60_000)
              .describe("the longest a review is kept while the cluster's RBAC watches are synced and caught up: a Role, RoleBinding, ClusterRole or ClusterRoleBinding change drops the reviews it can affect at once, this bounds what RBAC events cannot show (a missed event); only answers the RBAC authorizer decided are kept past the short TTLs (another authorizer's keep allowTtlMs/denyTtlMs)"),
            extendRbacAllows: z
              .boolean()
              .default(true)
              .describe("whether an allow the RBAC authorizer decided is kept up to safetyNetTtlMs; set false when an authorizer that can deny sits ahead of RBAC (--authorization-mode=Webhook,RBAC): a webhook that let a request through to RBAC and later denies it is seen by no RBAC event, so RBAC's allows keep allowTtlMs (its denials no authorizer explains are still kept)"),
            cacheMaxEntries: z.number().int().positive().default(50_000),
          })
          .strict()
          .default({ timeoutMs: 300, allowTtlMs: 5_000, denyTtlMs: 2_000, safetyNetTtlMs: 60_000, extendRbacAllows: true, cacheMaxEntries: 50_000 }),
        tokenRequest: z
          .object({
            expirationSeconds: z.number().int().min(600).default(3600),
            audiences: z.array(z.string().min(1)).default([]),
            timeoutMs: deadlineMs().default(500),
            cacheMaxEntries: z.number().int().positive().default(20_000),
          })
          .strict()
          .default({ expirationSeconds: 3600, audiences: [], timeoutMs: 500, cacheMaxEntries: 20_000 }),
        watch: z
          .object({
            // Above kube-apiserver's bookmark interval (~1 min), so a quiet healthy watch is never cut.
            inactivityMs: periodMs(60_000)
              .default(90_000)
              .describe("a PluginInstallation, Project, Revocation or cluster-registry watch that hears no event, bookmark or list for this long is unsynced (its checks answer 503; the registry keeps its clusters) and listed again"),
            // A healthy source is proven every ~3 s, a bookmark up to ~2 s into each cycle (change-feed-watch.ts).
            freshnessBoundMs: periodMs(6_000)
              .default(10_000)
              .describe("the Revocation list and each cluster's PluginInstallation index not proven fresh (every change applied) within this long: the PluginToken requests that depend on it answer 503 dependency-unavailable"),
          })
          .strict()
          .default({ inactivityMs: 90_000, freshnessBoundMs: 10_000 }),
      })
      .strict()
      .default({
        sar: { timeoutMs: 300, allowTtlMs: 5_000, denyTtlMs: 2_000, safetyNetTtlMs: 60_000, extendRbacAllows: true, cacheMaxEntries: 50_000 },
        tokenRequest: { expirationSeconds: 3600, audiences: [], timeoutMs: 500, cacheMaxEntries: 20_000 },
        watch: { inactivityMs: 90_000, freshnessBoundMs: 10_000 },
      }),
    plugins: z
      .object({
        allowUnpinned: z
          .boolean()
          .default(false)
          .describe("FUN-19 local-dev escape hatch: accept installations without a pinned definition hash. Never in production."),
        controller: z
          .object({ namespace: dnsLabel.default("fundament-system"), service: dnsLabel.default("plugin-controller") })
          .strict()
          .default({ namespace: "fundament-system", service: "plugin-controller" }),
      })
      .strict()
      .default({ allowUnpinned: false, controller: { namespace: "fundament-system", service: "plugin-controller" } }),
    streams: z
      .object({
        pluginWatchMaxSeconds: z
          .number()
          .int()
          .min(1)
          .max(KUBE_SHORTEST_DEFAULT_WATCH_SECONDS)
          .default(DEFAULT_PLUGIN_WATCH_MAX_SECONDS)
          .describe(
            "a PluginToken watch ends within this many seconds (its timeoutSeconds is set to this, the token's remaining lifetime or what it asked, whichever is least); a revocation or a lost right reaches an open watch within it. At most 1800, kube-apiserver's shortest default watch",
          ),
      })
      .strict()
      .default({ pluginWatchMaxSeconds: DEFAULT_PLUGIN_WATCH_MAX_SECONDS })
      .describe("how long streams opened through kube-api-proxy may live (issue 54); a stream never outlives its token"),
    revocations: z
      .object({
        kubeconfig: z.string().min(1).optional().describe("kubeconfig of the cluster holding the Revocation objects; in-cluster configuration (portcullis's own cluster) when absent"),
        context: z.string().min(1).optional(),
      })
      .strict()
      .optional()
      .describe(
        "the sub-TTL deny-list (FUN-17 §10): Revocation objects (portcullis.fundament.io/v1alpha1) watched on one cluster; PluginToken requests answer 503 while the watch is not synced. No deny-list when absent",
      ),
    tracing: z
      .object({
        enabled: z.boolean().default(false).describe("OpenTelemetry spans: one per Check, continuing Envoy's W3C traceparent, and one per dependency call under it"),
        sampleRatio: z
          .number()
          .min(0)
          .max(1)
          .default(1)
          .describe("share of Checks traced when Envoy sent no sampling decision; a traceparent's sampled flag is always followed"),
        serviceName: z.string().min(1).default("portcullis").describe("the service.name resource attribute"),
        otlp: z
          .object({
            endpoint: httpUrl.default("http://127.0.0.1:4318/v1/traces").describe("OTLP/HTTP (JSON) traces endpoint of a collector"),
            timeoutMs: deadlineMs().default(10_000).describe("deadline of one export"),
          })
          .strict()
          .default({ endpoint: "http://127.0.0.1:4318/v1/traces", timeoutMs: 10_000 }),
      })
      .strict()
      .default({ enabled: false, sampleRatio: 1, serviceName: "portcullis", otlp: { endpoint: "http://127.0.0.1:4318/v1/traces", timeoutMs: 10_000 } }),
    envoy: envoySchema
      .optional()
      .describe("what the front proxy needs; read by `portcullis envoy-config`, and by the server for its route table when check.policyFrom is request"),
    konfidence: konfidenceSchema.optional().describe("the konfidence-api policy (ADR-0028); not registered when absent"),
    platform: platformSchema
      .default({ services: [] })
      .describe("the platform's user-facing services, for the platform-api and public policies (FUN-17 §3, FUN-19 §5)"),
  })
  .strict()
  .superRefine(checkFundamentSections)
  .superRefine((config, ctx) => checkEnvoySection(config, ctx, (source) => routeTableProblems(buildRouteTable(source))))
  .superRefine(checkCookieOrigins)
  .superRefine(checkKonfidenceSection);

/**
 * The Fundament policies (kube-api-proxy, plugin-proxy, platform-api) need tokens and openfga
 * together; a deployment without them serves Konfidence only, and must then configure it.
 */
function checkFundamentSections(
  config: { tokens?: unknown; openfga?: unknown; konfidence?: unknown; platform: { services: readonly unknown[] } },
  ctx: z.RefinementCtx,
): void {
  if (config.tokens === undefined && config.openfga !== undefined) {
    ctx.addIssue({ code: "custom", path: ["tokens"], message: "expected a tokens section: openfga serves the Fundament policies, which verify Fundament tokens" });
  }
  if (config.openfga === undefined && config.tokens !== undefined) {
    ctx.addIssue({ code: "custom", path: ["openfga"], message: "expected an openfga section: the Fundament policies ask its can_view" });
  }
  if (config.tokens === undefined && config.openfga === undefined) {
    if (config.konfidence === undefined) {
      ctx.addIssue({ code: "custom", path: ["tokens"], message: "expected tokens and openfga (Fundament), or a konfidence section, or both" });
    }
    if (config.platform.services.length > 0) {
      ctx.addIssue({ code: "custom", path: ["platform", "services"], message: "platform services need tokens and openfga: their routes accept Fundament UserTokens only" });
    }
  }
}

export type Config = z.infer<typeof configSchema>;
export type SecretSource = z.infer<typeof secretSource>;
