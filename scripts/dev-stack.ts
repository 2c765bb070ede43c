/**
 * The local stack behind `npm start`: builds or reuses the pinned OpenFGA, kube-apiserver and
 * etcd, starts them on loopback with the Fundament demo world of the end-to-end suite (users
 * alice, bob, carol, dave; a pinned cert-manager PluginInstallation), and runs portcullis on its
 * usual ports against them. Demo tokens are written to files, never printed. Ctrl-C stops all.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { startFundamentWorld, users } from "../test/e2e/fundament-world.ts";
import { ids, pluginToken, userToken } from "../test/support/tokens.ts";

const ROOT = resolve(import.meta.dirname, "..");
const install = spawnSync("bash", [resolve(ROOT, "scripts/deps/install.sh")], { stdio: ["ignore", "inherit", "inherit"] });
if (install.status !== 0) process.exit(install.status ?? 1);

console.log("starting etcd, kube-apiserver and OpenFGA with the demo world …");
const world = await startFundamentWorld({
  allowTtlMs: 5_000,
  denyTtlMs: 2_000,
  listen: { grpc: "127.0.0.1:9001", admin: "127.0.0.1:9090", internal: "127.0.0.1:9002" },
  echoLogs: true,
});

// Demo tokens last the session; they are signed with the demo secret in test/support/tokens.ts.
const dir = resolve(ROOT, ".portcullis/dev");
mkdirSync(dir, { recursive: true });
const day = { exp: Math.floor(Date.now() / 1000) + 86_400 };
const files: Record<string, string> = {
  "alice-plugin.jwt": await pluginToken({ sub: users.alice, installation_id: world.installationUid }, day),
  "bob-plugin.jwt": await pluginToken({ sub: users.bob, installation_id: world.installationUid }, day),
  "alice-user.jwt": await userToken({ sub: users.alice }, day),
  "dave-plugin.jwt": await pluginToken({ sub: users.dave, installation_id: world.installationUid }, day),
};
for (const [name, token] of Object.entries(files)) writeFileSync(resolve(dir, name), token, { mode: 0o600 });

const cluster = `/clusters/${ids.cluster}`;
console.log(`
portcullis is up:  ext_authz gRPC 127.0.0.1:9001 · admin http://127.0.0.1:9090/metrics · internal 127.0.0.1:9002
kube-apiserver ${world.api.url} · OpenFGA ${world.fga.apiUrl}
demo tokens in ${dir}/ (alice and bob through the cert-manager plugin, alice's own UserToken, dave who is in no organization)

Send a request as Envoy would, with the check CLI:
  npm start -- check --server 127.0.0.1:9001 --policy kube-api-proxy \\
      --path ${cluster}/api/v1/namespaces/team-a/secrets/cert-manager-webhook-ca --token-file ${dir}/alice-plugin.jwt
    → allowed: alice may read it and the plugin's definition names it; authorization is swapped for the plugin's ServiceAccount token
  … --path ${cluster}/api/v1/namespaces/team-a/secrets/db-password --token-file ${dir}/alice-plugin.jwt
    → allowed by portcullis (alice may), then refused by the API server (the plugin may not): user ∩ plugin
  … --path ${cluster}/api/v1/namespaces/team-b/secrets/cert-manager-webhook-ca --token-file ${dir}/alice-plugin.jwt
    → 403 user-sar-denied: the plugin may, alice may not
  … --path ${cluster}/version --token-file ${dir}/dave-plugin.jwt
    → 403 can-view-denied (OpenFGA)
Every PluginToken request prints its audit line below. Ctrl-C stops everything.
`);

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
