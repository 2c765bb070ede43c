/**
 * `portcullis revoke` / `unrevoke`: the sub-TTL kill switch from a shell (issue 17). Each writes or
 * deletes one Revocation object (deploy/k8s/crds/revocations.portcullis.fundament.io.yaml) on the
 * cluster every replica watches, with the caller's own kubeconfig (like kubectl). The object's name
 * is derived from what it revokes, so revoking twice is one entry and `unrevoke` with the same
 * flags finds it.
 */
import { createHash } from "node:crypto";
import { parseArgs } from "node:util";
import { CustomObjectsApi, KubeConfig } from "#kubernetes-client";
import { stringify } from "yaml";
import { revocationOf, REVOCATIONS, type RevocationTarget } from "../kube-watch/revocations.ts";

export class UsageError extends Error {}

const OPTIONS = {
  installation: { type: "string" },
  plugin: { type: "string" },
  "plugin-version": { type: "string" },
  "definition-hash": { type: "string" },
  user: { type: "string" },
  reason: { type: "string" },
  kubeconfig: { type: "string" },
  context: { type: "string" },
  "dry-run": { type: "boolean" },
} as const;

/** The Revocation object for a target. Pure. */
export function revocationObject(target: RevocationTarget, reason: string): Record<string, unknown> {
  const spec =
    target.scope === "installation"
      ? { installation: { id: target.installationId } }
      : target.scope === "user"
        ? { user: { id: target.userId } }
        : {
            plugin: {
              name: target.pluginName,
              ...(target.pluginVersion === undefined ? {} : { version: target.pluginVersion }),
              ...(target.definitionHash === undefined ? {} : { definitionHash: target.definitionHash }),
            },
          };
  return {
    apiVersion: `${REVOCATIONS.group}/${REVOCATIONS.version}`,
    kind: "Revocation",
    metadata: { name: revocationName(target) },
    spec: { reason, ...spec },
  };
}

/**
 * One name per target: the id itself for installations and users; for a plugin its name and a short
 * digest of the narrowing (versions hold characters a name may not, and must not collide).
 */
export function revocationName(target: RevocationTarget): string {
  switch (target.scope) {
    case "installation":
      return `installation-${target.installationId}`;
    case "user":
      return `user-${target.userId}`;
    case "plugin": {
      const narrowing = JSON.stringify([target.pluginVersion ?? null, target.definitionHash ?? null]);
      return `plugin-${target.pluginName}-${createHash("sha256").update(narrowing).digest("hex").slice(0, 10)}`;
    }
  }
}

/** The target the flags name, checked as portcullis will read it. Pure. */
export function targetOf(values: { installation?: string; plugin?: string; "plugin-version"?: string; "definition-hash"?: string; user?: string }): RevocationTarget {
  const spec = {
    ...(values.installation === undefined ? {} : { installation: { id: values.installation } }),
    ...(values.user === undefined ? {} : { user: { id: values.user } }),
    ...(values.plugin === undefined ? {} : { plugin: { name: values.plugin, version: values["plugin-version"], definitionHash: values["definition-hash"] } }),
  };
  if (values.plugin === undefined && (values["plugin-version"] !== undefined || values["definition-hash"] !== undefined)) {
    throw new UsageError("--plugin-version and --definition-hash narrow --plugin");
  }
  const read = revocationOf({ metadata: { name: "cli" }, spec });
  if ("invalid" in read) throw new UsageError(read.invalid.replaceAll("spec.", "--").replace(".id", "").replace(".name", ""));
  return read.target;
}

export interface RevokeIo {
  out(text: string): void;
}

export async function runRevoke(command: "revoke" | "unrevoke", args: string[], io: RevokeIo): Promise<number> {
  const { values } = parseArgs({ args, options: OPTIONS, strict: true, allowPositionals: false });
  const target = targetOf(values);
  if (command === "revoke" && (values.reason === undefined || values.reason === "")) throw new UsageError("--reason is required (an incident reference)");
  const object = revocationObject(target, values.reason ?? "");
  if (values["dry-run"]) {
    if (command !== "revoke") throw new UsageError("--dry-run is for revoke");
    io.out(stringify(object));
    return 0;
  }
  const kubeConfig = new KubeConfig();
  if (values.kubeconfig === undefined) kubeConfig.loadFromDefault();
  else kubeConfig.loadFromFile(values.kubeconfig);
  if (values.context !== undefined) kubeConfig.setCurrentContext(values.context);
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const name = revocationName(target);
  if (command === "revoke") {
    try {
      await api.createClusterCustomObject({ ...REVOCATIONS, body: object });
      io.out(`revocation.${REVOCATIONS.group}/${name} created\n`);
    } catch (err) {
      if ((err as { code?: unknown }).code !== 409) throw err;
      io.out(`revocation.${REVOCATIONS.group}/${name} already in force (unchanged)\n`);
    }
    return 0;
  }
  try {
    await api.deleteClusterCustomObject({ ...REVOCATIONS, name });
    io.out(`revocation.${REVOCATIONS.group}/${name} deleted\n`);
  } catch (err) {
    if ((err as { code?: unknown }).code !== 404) throw err;
    io.out(`revocation.${REVOCATIONS.group}/${name} not found: nothing was revoked under that target\n`);
  }
  return 0;
}
