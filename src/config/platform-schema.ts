/**
 * The `platform` section: the platform's user-facing services behind the platform-api and public
 * policies (FUN-17 §3's escalation wall, FUN-19 §5's public definition fetch). A platform team lists
 * each service's routes (path prefixes: a Connect package `/<package>.`, a Connect service
 * `/<package>.<Service>/`, or a plain path) and the exact paths that carry no token by design.
 * Everything under a service's routes that is not listed public needs a UserToken.
 */
import { z } from "zod";

/**
 * Absolute path segments of unreserved characters, no empty or dot-only segment, no query or
 * escape: what Envoy's path matching and normalisation leave intact.
 */
const PATH = /^(?:\/(?!\.+(?:\/|$))[A-Za-z0-9._~-]+)+$/;

const routePrefix = z
  .string()
  .refine((p) => PATH.test(p.endsWith("/") ? p.slice(0, -1) : p), "expected a path prefix like /organization.v1. , /authn.v1.TokenService/ or /login")
  .describe(
    "a path prefix this service serves: ending in `.` or `/` it matches every path that starts with it (`/dcim.v1.` is every Connect service of package dcim.v1); otherwise that path and the paths under it (`/login`, `/login/…`)",
  );

const exactPath = z
  .string()
  .regex(PATH, "expected an exact path like /organization.v1.PluginService/GetPluginDefinition")
  .describe("an exact path (query string aside), e.g. a Connect RPC `/<package>.<Service>/<Method>`");

/** Whether `path` lies under the route `prefix`, as the generated Envoy route matches it. Pure. */
export function routeCovers(prefix: string, path: string): boolean {
  if (prefix.endsWith("/") || prefix.endsWith(".")) return path.startsWith(prefix) && path.length > prefix.length;
  return path === prefix || path.startsWith(`${prefix}/`);
}

/** authn-api's TokenService.MintPluginToken (FUN-17 §11), under whatever Connect package it is served. */
function isMintPluginToken(path: string): boolean {
  return /\.TokenService\/MintPluginToken$/.test(path);
}

const service = z
  .object({
    name: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "expected a DNS label, e.g. organization-api")
      .describe("the service's name: named by Envoy's routes (context_extensions.service), in metrics and logs"),
    routes: z.array(routePrefix).min(1).describe("path prefixes this service serves; a request under them needs a UserToken unless its path is listed in `public`"),
    public: z
      .array(exactPath)
      .default([])
      .describe("exact paths that carry no token by design (FUN-19 §5 GetPluginDefinition, API-key exchange, login); each must lie under one of `routes`"),
  })
  .strict()
  .superRefine((s, ctx) => {
    s.public.forEach((path, i) => {
      // A malformed path has its own message already.
      if (PATH.test(path) && !s.routes.some((r) => routeCovers(r, path))) {
        ctx.addIssue({ code: "custom", path: ["public", i], message: `${path} is not under any of this service's routes` });
      }
    });
    s.public.forEach((path, i) => {
      // FUN-17 §3's hard wall: MintPluginToken accepts only a UserToken, so it can never be public
      // (public reads no token: a PluginToken would reach it and could mint another).
      if (isMintPluginToken(path)) ctx.addIssue({ code: "custom", path: ["public", i], message: `${path} mints PluginTokens and needs a UserToken: it cannot be public` });
    });
    if (new Set(s.public).size !== s.public.length) ctx.addIssue({ code: "custom", path: ["public"], message: "a path is listed twice" });
  });

export const platformSchema = z
  .object({
    services: z.array(service).default([]).describe("the platform's user-facing services (authn-api, organization-api, dcim-api, …)"),
  })
  .strict()
  .superRefine((p, ctx) => {
    const seen = new Set<string>();
    p.services.forEach((s, i) => {
      if (seen.has(s.name)) ctx.addIssue({ code: "custom", path: ["services", i, "name"], message: `${s.name} is listed twice` });
      seen.add(s.name);
    });
  });

export type PlatformConfig = z.infer<typeof platformSchema>;
export type PlatformService = PlatformConfig["services"][number];
