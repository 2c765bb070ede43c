/**
 * What `npm start` prints once the local stack is up, and the demo tokens it writes. Every command
 * is printed whole, as it runs when pasted into a shell at the repository's root (a `#` line above
 * it says what it should answer): test/e2e/dev-banner.test.ts pastes each one and compares.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { users } from "../test/e2e/fundament-world.ts";
import { ids, pluginToken, userToken } from "../test/support/tokens.ts";

export interface BannerInput {
  readonly root: string;
  /** The demo token files' directory. */
  readonly dir: string;
  readonly listen: { readonly grpc: string; readonly admin: string; readonly internal: string };
  readonly apiServerUrl: string;
  readonly openfgaUrl: string;
}

/** One command to paste, and what it should answer: `allowed`, or the denial's status and reason. */
export interface DemoRequest {
  readonly expect: "allowed" | { readonly status: number; readonly reason: string };
  readonly why: string;
  readonly path: string;
  readonly tokenFile: string;
}

/**
 * How long the demo tokens live: a day, so they outlast a working session with the local stack. A
 * PluginToken of authn-api lives 15 minutes (FUN-17 §3), so the stack accepts this lifetime
 * (startFundamentWorld's pluginTokenMaxLifetimeSeconds).
 */
export const DEMO_TOKEN_SECONDS = 86_400;

/** Writes the demo tokens (DEMO_TOKEN_SECONDS, signed with the demo secret in test/support/tokens.ts), mode 0600. */
export async function writeDemoTokens(dir: string, installationUid: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const iat = Math.floor(Date.now() / 1000);
  const day = { iat, exp: iat + DEMO_TOKEN_SECONDS };
  const files: Record<string, string> = {
    "alice-plugin.jwt": await pluginToken({ sub: users.alice, installation_id: installationUid }, day),
    "bob-plugin.jwt": await pluginToken({ sub: users.bob, installation_id: installationUid }, day),
    "alice-user.jwt": await userToken({ sub: users.alice }, day),
    "dave-plugin.jwt": await pluginToken({ sub: users.dave, installation_id: installationUid }, day),
  };
  for (const [name, token] of Object.entries(files)) writeFileSync(resolve(dir, name), token, { mode: 0o600 });
}

export function demoRequests(dir: string): DemoRequest[] {
  const cluster = `/clusters/${ids.cluster}`;
  return [
    {
      expect: "allowed",
      why: "alice may read it and the plugin's definition names it; authorization is swapped for the plugin's ServiceAccount token",
      path: `${cluster}/api/v1/namespaces/team-a/secrets/cert-manager-webhook-ca`,
      tokenFile: resolve(dir, "alice-plugin.jwt"),
    },
    {
      expect: "allowed",
      why: "by portcullis (alice may); the API server then refuses it (the plugin may not): user ∩ plugin",
      path: `${cluster}/api/v1/namespaces/team-a/secrets/db-password`,
      tokenFile: resolve(dir, "alice-plugin.jwt"),
    },
    {
      expect: { status: 403, reason: "user-sar-denied" },
      why: "the plugin may, alice may not",
      path: `${cluster}/api/v1/namespaces/team-b/secrets/cert-manager-webhook-ca`,
      tokenFile: resolve(dir, "alice-plugin.jwt"),
    },
    {
      expect: { status: 403, reason: "can-view-denied" },
      why: "dave is in no organization (OpenFGA)",
      path: `${cluster}/version`,
      tokenFile: resolve(dir, "dave-plugin.jwt"),
    },
  ];
}

/** A shell word: single-quoted unless it is plain. */
function word(text: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}

export function checkCommand(grpc: string, request: DemoRequest): string {
  return [
    `npm start -- check --server ${word(grpc)} --policy kube-api-proxy \\`,
    `    --path ${word(request.path)} \\`,
    `    --token-file ${word(request.tokenFile)}`,
  ].join("\n");
}

export function devStackBanner(input: BannerInput): string {
  const requests = demoRequests(input.dir).map((request) => {
    const outcome = request.expect === "allowed" ? "allowed" : `${request.expect.status} ${request.expect.reason}`;
    return `# → ${outcome}: ${request.why}\n${checkCommand(input.listen.grpc, request)}`;
  });
  return `
portcullis is up:  ext_authz gRPC ${input.listen.grpc} · admin http://${input.listen.admin}/metrics · internal ${input.listen.internal}
kube-apiserver ${input.apiServerUrl} · OpenFGA ${input.openfgaUrl}
demo tokens in ${input.dir}/ (alice and bob through the cert-manager plugin, alice's own UserToken, dave who is in no organization)

Send a request as Envoy would, with the check CLI: paste any of these in another terminal, in ${input.root}
(each exits 0 when allowed, 1 when denied):

${requests.join("\n\n")}

Every PluginToken request prints its audit line below. Ctrl-C stops everything.
`;
}
