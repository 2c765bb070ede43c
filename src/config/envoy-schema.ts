/**
 * The `envoy` section of the configuration: what only Envoy needs (public origins, upstream
 * addresses, listener and TLS files). `portcullis envoy-config` turns the whole configuration into
 * Envoy's, so routes, CORS and CSP origins and policies come from one file and cannot drift apart.
 */
import { z } from "zod";
import { routeCovers, type PlatformService } from "./platform-schema.ts";

const port = z.number().int().min(1).max(65535);
const host = z.string().regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?)$/, "expected a host name or IP address");
const filePath = z.string().regex(/^\//, "expected an absolute file path (as Envoy sees it)");
const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, "expected a lower-case UUID");

/** A browser origin: scheme, host and optional port, nothing else (no path, no trailing slash). */
export const origin = z
  .string()
  .regex(/^https?:\/\/[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?(:\d{1,5})?$/, "expected an origin like https://plugin-proxy.fundament.io (no path)");

/** Where Envoy sends a route's traffic: `http://host:port` or `https://host:port` (TLS verified against caFile). */
const upstream = z
  .object({
    url: z
      .string()
      .regex(/^https?:\/\/[^/:\s]+(:\d{1,5})?$/, "expected http(s)://host[:port] (no path)")
      .describe("scheme, host and port of the upstream"),
    caFile: filePath.optional().describe("CA bundle that signs the upstream's certificate (https only)"),
  })
  .strict()
  .refine((u) => u.caFile === undefined || u.url.startsWith("https:"), { message: "caFile is only used with an https url", path: ["caFile"] })
  .refine((u) => u.caFile !== undefined || !u.url.startsWith("https:"), { message: "an https upstream needs caFile", path: ["caFile"] });

/** Envoy's side of the Envoy → portcullis hop when portcullis's listeners speak TLS (listen.tls). */
const portcullisTls = z
  .object({
    caFile: filePath.describe("CA bundle that signs portcullis's listen.tls.certFile"),
    serverName: host
      .optional()
      .describe("SNI Envoy sends and the DNS name portcullis's certificate must carry; envoy.portcullis.host when absent"),
    clientCertificateChainFile: filePath.optional().describe("Envoy's client certificate (mTLS), signed by portcullis's listen.tls.clientCaFile"),
    clientPrivateKeyFile: filePath.optional().describe("the private key of clientCertificateChainFile"),
  })
  .strict()
  .refine((t) => (t.clientCertificateChainFile === undefined) === (t.clientPrivateKeyFile === undefined), {
    message: "set both clientCertificateChainFile and clientPrivateKeyFile, or neither",
    path: ["clientPrivateKeyFile"],
  });

export const envoySchema = z
  .object({
    listener: z
      .object({
        address: host.default("0.0.0.0"),
        port: port.default(8443),
        tls: z
          .object({
            certificateChainFile: filePath.describe("PEM certificate chain covering every public host"),
            privateKeyFile: filePath,
          })
          .strict()
          .optional()
          .describe("terminate TLS on the listener; plaintext when absent (TLS ends in front of Envoy)"),
      })
      .strict()
      .default({ address: "0.0.0.0", port: 8443 }),
    admin: z
      .object({ address: host.default("127.0.0.1"), port: port.default(9901) })
      .strict()
      .default({ address: "127.0.0.1", port: 9901 })
      .describe("Envoy's own admin interface; keep it on loopback"),
    portcullis: z
      .object({
        host: host
          .default("portcullis-grpc.fundament-system.svc.cluster.local")
          .describe("DNS name Envoy resolves to reach every portcullis replica (a headless Service); the port is listen.grpc's"),
        tls: portcullisTls
          .optional()
          .describe("how Envoy verifies portcullis's listen.tls certificate, and the client certificate it presents (mTLS); required exactly when listen.tls is set"),
      })
      .strict()
      .default({ host: "portcullis-grpc.fundament-system.svc.cluster.local" }),
    tracing: z
      .object({
        collector: z
          .object({ host: host.describe("an OpenTelemetry Collector's host name or address"), port: port.default(4317).describe("its OTLP/gRPC port") })
          .strict(),
        samplingPercent: z
          .number()
          .min(0)
          .max(100)
          .default(1)
          .describe("share of requests Envoy starts a trace for; portcullis follows Envoy's sampling decision"),
        serviceName: z.string().min(1).default("envoy").describe("the service.name Envoy's spans carry"),
      })
      .strict()
      .optional()
      .describe("Envoy's own OpenTelemetry tracing: a span per request and per ext_authz call, whose trace context portcullis continues (tracing.enabled)"),
    extAuthzTimeoutMs: z
      .number()
      .int()
      .positive()
      .max(120_000, "expected at most 120000 ms: a Check that waits longer has failed")
      .optional()
      .describe("Envoy's ext_authz deadline; must exceed check.timeoutMs (default check.timeoutMs + 200)"),
    origins: z
      .object({
        console: origin.describe("the Console; the only origin allowed to frame plugin UIs (CSP frame-ancestors)"),
        kubeApiProxy: origin.describe("kube-api-proxy's public origin"),
        pluginProxy: origin.describe("plugin-proxy's public origin; plugin iframes run here, so it is the CORS allowed origin"),
        konfidence: origin.optional().describe("the Konfidence API's public origin"),
      })
      .strict(),
    clusters: z
      .array(
        z
          .object({
            id: uuid.describe("a clusters[].id"),
            apiServer: z
              .string()
              .regex(/^https:\/\/[^/\s]+$/, "expected https://host[:port] of the cluster's API server")
              .describe("the Kubernetes API server kube-api-proxy forwards to"),
            caFile: filePath.describe("CA bundle of that API server"),
            serviceDomain: z
              .string()
              .regex(/^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/, "expected a DNS suffix like svc.cluster.local")
              .default("svc.cluster.local")
              .describe("DNS suffix under which Envoy resolves that cluster's Services: {service}.{namespace}.{serviceDomain}"),
          })
          .strict(),
      )
      .describe("one entry per clusters[] entry"),
    upstreams: z
      .object({
        assets: upstream.describe("serves /plugins/… (plugin UI bundles and the SDK)"),
        konfidence: upstream.optional().describe("the Konfidence API server"),
      })
      .strict(),
    platform: z
      .array(
        z
          .object({
            name: z.string().min(1).describe("a platform.services[].name"),
            origin: origin.describe("the service's public origin; services that share one share a virtual host (their routes may not overlap)"),
            upstream: upstream.describe("where Envoy sends the service's requests"),
          })
          .strict(),
      )
      .default([])
      .describe("one entry per platform.services[] entry: where Envoy exposes it and where it sends it"),
    plugins: z
      .object({
        runtimePort: port.default(8080).describe("port of every plugin runtime Service"),
        controllerPort: port.default(8080).describe("port of the plugin-controller Service"),
      })
      .strict()
      .default({ runtimePort: 8080, controllerPort: 8080 }),
  })
  .strict();

export type EnvoyConfig = z.infer<typeof envoySchema>;

/** Default ext_authz deadline: portcullis always answers first, with room for the network. */
export const EXT_AUTHZ_MARGIN_MS = 200;

/**
 * Cross-field rules between `envoy` and the rest of the file: every cluster portcullis serves has
 * exactly one Envoy route, the two Konfidence settings come together, Envoy waits longer than
 * portcullis decides, and the route table (src/config/route-table.ts) is unambiguous; request mode
 * needs the section, its table's source. The table is built from this section's type, so schema.ts
 * passes its check in as `routeProblems` (route-table.ts imports this file, not the reverse).
 */
export function checkEnvoySection(
  config: {
    envoy?: EnvoyConfig | undefined;
    clusters: ReadonlyArray<{ id: string }>;
    check: { timeoutMs: number; policyFrom: "contextExtensions" | "request" };
    platform: { services: readonly PlatformService[] };
    listen: { tls?: { requireClientCert: boolean } | undefined };
  },
  ctx: z.RefinementCtx,
  routeProblems: (source: { envoy: EnvoyConfig; platform: { services: readonly PlatformService[] } }) => ReadonlyArray<{ path: ReadonlyArray<string | number>; message: string }>,
): void {
  const envoy = config.envoy;
  if (envoy === undefined) {
    if (config.check.policyFrom === "request") {
      ctx.addIssue({ code: "custom", path: ["check", "policyFrom"], message: "request mode chooses policies from the route table built from the envoy section (origins, platform): add it" });
    }
    return;
  }
  checkPortcullisTls(envoy, config.listen.tls, ctx);
  const served = new Set(config.clusters.map((c) => c.id));
  const routed = new Set<string>();
  envoy.clusters.forEach((c, i) => {
    if (!served.has(c.id)) ctx.addIssue({ code: "custom", path: ["envoy", "clusters", i, "id"], message: `${c.id} is not in clusters[]` });
    if (routed.has(c.id)) ctx.addIssue({ code: "custom", path: ["envoy", "clusters", i, "id"], message: `${c.id} is listed twice` });
    routed.add(c.id);
  });
  for (const id of served) {
    if (!routed.has(id)) ctx.addIssue({ code: "custom", path: ["envoy", "clusters"], message: `cluster ${id} has no entry` });
  }
  if ((envoy.origins.konfidence === undefined) !== (envoy.upstreams.konfidence === undefined)) {
    ctx.addIssue({ code: "custom", path: ["envoy", "origins", "konfidence"], message: "set both envoy.origins.konfidence and envoy.upstreams.konfidence, or neither" });
  }
  // Overlaps between platform services are reported by checkPlatformEntries, in its own words.
  if (checkPlatformEntries(envoy, config.platform.services, ctx)) {
    for (const problem of routeProblems({ envoy, platform: config.platform })) {
      ctx.addIssue({ code: "custom", path: [...problem.path], message: problem.message });
    }
  }
  if (envoy.extAuthzTimeoutMs !== undefined && envoy.extAuthzTimeoutMs <= config.check.timeoutMs) {
    ctx.addIssue({
      code: "custom",
      path: ["envoy", "extAuthzTimeoutMs"],
      message: `must be greater than check.timeoutMs (${config.check.timeoutMs}), or Envoy gives up before portcullis answers`,
    });
  }
}

/** Envoy speaks TLS to portcullis exactly when portcullis listens with TLS, and brings a certificate when portcullis requires one. */
function checkPortcullisTls(envoy: EnvoyConfig, listenTls: { requireClientCert: boolean } | undefined, ctx: z.RefinementCtx): void {
  const tls = envoy.portcullis.tls;
  if (listenTls !== undefined && tls === undefined) {
    ctx.addIssue({ code: "custom", path: ["envoy", "portcullis", "tls"], message: "listen.tls is set: Envoy needs caFile to reach portcullis over TLS" });
  }
  if (listenTls === undefined && tls !== undefined) {
    ctx.addIssue({ code: "custom", path: ["envoy", "portcullis", "tls"], message: "portcullis listens in plaintext (no listen.tls): remove envoy.portcullis.tls or set listen.tls" });
  }
  if (listenTls?.requireClientCert === true && tls !== undefined && tls.clientCertificateChainFile === undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["envoy", "portcullis", "tls", "clientCertificateChainFile"],
      message: "listen.tls.requireClientCert is set: Envoy needs a client certificate",
    });
  }
}

