/**
 * Fakes of the ports that record every call, so tests assert gate order, coalescing and what was
 * asked. Each answers from a table the test sets.
 */
import type { PluginRequestAudit } from "../../src/audit/plugin-request.ts";
import type { PluginTokenReplayAudit } from "../../src/audit/plugin-token-replay.ts";
import { DependencyUnavailable } from "../../src/dependencies/unavailable.ts";
import { kubeApiEnvoyCluster } from "../../src/envoy/kube-api-upstream.ts";
import type { AccessAttributes, Installation } from "../../src/ports/policy-ports.ts";
import { type Revocation, RevocationSet, type RevocationSubject } from "../../src/kube-watch/revocations.ts";
import { bearerCredential, safeHeaderValue } from "../../src/headers/mutations.ts";
import type { PolicyPorts } from "../../src/server/ports.ts";
import { ids, PINNED_HASH } from "./tokens.ts";

export type Answer<T> = T | "unavailable" | { delayMs: number; value: T | "unavailable" };

async function answer<T>(dependency: string, a: Answer<T>): Promise<T> {
  if (typeof a === "object" && a !== null && "delayMs" in a) {
    await new Promise((r) => setTimeout(r, a.delayMs));
    return answer(dependency, a.value);
  }
  if (a === "unavailable") throw new DependencyUnavailable(dependency, "down (fake)");
  return a;
}

export function installation(overrides: Partial<Installation> = {}): Installation {
  return {
    uid: ids.installation,
    name: "cert-manager",
    pluginName: "cert-manager",
    pluginVersion: "1.4.0",
    definitionHash: PINNED_HASH,
    phase: "Running",
    terminating: false,
    organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03",
    ...overrides,
  };
}

export class FakeWorld implements PolicyPorts {
  calls: string[] = [];
  audits: PluginRequestAudit[] = [];
  clusterIds = new Set<string>([ids.cluster]);
  canViewAnswer: Answer<boolean> = true;
  sarAnswer: (clusterId: string, userId: string, a: AccessAttributes) => Answer<boolean> = () => true;
  tokenAnswer: (clusterId: string, namespace: string, name: string) => Answer<string | undefined> = (_c, ns, name) =>
    `sa-token-for-${ns}-${name}`;
  installationsByUid = new Map<string, Installation>([[ids.installation, installation()]]);
  indexSynced = true;
  sarRequests: AccessAttributes[] = [];

  /** Registered clusters' Services' domains (their Secrets' `service-domain`); a static cluster has none. */
  serviceDomains = new Map<string, string>();
  clusters = { has: (clusterId: string) => this.clusterIds.has(clusterId), serviceDomainOf: (clusterId: string) => this.serviceDomains.get(clusterId) };
  canView = {
    canView: (userId: string, clusterId: string) => {
      this.calls.push(`canView ${userId} ${clusterId}`);
      return answer("openfga", this.canViewAnswer);
    },
  };
  userAccess = {
    allowed: (clusterId: string, userId: string, attributes: AccessAttributes) => {
      this.calls.push(`sar ${clusterId} ${userId} ${attributes.verb}`);
      this.sarRequests.push(attributes);
      return answer("kube-apiserver", this.sarAnswer(clusterId, userId, attributes));
    },
  };
  serviceAccountTokens = {
    token: (clusterId: string, namespace: string, name: string) => {
      this.calls.push(`token ${clusterId} ${namespace}/${name}`);
      // The real port checks a token once, when it caches it (src/kube-calls/service-account-tokens.ts).
      return answer("kube-apiserver", this.tokenAnswer(clusterId, namespace, name)).then((token) => {
        if (token === undefined) return undefined;
        const safe = safeHeaderValue(token);
        if (safe === undefined) throw new DependencyUnavailable("kube-apiserver", "not a header value (fake)");
        return { authorization: bearerCredential(safe), envoyCluster: kubeApiEnvoyCluster(clusterId) };
      });
    },
  };
  installations = {
    byUid: (clusterId: string, uid: string) => {
      this.calls.push(`installation ${clusterId} ${uid}`);
      if (!this.indexSynced) throw new DependencyUnavailable("plugin-installation-index", "not synced (fake)");
      return this.clusterIds.has(clusterId) ? this.installationsByUid.get(uid) : undefined;
    },
  };
  /** The deny-list's entries; while `revocationsSynced` is false every lookup throws (503). */
  revocationEntries: Revocation[] = [];
  revocationsSynced = true;
  revocations = {
    revoked: (subject: RevocationSubject) => {
      if (!this.revocationsSynced) throw new DependencyUnavailable("revocation-list", "not synced (fake)");
      const set = new RevocationSet();
      for (const entry of this.revocationEntries) set.put(entry);
      return set.match(subject);
    },
  };
  replays: PluginTokenReplayAudit[] = [];
  audit = {
    pluginRequest: (line: PluginRequestAudit) => void this.audits.push(line),
    pluginTokenReplay: (line: PluginTokenReplayAudit) => void this.replays.push(line),
  };
}
