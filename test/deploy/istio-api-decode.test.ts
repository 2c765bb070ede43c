/**
 * The Istio objects portcullis ships, decoded strictly against Istio's own API types: istio.io/api
 * v1.32.0's .proto files (copied from its Go module by scripts/deps/install.sh), through the same
 * strict proto3-JSON decoder the Envoy configuration is held to (src/envoy/bootstrap.ts: an unknown
 * field, a wrong type or enum value fails): the chart's AuthorizationPolicy (gateway.mode istio) and
 * istiod's extension provider (deploy/gateway/istiod-values.yaml). What Istio's pilot makes of them:
 * test/deploy/istio-pilot-xds.test.ts; the API server's verdict: test/e2e/gateway-manifests.test.ts.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import protobuf from "protobufjs";
import { describe, expect, it } from "vitest";
import { decodeAs } from "../../src/envoy/bootstrap.ts";
import { resolveBinary } from "../harness/binaries.ts";
import { extAuthzTimeoutMs } from "../../src/deploy/envoy-config.ts";
import { gatewayConfig, istiodValues, modeValues } from "../support/gateway.ts";
import { helmTemplate } from "../support/helm.ts";

const ROOT = resolve(import.meta.dirname, "../..");
type Json = Record<string, any>;

/** Istio's API protos, imports resolved as protoc -I <api> -I <api>/common-protos would. */
function istioRoot(files: string[]): protobuf.Root {
  const base = resolveBinary("istioApiProtos");
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => [join(base, target), join(base, "common-protos", target)].find((p) => existsSync(p)) ?? target;
  root.loadSync(files, { keepCase: true }).resolveAll();
  return root;
}

const root = istioRoot(["mesh/v1alpha1/config.proto", "security/v1beta1/authorization_policy.proto"]);
const decode = (typeName: string, value: unknown) => decodeAs(root.lookupType(typeName), value);
const objects = helmTemplate(modeValues("istio"));

describe("Istio's API types accept", () => {
  it("istiod's extension provider (MeshConfig.extensionProviders[], EnvoyExternalAuthorizationGrpcProvider)", () => {
    const mesh = istiodValues()["meshConfig"];
    const result = decode("istio.mesh.v1alpha1.MeshConfig", mesh);
    expect(result.ok ? [] : result.errors).toEqual([]);
    // Read back from the decoded message: every value landed in the field Istio reads.
    const grpc = (result.ok ? (result.message.toJSON() as Json) : {})["extension_providers"][0];
    expect(grpc.name).toBe("portcullis");
    expect(grpc.envoy_ext_authz_grpc).toMatchObject({ service: "portcullis-ext-authz.fundament-system.svc.cluster.local", port: 9001, status_on_error: "503" });
    expect(grpc.envoy_ext_authz_grpc.fail_open ?? false).toBe(false);
    // Envoy's ext_authz deadline, as the chart's default configuration sets it: above portcullis's own.
    expect(mesh.extensionProviders[0].envoyExtAuthzGrpc.timeout).toBe(`${extAuthzTimeoutMs(gatewayConfig) / 1000}s`);
    expect(extAuthzTimeoutMs(gatewayConfig)).toBeGreaterThan(gatewayConfig.check.timeoutMs);
  });

  it.each([["AuthorizationPolicy", "istio.security.v1beta1.AuthorizationPolicy"]])("the chart's %s's spec (%s)", (kind, typeName) => {
    const found = objects.filter((o) => o["kind"] === kind);
    expect(found.length).toBeGreaterThan(0);
    for (const o of found) {
      const result = decode(typeName, o["spec"]);
      expect(result.ok ? [] : result.errors, o["metadata"].name).toEqual([]);
    }
  });

  it("and refuse what Istio would (the decoder is not a rubber stamp)", () => {
    const provider = istiodValues()["meshConfig"].extensionProviders[0];
    const wrongField = decode("istio.mesh.v1alpha1.MeshConfig", { extensionProviders: [{ ...provider, envoyExtAuthzGrpc: { ...provider.envoyExtAuthzGrpc, failClosed: true } }] });
    expect(wrongField.ok ? [] : wrongField.errors.join()).toMatch(/unknown field "failClosed"/);
    const wrongEnum = decode("istio.security.v1beta1.AuthorizationPolicy", { ...objects.find((o) => o["kind"] === "AuthorizationPolicy")!["spec"], action: "EXTERNAL" });
    expect(wrongEnum.ok).toBe(false);
  });
});