/**
 * Every platform service has exactly one Envoy entry; its origin is not one of the other virtual
 * hosts; and services behind one origin serve disjoint routes (Envoy takes the first route that
 * matches, so an overlap would send one service's requests, and policy, to another). False when
 * it reported a problem.
 */
function checkPlatformEntries(envoy: EnvoyConfig, services: ReadonlyArray<{ name: string; routes: readonly string[] }>, ctx: z.RefinementCtx): boolean {
  let sound = true;
  const addIssue = (issue: { path: Array<string | number>; message: string }) => {
    sound = false;
    ctx.addIssue({ code: "custom", ...issue });
  };
  const byName = new Map(services.map((s) => [s.name, s]));
  const listed = new Set<string>();
  const taken = new Set([envoy.origins.kubeApiProxy, envoy.origins.pluginProxy, envoy.origins.konfidence].filter((o) => o !== undefined).map((o) => new URL(o).hostname));
  const routesByHost = new Map<string, Array<{ service: string; route: string }>>();
  envoy.platform.forEach((entry, i) => {
    const at = ["envoy", "platform", i];
    const service = byName.get(entry.name);
    if (service === undefined) addIssue({ path: [...at, "name"], message: `${entry.name} is not in platform.services[]` });
    if (listed.has(entry.name)) addIssue({ path: [...at, "name"], message: `${entry.name} is listed twice` });
    listed.add(entry.name);
    const host = new URL(entry.origin).hostname;
    if (taken.has(host)) addIssue({ path: [...at, "origin"], message: `${host} is already kube-api-proxy's, plugin-proxy's or Konfidence's` });
    const routes = routesByHost.get(host) ?? [];
    for (const route of service?.routes ?? []) {
      const clash = routes.find((r) => r.service !== entry.name && (r.route === route || routeCovers(r.route, route) || routeCovers(route, r.route)));
      if (clash !== undefined) addIssue({ path: [...at, "origin"], message: `${entry.name}'s route ${route} overlaps ${clash.service}'s ${clash.route} on ${host}` });
      routes.push({ service: entry.name, route });
    }
    routesByHost.set(host, routes);
  });
  for (const s of services) {
    if (!listed.has(s.name)) addIssue({ path: ["envoy", "platform"], message: `platform service ${s.name} has no entry` });
  }
  return sound;
}
