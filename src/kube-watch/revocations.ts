/**
 * The sub-TTL kill switch (FUN-17 §10: "a deny-list keyed by installation_id checked at proxy
 * validation time"; issue 17). A PluginToken lives 15 minutes; a revocation stops it at once.
 * An entry names exactly one of:
 *  - an installation, by metadata.uid (one install of a plugin on one cluster);
 *  - a plugin, by name, optionally narrowed to a version and/or a definition hash ("every install
 *    of cert-manager-ui 0.9.0 everywhere");
 *  - a user, by id (every plugin acting for that user).
 * Entries come from `Revocation` objects (portcullis.fundament.io/v1alpha1, cluster-scoped) on the
 * cluster named by `revocations` (revocation-index.ts). This file reads one object and matches a
 * request against the entries; the gate the policies run is src/authz/revocation-gate.ts.
 */
import { watchKey } from "./sole-claims.ts";
import { isDnsLabel, isPinnedHash, isPluginVersion, isUuid } from "../tokens/claim-formats.ts";

export const REVOCATIONS = { group: "portcullis.fundament.io", version: "v1alpha1", plural: "revocations" } as const;

/** Which kind of entry matched: a closed set, used as a metric label. */
export type RevocationScope = "installation" | "plugin" | "user";

export type RevocationTarget =
  | { readonly scope: "installation"; readonly installationId: string }
  | { readonly scope: "plugin"; readonly pluginName: string; readonly pluginVersion?: string; readonly definitionHash?: string }
  | { readonly scope: "user"; readonly userId: string };

export interface Revocation {
  /**
   * The object's name as kubectl writes it (`name`, or `namespace/name`: watchKey), for the operator
   * and the log, and its key in the set; never shown to the caller.
   */
  readonly name: string;
  readonly target: RevocationTarget;
}

/** What a request (or a mint) acts through: the installation, the plugin it runs, and the user if known. */
export interface RevocationSubject {
  readonly installationId: string;
  readonly pluginName: string;
  readonly pluginVersion: string;
  readonly definitionHash: string;
  /** Absent for GetInstallationManifest, which is asked about an installation, not a user. */
  readonly userId?: string;
}

/** The deny-list as the policies read it. */
export interface RevocationList {
  /** The matching entry with the least name, or undefined. Throws DependencyUnavailable while the list is not synced. */
  revoked(subject: RevocationSubject): Revocation | undefined;
}

/** No deny-list configured (`revocations` absent): nothing is revoked. */
export const NO_REVOCATIONS: RevocationList = { revoked: () => undefined };

export interface RevocationObject {
  readonly metadata?: { readonly name?: string; readonly namespace?: string };
  readonly spec?: {
    readonly installation?: { readonly id?: unknown };
    readonly plugin?: { readonly name?: unknown; readonly version?: unknown; readonly definitionHash?: unknown };
    readonly user?: { readonly id?: unknown };
  };
}

/**
 * One object as an entry, or the reason it is not one. The CRD's schema refuses all of these at
 * the API server; this guards a cluster where the CRD was installed without its validation.
 */
export function revocationOf(obj: RevocationObject): Revocation | { readonly invalid: string } {
  if (obj.metadata?.name === undefined) return { invalid: "no metadata.name" };
  const name = watchKey(obj.metadata);
  const spec = obj.spec ?? {};
  const named = [spec.installation, spec.plugin, spec.user].filter((t) => t !== undefined && t !== null);
  if (named.length !== 1) return { invalid: "expected exactly one of spec.installation, spec.plugin, spec.user" };
  if (spec.installation != null) {
    const id = spec.installation.id;
    return isUuid(id) ? { name, target: { scope: "installation", installationId: id } } : { invalid: "spec.installation.id is not a lower-case UUID" };
  }
  if (spec.user != null) {
    const id = spec.user.id;
    return isUuid(id) ? { name, target: { scope: "user", userId: id } } : { invalid: "spec.user.id is not a lower-case UUID" };
  }
  const { name: pluginName, version, definitionHash } = spec.plugin!;
  if (!isDnsLabel(pluginName)) return { invalid: "spec.plugin.name is not a DNS label" };
  if (version !== undefined && !isPluginVersion(version)) return { invalid: "spec.plugin.version malformed" };
  if (definitionHash !== undefined && !(typeof definitionHash === "string" && isPinnedHash(definitionHash))) {
    return { invalid: "spec.plugin.definitionHash is not sha256:<64 hex>" };
  }
  return {
    name,
    target: {
      scope: "plugin",
      pluginName,
      ...(version === undefined ? {} : { pluginVersion: version }),
      ...(definitionHash === undefined ? {} : { definitionHash }),
    },
  };
}

/** Whether one entry covers the subject. Pure. */
export function covers(target: RevocationTarget, subject: RevocationSubject): boolean {
  switch (target.scope) {
    case "installation":
      return target.installationId === subject.installationId;
    case "user":
      return subject.userId !== undefined && target.userId === subject.userId;
    case "plugin":
      return (
        target.pluginName === subject.pluginName &&
        (target.pluginVersion === undefined || target.pluginVersion === subject.pluginVersion) &&
        (target.definitionHash === undefined || target.definitionHash === subject.definitionHash)
      );
    default: {
      const never: never = target;
      throw new TypeError(`unknown revocation scope ${JSON.stringify(never)}`);
    }
  }
}

/**
 * The entries by object name (within its namespace, should the CRD be namespaced: two objects of
 * one name are two entries, and deleting one leaves the other in force). A deny-list holds a
 * handful of incident entries, so a match is a scan; the set is replaced wholesale on every relist
 * (clear, then put).
 */
export class RevocationSet {
  readonly #byName = new Map<string, Revocation>();

  get size(): number {
    return this.#byName.size;
  }

  put(revocation: Revocation): void {
    this.#byName.set(revocation.name, revocation);
  }

  remove(name: string): void {
    this.#byName.delete(name);
  }

  clear(): void {
    this.#byName.clear();
  }

  /**
   * The covering entry with the least name: every replica names the same entry (in the log, the
   * metric's scope, can-i) whatever order the entries arrived in.
   */
  match(subject: RevocationSubject): Revocation | undefined {
    let matched: Revocation | undefined;
    for (const revocation of this.#byName.values()) {
      if (covers(revocation.target, subject) && (matched === undefined || revocation.name < matched.name)) matched = revocation;
    }
    return matched;
  }
}
