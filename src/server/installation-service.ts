/**
 * PluginInstallationService.GetInstallationManifest: what authn-api asks before minting a
 * PluginToken (FUN-17 §10, §11). Answered from the same PluginInstallation index the gateway uses,
 * and the same deny-list: a revoked installation (or plugin) is FAILED_PRECONDITION, so no new
 * PluginToken is minted for it while it is revoked.
 */
import { resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { isBeingDeleted } from "../authz/installation.ts";
import type { InstallationLookup } from "../ports/policy-ports.ts";
import { pinnedSubject } from "../authz/revocation-gate.ts";
import type { RevocationList } from "../kube-watch/revocations.ts";
import { publishRevoked } from "../metrics/events.ts";
import { isUuid } from "../tokens/claim-formats.ts";

export const INSTALLATION_PROTO = resolve(import.meta.dirname, "../../protos/fundament/plugins/v1/plugin_installation.proto");

let definition: grpc.GrpcObject | undefined;

export function installationServicePackage(): grpc.GrpcObject {
  definition ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(INSTALLATION_PROTO, { keepCase: true, longs: String, enums: String, defaults: true }),
  );
  return definition;
}

export function installationServiceConstructor(): grpc.ServiceClientConstructor {
  const pkg = installationServicePackage() as unknown as {
    fundament: { plugins: { v1: { PluginInstallationService: grpc.ServiceClientConstructor } } };
  };
  return pkg.fundament.plugins.v1.PluginInstallationService;
}

interface ManifestRequest {
  cluster_id: string;
  installation_id: string;
}

export function installationServiceHandlers(installations: InstallationLookup, revocations: RevocationList): grpc.UntypedServiceImplementation {
  return {
    GetInstallationManifest(call: grpc.ServerUnaryCall<ManifestRequest, unknown>, callback: grpc.sendUnaryData<unknown>) {
      const { cluster_id: clusterId, installation_id: installationId } = call.request;
      if (!isUuid(clusterId) || !isUuid(installationId)) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: "cluster_id and installation_id must be lower-case UUIDs" });
        return;
      }
      let installation;
      let revoked;
      try {
        installation = installations.byUid(clusterId, installationId);
        // No user is named here: installation and plugin entries refuse the mint; a user entry
        // refuses that user's requests at the gateway.
        revoked = installation === undefined ? undefined : revocations.revoked(pinnedSubject(installation));
      } catch (err) {
        callback(
          err instanceof DependencyUnavailable
            ? { code: grpc.status.UNAVAILABLE, details: `${err.dependency} not synced` }
            : { code: grpc.status.INTERNAL, details: "internal error" },
        );
        return;
      }
      if (installation === undefined) {
        callback({ code: grpc.status.NOT_FOUND, details: "no such installation" });
        return;
      }
      if (isBeingDeleted(installation)) {
        callback({ code: grpc.status.FAILED_PRECONDITION, details: "installation is being deleted" });
        return;
      }
      if (revoked !== undefined) {
        publishRevoked("GetInstallationManifest", revoked.target.scope);
        callback({ code: grpc.status.FAILED_PRECONDITION, details: "installation is revoked" });
        return;
      }
      callback(null, {
        plugin_name: installation.pluginName,
        plugin_version: installation.pluginVersion,
        definition_hash: installation.definitionHash,
        organization_id: installation.organizationId,
        status: installation.phase,
        installation_name: installation.name,
      });
    },
  };
}
