/** An audit record, whichever line it is, and the one place it is handed to the sink. */
import type { AuditSink, PluginRequestAudit } from "./plugin-request.ts";
import type { PluginTokenReplayAudit } from "./plugin-token-replay.ts";

export type AuditRecord = PluginRequestAudit | PluginTokenReplayAudit;

export function writeAudit(sink: AuditSink, record: AuditRecord): void {
  if (record.audit === "plugin_request") sink.pluginRequest(record);
  else sink.pluginTokenReplay(record);
}
