/**
 * Plugin UI assets (FUN-17 §7): `/plugins/{name}/{version}/console/…` and `/plugins/sdk/{version}/…`,
 * public and unauthenticated. Only reads are allowed; the CSP and caching headers are Envoy's.
 */
import { allow, deny } from "../decision.ts";
import { hasDotSegment } from "../dot-segments.ts";
import type { Policy } from "../policy.ts";
import { traceVerdict } from "../trace.ts";
import { mutations, websocketBearerDropped } from "../../headers/mutations.ts";

const ASSET_PATH = /^\/plugins\/(?:sdk\/[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}|[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\/[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}\/console)\/[^]*$/;
const READ_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD"]);

export function pluginAssets(): Policy {
  return {
    name: "plugin-assets",
    bodyShape: "json",
    async decide(request) {
      if (!traceVerdict("asset-path", ASSET_PATH.test(request.path) && !hasDotSegment(request.path))) {
        return deny("not-found", "no such asset");
      }
      if (!traceVerdict("read-only", READ_METHODS.has(request.method))) return deny("method-not-allowed", "assets are read-only", { allow: "GET, HEAD" });
      // Assets need no credential, so none is passed on.
      const ws = websocketBearerDropped(request.headers);
      return allow(mutations(request.headers, { set: ws.set, remove: ["authorization", "cookie", ...ws.remove] }));
    },
  };
}
