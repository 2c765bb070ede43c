/**
 * `portcullis can-i`: what a plugin can do for a user (issue 17 §3), asked of a running portcullis's
 * admin port (`POST /can-i`, served with `admin.explain` to loopback peers), which reads each
 * ServiceAccount's rules from the cluster and intersects them.
 *   can-i --list …            the table of user ∩ plugin
 *   can-i VERB RESOURCE[/NAME] [-n NS] …   yes or no, and the gate that decides it
 */
import { parseArgs } from "node:util";
import type { CanIAnswer, CanIList } from "../server/can-i.ts";

export class UsageError extends Error {}

export interface CanIIo {
  out(text: string): void;
}

const OPTIONS = {
  admin: { type: "string" },
  list: { type: "boolean", default: false },
  user: { type: "string" },
  installation: { type: "string" },
  cluster: { type: "string" },
  namespace: { type: "string", short: "n" },
  subresource: { type: "string" },
  json: { type: "boolean", default: false },
} as const;

/** A kubectl-style resource argument: `secrets`, `secrets/x`, `certificates.cert-manager.io/web`, or a URL path. Pure. */
export function requestOf(verb: string, target: string, subresource: string): Record<string, string> {
  if (target.startsWith("/")) return { verb, path: target };
  const slash = target.indexOf("/");
  const typed = slash === -1 ? target : target.slice(0, slash);
  const name = slash === -1 ? "" : target.slice(slash + 1);
  const dot = typed.indexOf(".");
  const resource = dot === -1 ? typed : typed.slice(0, dot);
  const group = dot === -1 ? "" : typed.slice(dot + 1);
  if (resource === "" || name.includes("/")) throw new UsageError(`cannot read ${target}: expected RESOURCE[.GROUP][/NAME] or /PATH`);
  return { verb, group, resource, subresource, name };
}

/** Exit status: 0 listed, or yes; 1 no (or unknown: an incomplete rules review refused it). */
export async function runCanI(args: string[], io: CanIIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, options: OPTIONS, allowPositionals: true, strict: true });
  const { admin, user, installation, cluster } = values;
  if (admin === undefined || user === undefined || installation === undefined || cluster === undefined) {
    throw new UsageError("--admin, --user, --installation and --cluster are required");
  }
  if (values.list !== (positionals.length === 0)) throw new UsageError("either --list, or VERB RESOURCE[/NAME]");
  if (!values.list && positionals.length !== 2) throw new UsageError("expected VERB RESOURCE[/NAME]");
  const body = {
    user,
    installation,
    cluster,
    namespace: values.namespace ?? "",
    ...(values.list ? {} : { request: requestOf(positionals[0]!, positionals[1]!, values.subresource ?? "") }),
  };
  const response = await fetch(`http://${admin}/can-i`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (response.status === 404 && (await response.clone().text()).trim() === "not found") {
    throw new Error(`${admin}/can-i is not served: set admin.explain: true on that server (off by default)`);
  }
  if (!response.ok) throw new Error(`${admin}/can-i answered ${response.status}: ${(await response.text()).trim()}`);
  if (values.list) {
    const listed = (await response.json()) as CanIList;
    io.out(values.json ? `${JSON.stringify(listed, null, 2)}\n` : renderList(listed));
    return 0;
  }
  const answer = (await response.json()) as CanIAnswer & { list: CanIList };
  io.out(values.json ? `${JSON.stringify(answer, null, 2)}\n` : renderAnswer(answer));
  return answer.allowed === true ? 0 : 1;
}

/** The table as kubectl auth can-i --list prints one, with the gates above it. Pure. */
export function renderList(listed: CanIList): string {
  const lines = [
    `cluster ${listed.cluster}, namespace ${listed.namespace === "" ? "(cluster-wide rules only)" : listed.namespace}`,
    `installation ${listed.installation.name} (${listed.installation.uid}), plugin ${listed.installation.pluginName}`,
    `revoked: ${listed.revoked === null ? "no" : `YES, by ${listed.revoked.name} (${listed.revoked.scope}): no PluginToken request of this user through this installation gets through`}`,
    `can_view(user, cluster): ${listed.canView ? "yes" : "NO: no PluginToken request of this user gets through"}`,
    side("user", listed.user),
    side("plugin", listed.plugin),
    ...(listed.incomplete ? ["INCOMPLETE: a rules review may not list every rule; a request not listed may still be allowed"] : []),
    "",
  ];
  const header = ["APIGROUP", "RESOURCE", "RESOURCENAMES", "VERBS", "NAMESPACE"];
  const rows = listed.rows.map((r) => [r.apiGroup === "" ? '""' : r.apiGroup, r.resource, r.resourceNames.length === 0 ? "*" : r.resourceNames.join(","), r.verbs.join(","), r.namespace === "" ? "*" : r.namespace]);
  const urls = listed.nonResource.map((u) => ["", u.url, "", u.verbs.join(","), ""]);
  const table = [header, ...rows, ...(urls.length === 0 ? [] : [["", "NON-RESOURCE URL", "", "VERBS", ""], ...urls])];
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table) lines.push(row.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd());
  if (rows.length === 0 && urls.length === 0) lines.push("(nothing)");
  return `${lines.join("\n")}\n`;
}

function side(label: string, s: CanIList["user"]): string {
  const state = !s.exists ? "does not exist: can do nothing" : s.rules.incomplete ? `rules incomplete${s.evaluationError === "" ? "" : `: ${s.evaluationError}`}` : "rules complete";
  return `${label} ServiceAccount ${s.serviceAccount}: ${state}`;
}

export function renderAnswer(answer: CanIAnswer): string {
  const verdict = answer.allowed === true ? "yes" : answer.allowed === false ? "no" : "unknown";
  const gates = answer.gates.map((g) => `  ${g.gate.padEnd(10)} ${g.allowed ? "allows" : g.incomplete ? "does not list it (incomplete)" : "refuses"}`);
  return `${verdict}${answer.decidedBy === undefined ? "" : ` (decided by ${answer.decidedBy})`}\n${gates.join("\n")}\n`;
}
