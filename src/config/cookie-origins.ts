/**
 * A session cookie counts only from the origins its `cookieOrigins` lists (src/tokens/credentials.ts).
 * None of them may be an origin that serves plugin code, or every plugin page would act with the
 * user's whole session instead of user ∩ plugin (FUN-17 §7: cookies never cross to plugin origins).
 * Where the file knows the public origins (the `envoy` section), the Envoy virtual hosts that serve
 * plugin code are refused as cookie origins:
 *  - plugin-proxy's: plugin UI bundles (/plugins/…) and plugin runtimes (/installations/…);
 *  - kube-api-proxy's: its proxy subresources relay whatever a pod or Service serves, a plugin's
 *    runtime among them.
 * Envoy picks a virtual host by the host name alone (strip_any_host_port), so that host serves the
 * same on every port and scheme that reaches Envoy: origins are compared by host name, lower-cased,
 * without a trailing dot.
 */
import type { z } from "zod";

/** The host name of an origin or URL as a browser and Envoy match it; undefined when unreadable (reported by the field's own check). */
function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).hostname.toLowerCase().replace(/\.$/, "");
  } catch {
    return undefined;
  }
}

interface Origins {
  readonly kubeApiProxy: string;
  readonly pluginProxy: string;
}

/** Refuses, naming the field, a cookie origin on a host that serves plugin code. */
export function checkCookieOrigins(
  config: {
    envoy?: { origins: Origins } | undefined;
    tokens?: { cookieOrigins: readonly string[] } | undefined;
    konfidence?: { session?: { cookieOrigins: readonly string[] } | undefined } | undefined;
  },
  ctx: z.RefinementCtx,
): void {
  const origins = config.envoy?.origins;
  if (origins === undefined) return;
  const servingPlugins = new Map<string, string>();
  for (const [origin, serves] of [
    [origins.pluginProxy, "plugin-proxy's (envoy.origins.pluginProxy), which serves plugin pages"],
    [origins.kubeApiProxy, "kube-api-proxy's (envoy.origins.kubeApiProxy), which relays pages of pods and Services, plugins' among them"],
  ] as const) {
    const host = originHost(origin);
    if (host !== undefined) servingPlugins.set(host, serves);
  }
  const check = (list: readonly string[] | undefined, path: readonly string[]) =>
    list?.forEach((origin, i) => {
      const host = originHost(origin);
      const serves = host === undefined ? undefined : servingPlugins.get(host);
      if (serves === undefined) return;
      ctx.addIssue({
        code: "custom",
        path: [...path, i],
        message: `${origin} is on the host ${serves}: every page there would act with the user's session cookie`,
      });
    });
  check(config.tokens?.cookieOrigins, ["tokens", "cookieOrigins"]);
  check(config.konfidence?.session?.cookieOrigins, ["konfidence", "session", "cookieOrigins"]);
}
