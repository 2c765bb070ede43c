/**
 * The data-plane Envoy as the chart or the kit wires it, run without a cluster: its init container's
 * arguments, exactly as rendered, given to the real CLI (`node src/cli/main.ts`, the image's
 * entrypoint) with each path moved under a scratch root, the file at `--config` being the rendered
 * ConfigMap's key that volume mounts there. What it writes at `--output` is what the Envoy container
 * reads at `--config-path` (the same emptyDir, the same file), and the file it read is the one the
 * portcullis container runs with (its `--config`, the same ConfigMap).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { cli, type CliResult } from "../cli/run.ts";
import type { Manifest } from "./kustomize.ts";

export const find = (objects: Manifest[], kind: string, name: string): Manifest => {
  const found = objects.find((m) => m["kind"] === kind && m["metadata"].name === name);
  if (found === undefined) throw new Error(`no ${kind}/${name} rendered`);
  return found;
};

/** The value following `flag` in a container's args. */
export function argOf(args: readonly string[], flag: string): string {
  const i = args.indexOf(flag);
  if (i < 0 || i + 1 >= args.length) throw new Error(`no ${flag} in ${args.join(" ")}`);
  return args[i + 1]!;
}

/** The volume a container sees `path` through, and the path inside that volume. */
export function volumeAt(pod: Manifest, container: Manifest, path: string): { volume: Manifest; inside: string } {
  const mount = (container["volumeMounts"] as Manifest[])
    .filter((m) => path.startsWith(`${m["mountPath"]}/`))
    .sort((a, b) => b["mountPath"].length - a["mountPath"].length)[0];
  if (mount === undefined) throw new Error(`${container["name"]} mounts nothing at ${path}`);
  const volume = (pod["volumes"] as Manifest[]).find((v) => v["name"] === mount["name"]);
  if (volume === undefined) throw new Error(`no volume ${mount["name"]}`);
  return { volume, inside: relative(mount["mountPath"], path) };
}

/** The ConfigMap behind a configMap volume, and the text of `key` in it. */
function configMapText(objects: Manifest[], volume: Manifest, key: string): { configMap: Manifest; text: string } {
  const name = volume["configMap"]?.name;
  if (name === undefined) throw new Error(`volume ${volume["name"]} is not a ConfigMap`);
  const configMap = find(objects, "ConfigMap", name);
  const text = configMap["data"]?.[key];
  if (typeof text !== "string") throw new Error(`ConfigMap ${name} has no key ${key}`);
  return { configMap, text };
}

export interface DataPlaneRun {
  readonly result: CliResult;
  /** What the init container wrote, where the Envoy container reads it. */
  readonly bootstrap: string;
  /** The file it read: the ConfigMap's key, as mounted. */
  readonly configText: string;
  /** That file under the scratch root. */
  readonly configFile: string;
  /** The ConfigMap portcullis's own container reads its --config from, and the key. */
  readonly portcullisConfig: { configMap: string; key: string; path: string };
  readonly envoyConfigMap: { configMap: string; key: string; path: string };
}

/**
 * Runs the init container of Deployment fundament-envoy as rendered. `configText` replaces the
 * mounted file's text (a test's stand-in for what the cluster provides: loopback addresses,
 * kubeconfigs for the in-cluster credentials); the rendered one by default.
 */
export async function runInitContainer(objects: Manifest[], root: string, configText?: (rendered: string) => string): Promise<DataPlaneRun> {
  const pod = find(objects, "Deployment", "fundament-envoy")["spec"].template.spec;
  const init = (pod["initContainers"] as Manifest[]).find((c) => c["name"] === "envoy-config");
  if (init === undefined) throw new Error("no init container envoy-config");
  const args = init["args"] as string[];
  const configPath = argOf(args, "--config");
  const outputPath = argOf(args, "--output");

  const configVolume = volumeAt(pod, init, configPath);
  const { configMap, text } = configMapText(objects, configVolume.volume, configVolume.inside);
  const written = configText === undefined ? text : configText(text);
  const under = (path: string) => join(root, path);
  mkdirSync(dirname(under(configPath)), { recursive: true });
  writeFileSync(under(configPath), written);
  mkdirSync(dirname(under(outputPath)), { recursive: true });

  // The Envoy container reads the file the init container wrote: the same emptyDir, the same name in it.
  const envoy = (pod["containers"] as Manifest[]).find((c) => c["name"] === "envoy")!;
  const envoyReads = volumeAt(pod, envoy, argOf(envoy["args"], "--config-path"));
  const initWrites = volumeAt(pod, init, outputPath);
  if (initWrites.volume["emptyDir"] === undefined) throw new Error(`--output ${outputPath} is not on an emptyDir`);
  if (envoyReads.volume["name"] !== initWrites.volume["name"] || envoyReads.inside !== initWrites.inside) {
    throw new Error(`Envoy reads ${envoyReads.volume["name"]}/${envoyReads.inside}, the init container writes ${initWrites.volume["name"]}/${initWrites.inside}`);
  }

  const portcullisPod = find(objects, "Deployment", "portcullis")["spec"].template.spec;
  const portcullis = (portcullisPod["containers"] as Manifest[])[0]!;
  const portcullisPath = argOf(portcullis["args"], "--config");
  const portcullisVolume = volumeAt(portcullisPod, portcullis, portcullisPath);

  const mapped = args.map((a) => (a === configPath || a === outputPath ? under(a) : a));
  const result = await cli(mapped);
  let bootstrap = "";
  try {
    bootstrap = readFileSync(under(outputPath), "utf8");
  } catch {
    // Nothing written: the result says why.
  }
  return {
    result,
    bootstrap,
    configText: written,
    configFile: under(configPath),
    portcullisConfig: { configMap: portcullisVolume.volume["configMap"]?.name, key: portcullisVolume.inside, path: portcullisPath },
    envoyConfigMap: { configMap: configMap["metadata"].name, key: configVolume.inside, path: configPath },
  };
}
