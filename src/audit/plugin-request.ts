/**
 * The mandatory audit line of FUN-17 §11: one JSON line per kube-api-proxy PluginToken request, on
 * every outcome. In-cluster audit shows the plugin ServiceAccount; this line restores the user.
 * It carries identifiers and request attributes only — never a token.
 */
import type { PluginTokenReplayAudit } from "./plugin-token-replay.ts";

export interface PluginRequestAudit {
  readonly audit: "plugin_request";
  readonly user: string;
  readonly cluster_id: string;
  readonly installation_id: string;
  readonly plugin_name: string;
  readonly plugin_version: string;
  /** The definition the user consented to at mint time (the token's claim). */
  readonly definition_hash: string;
  /** The definition whose Role capped the request: the index's pin at request time ("" if unknown). */
  readonly pinned_definition_hash: string;
  readonly verb: string;
  readonly api_group: string;
  readonly resource: string;
  readonly subresource: string;
  readonly namespace: string;
  readonly name: string;
  /** Set for non-resource requests (`/version`, `/openapi/…`), which have no resource. */
  readonly path: string;
  /** `allowed` or `denied:<reason>`. */
  readonly decision: string;
  readonly request_id: string;
  /**
   * Set when the request was allowed to open a stream that was bounded (issue 54): the watch's
   * timeoutSeconds set, or the seconds Envoy lets an exec, attach, port-forward, log or proxy stream live.
   */
  readonly stream_bound_seconds?: number;
  /** Set on lines written by the admin port's POST /explain (request_id then starts with `explain:`): not a real request. */
  readonly explain?: true;
}

export interface AuditSink {
  pluginRequest(line: PluginRequestAudit): void;
  /** FUN-17 §3: a PluginToken refused by a platform API (src/audit/plugin-token-replay.ts). */
  pluginTokenReplay(line: PluginTokenReplayAudit): void;
}
