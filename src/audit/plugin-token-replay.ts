/**
 * The security event of FUN-17 §3's escalation wall: a PluginToken presented to a platform API
 * (anywhere but kube-api-proxy and plugin-proxy) is exactly the cross-service replay the audience
 * binding exists to stop — a plugin trying, say, organization-api's CreateAPIKey for a long-lived
 * token. One JSON line per refusal, naming the installation and plugin the token was minted for;
 * identifiers only, never the token.
 */

export interface PluginTokenReplayAudit {
  readonly audit: "plugin_token_replay";
  /** The platform service the request was for (`platform.services[].name`). */
  readonly service: string;
  /** The request's path (a Connect RPC: `/<package>.<Service>/<Method>`). */
  readonly path: string;
  readonly http_method: string;
  /** Where the token was carried: `bearer` (Authorization, any spelling), `cookie` (fundament_auth, any Origin) or `websocket-protocol`. */
  readonly credential: string;
  readonly user: string;
  readonly cluster_id: string;
  readonly installation_id: string;
  readonly installation_name: string;
  readonly plugin_name: string;
  readonly plugin_version: string;
  readonly definition_hash: string;
  /** The browser page that sent it (`Origin`), when there was one. */
  readonly origin: string;
  readonly request_id: string;
  /** Set on lines written by the admin port's POST /explain: not a real request. */
  readonly explain?: true;
}
