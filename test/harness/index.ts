// Real dependencies for integration tests. Binaries come from
// `bash scripts/deps/install.sh`; every start function gives each caller its
// own processes on free loopback ports, so test files can run in parallel.
export { resolveBinary, type BinaryName } from "./binaries.ts";
export { startEtcd, type Etcd } from "./etcd.ts";
export {
  applyManifests,
  kubeConfig,
  rawRequest,
  rawTextRequest,
  startKubeApiserver,
  type KubeApiserver,
  type KubeApiserverOptions,
} from "./kube-apiserver.ts";
export { startOpenFGA, type OpenFGA, type OpenFGAOptions } from "./openfga.ts";
export { freePort } from "./ports.ts";
