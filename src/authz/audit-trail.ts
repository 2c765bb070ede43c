/**
 * One request's audit trail: what its policy learnt that an audit line reports, filled as the gates
 * run. The line is not written by the policy: check() turns the trail into the request's audit
 * record once the decision is final — a thrown error mapped to its denial, the deadline passed — and
 * writes it once, to the sink chosen for that request (POST /explain's marks its lines). So a gate
 * that returns early, throws or outlives the deadline can neither skip the line nor write a second.
 */
import type { Decision } from "./decision.ts";
import type { RequestInfo } from "../kube-reading/request-info.ts";
import type { PluginClaims } from "../tokens/fundament.ts";
import type { PluginRequestAudit } from "../audit/plugin-request.ts";
import type { PluginTokenReplayAudit } from "../audit/plugin-token-replay.ts";
import type { AuditRecord } from "../audit/record.ts";

export interface AuditTrail {
  /** kube-api-proxy: the PluginToken the request carries, in any carrier. Set, the request is audited on every outcome. */
  pluginToken: PluginClaims | undefined;
  /** What was asked, as Node reads it; undefined when the path is not a Kubernetes API path. */
  asked: RequestInfo | undefined;
  /** The index's pin for the token's installation at request time ("" when unknown). */
  pinnedDefinitionHash: string;
  /** platform-api: a PluginToken replay it refused (FUN-17 §3); the line is complete when recorded. */
  replay: PluginTokenReplayAudit | undefined;
}

export function emptyAuditTrail(): AuditTrail {
  return { pluginToken: undefined, asked: undefined, pinnedDefinitionHash: "", replay: undefined };
}

/** The request's audit record for `decision`, from the trail; undefined when the request is not audited. Pure. */
export function auditRecordOf(trail: AuditTrail, decision: Decision, requestId: string): AuditRecord | undefined {
  if (trail.replay !== undefined) return trail.replay;
  const claims = trail.pluginToken;
  if (claims === undefined) return undefined;
  const info = trail.asked;
  const resource = info?.isResourceRequest ? info : undefined;
  const record: PluginRequestAudit = {
    audit: "plugin_request",
    user: claims.sub,
    cluster_id: claims.clusterId,
    installation_id: claims.installationId,
    plugin_name: claims.pluginName,
    plugin_version: claims.pluginVersion,
    definition_hash: claims.definitionHash,
    pinned_definition_hash: trail.pinnedDefinitionHash,
    verb: info?.verb ?? "",
    api_group: resource?.apiGroup ?? "",
    resource: resource?.resource ?? "",
    subresource: resource?.subresource ?? "",
    namespace: resource?.namespace ?? "",
    name: resource?.name ?? "",
    path: info !== undefined && !info.isResourceRequest ? info.path : "",
    decision: decisionLabel(decision),
    request_id: requestId,
  };
  return decision.kind === "allow" && decision.bound !== undefined ? { ...record, stream_bound_seconds: decision.bound.seconds } : record;
}

function decisionLabel(decision: Decision): string {
  return decision.kind === "allow" ? "allowed" : `denied:${decision.reason}`;
}
