/**
 * The parts of @kubernetes/client-node portcullis runs, imported everywhere as `#kubernetes-client`
 * (package.json "imports"). At run time that name is build/kubernetes-client.js,
 * which scripts/bundle-kubernetes-client.ts builds from this file with esbuild at `npm install`
 * (and in the image's build stage); for the type checker it is this file.
 *
 * Why a bundle: every entry point of client-node (KubeConfig's dist/config.js, each API class)
 * imports dist/gen/index.js, which loads all of the package's 1,033 modules, 25 MB of JavaScript
 * (a client for every API group, three times over), and Node keeps every module's source and
 * functions for the life of the process. Bundled, only what the classes below reach is loaded,
 * as one module of 4 MB: ~27 MiB less RSS per replica (bench/module-memory.ts). The code is
 * client-node's own, unchanged; its dependencies (undici, js-yaml, …) stay separate packages.
 *
 * A class used from src/ must be listed here: the types below export every type of the package
 * but only these as values, so the type checker refuses a value the bundle does not have.
 */
export { AuthorizationV1Api, CoreV1Api, CustomObjectsApi, Health, KubeConfig, ListWatch, Observable, Watch } from "@kubernetes/client-node";
export type * from "@kubernetes/client-node";
