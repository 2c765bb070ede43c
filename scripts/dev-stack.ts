/**
 * The local stack behind `npm start`: builds or reuses the pinned OpenFGA, kube-apiserver and
 * etcd, starts them on loopback with the Fundament demo world of the end-to-end suite (users
 * alice, bob, carol, dave; a pinned cert-manager PluginInstallation), and runs portcullis on its
 * usual ports against them. Demo tokens are written to files, never printed. Ctrl-C stops all.
 */
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { startFundamentWorld } from "../test/e2e/fundament-world.ts";
import { DEMO_TOKEN_SECONDS, devStackBanner, writeDemoTokens } from "./dev-banner.ts";

const ROOT = resolve(import.meta.dirname, "..");
// Only what the stack runs: the tests' gateway translators and oracle are built by `npm test`.
const install = spawnSync("bash", [resolve(ROOT, "scripts/deps/install.sh"), "--stack"], { stdio: ["ignore", "inherit", "inherit"] });
if (install.status !== 0) process.exit(install.status ?? 1);

console.log("starting etcd, kube-apiserver and OpenFGA with the demo world …");
const listen = { grpc: "127.0.0.1:9001", admin: "127.0.0.1:9090", internal: "127.0.0.1:9002" };
const world = await startFundamentWorld({ allowTtlMs: 5_000, denyTtlMs: 2_000, listen, echoLogs: true, pluginTokenMaxLifetimeSeconds: DEMO_TOKEN_SECONDS });

const dir = resolve(ROOT, ".portcullis/dev");
await writeDemoTokens(dir, world.installationUid);
console.log(devStackBanner({ root: ROOT, dir, listen, apiServerUrl: world.api.url, openfgaUrl: world.fga.apiUrl }));

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  console.log("stopping …");
  await world.stop();
  process.exit(0);
};
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());
