/**
 * `portcullis gateway-config`: the manifests that put portcullis behind Envoy Gateway or Istio
 * (src/deploy/gateway-config.ts), from the configuration file and, optionally, the Helm chart's
 * values file (its `httproute.parentRefs` and `httproute.hostnames`), so one values file drives both.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parse, stringify } from "yaml";
import { loadConfig } from "../config/load.ts";
import { GATEWAY_TARGETS, istioMeshConfig, renderGatewayYaml, type GatewayOptions, type GatewayTarget } from "../deploy/gateway-config.ts";

export class UsageError extends Error {}

/** Envoy Gateway runs every Gateway's proxies in its own namespace unless told otherwise. */
const ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system";

export function runGatewayConfig(args: string[], io: { out: (text: string) => void }): number {
  const { values } = parseArgs({
    args,
    options: {
      config: { type: "string" },
      target: { type: "string" },
      values: { type: "string" },
      gateway: { type: "string" },
      namespace: { type: "string" },
      "proxy-namespace": { type: "string" },
      "mesh-config": { type: "boolean" },
    },
    strict: true,
  });
  if (values.config === undefined) throw new UsageError("--config FILE is required");
  const target = values.target as GatewayTarget | undefined;
  if (target === undefined || !GATEWAY_TARGETS.includes(target)) throw new UsageError(`--target must be one of ${GATEWAY_TARGETS.join(", ")}`);
  const config = loadConfig(values.config);
  const namespace = values.namespace ?? "fundament-system";
  if (values["mesh-config"] === true) {
    if (target !== "istio") throw new UsageError("--mesh-config is for --target istio");
    io.out(stringify(istioMeshConfig(config, { namespace }), { lineWidth: 0 }));
    return 0;
  }
  const chart = values.values === undefined ? {} : chartValues(values.values);
  const gateway = gatewayOf(values.gateway, chart.parentRef);
  const options: GatewayOptions = {
    target,
    namespace,
    gateway,
    proxyNamespace: values["proxy-namespace"] ?? (target === "envoy-gateway" ? ENVOY_GATEWAY_NAMESPACE : gateway.namespace),
    hostnames: chart.hostnames,
  };
  io.out(renderGatewayYaml(config, options));
  return 0;
}

type Gateway = GatewayOptions["gateway"];

/** `--gateway NAMESPACE/NAME[/SECTION]` wins over the values file's first parentRef. */
function gatewayOf(flag: string | undefined, fromValues: Gateway | undefined): Gateway {
  if (flag !== undefined) {
    const [namespace, name, sectionName, ...extra] = flag.split("/");
    if (!namespace || !name || extra.length > 0) throw new UsageError("--gateway expects NAMESPACE/NAME[/SECTION]");
    return { namespace, name, sectionName: sectionName || undefined };
  }
  if (fromValues === undefined) throw new UsageError("name the Gateway: --gateway NAMESPACE/NAME, or --values FILE with httproute.parentRefs");
  return fromValues;
}

/** The chart's `httproute` values (deploy/helm/portcullis/values.yaml). */
function chartValues(file: string): { parentRef?: Gateway; hostnames?: string[] } {
  const values = (parse(readFileSync(file, "utf8")) ?? {}) as { httproute?: { parentRefs?: unknown; hostnames?: unknown } };
  const refs = values.httproute?.parentRefs;
  const hostnames = values.httproute?.hostnames;
  if (hostnames !== undefined && (!Array.isArray(hostnames) || !hostnames.every((h) => typeof h === "string"))) {
    throw new UsageError(`${file}: httproute.hostnames must be a list of host names`);
  }
  let parentRef: Gateway | undefined;
  if (refs !== undefined) {
    if (!Array.isArray(refs) || refs.length !== 1) throw new UsageError(`${file}: httproute.parentRefs must name exactly one Gateway`);
    const ref = refs[0] as { name?: unknown; namespace?: unknown; sectionName?: unknown };
    if (typeof ref.name !== "string" || typeof ref.namespace !== "string") throw new UsageError(`${file}: httproute.parentRefs[0] needs name and namespace`);
    parentRef = { name: ref.name, namespace: ref.namespace, sectionName: typeof ref.sectionName === "string" ? ref.sectionName : undefined };
  }
  return { ...(parentRef === undefined ? {} : { parentRef }), ...(hostnames === undefined ? {} : { hostnames: hostnames as string[] }) };
}
