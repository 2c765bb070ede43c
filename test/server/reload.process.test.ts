/**
 * Reloading the configuration on SIGHUP, in the real process (`node src/cli/main.ts --config FILE`)
 * against wire fakes. The HS256 secret is a file, as a Kubernetes Secret mounts it: rotating it and
 * sending SIGHUP must change which tokens verify without a restart (same pid) and without a refused
 * check; another OpenFGA store is asked from the reload on; an invalid file or an unreadable secret
 * changes nothing; a changed port needs a restart; with workers, the primary passes SIGHUP to each.
 * On 671d19e SIGHUP had no handler and Node's default ended the process.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { authorizationClient } from "../../src/envoy/protos.ts";
import { type CheckResponse, envoyCheckRequest, summarize } from "../support/envoy.ts";
import {
  freeAddresses,
  type PortcullisAddresses,
  type PortcullisProcess,
  type ProcessWorld,
  spawnPortcullisFile,
  startProcessWorld,
} from "../support/portcullis-process.ts";
import { until } from "../support/wire-fakes/wired.ts";
import { ids, OLD_SECRET, pluginToken, SECRET } from "../support/tokens.ts";
import { healthStatus } from "../support/grpc-health.ts";

const PODS = `/clusters/${ids.cluster}/api/v1/namespaces/team-a/pods`;

let world: ProcessWorld;
const started: PortcullisProcess[] = [];

beforeAll(async () => {
  world = await startProcessWorld("reload");
});
afterEach(() => {
  for (const p of started) p.kill();
});
afterAll(async () => {
  for (const p of started) p.kill();
  await world.stop();
});

interface Files {
  readonly config: string;
  readonly secret: string;
  readonly otherSecret: string;
}

function writeConfig(files: Files, addresses: PortcullisAddresses, options: { secrets?: string; extra?: string } = {}): void {
  writeFileSync(
    files.config,
    `listen: { grpc: "${addresses.grpc}", admin: "${addresses.admin}", internal: "${addresses.internal}" }
logLevel: info
shutdown: { drainMs: 0 }
tokens:
  secrets: ${options.secrets ?? `[{ file: "${files.secret}" }]`}
openfga: { apiUrl: "${world.openfga.url}", storeId: "${world.openfga.storeId}", allowTtlMs: 1, denyTtlMs: 1 }
clusters: [{ id: "${ids.cluster}", kubeconfig: "${world.kubeconfig}" }]
${options.extra ?? ""}
`,
  );
}

async function start(name: string, extra = ""): Promise<{ p: PortcullisProcess; files: Files }> {
  const files = { config: join(world.dir, `${name}.yaml`), secret: join(world.dir, `${name}.secret`), otherSecret: join(world.dir, `${name}.other-secret`) };
  writeFileSync(files.secret, `${OLD_SECRET}\n`);
  writeFileSync(files.otherSecret, `${SECRET}\n`);
  const addresses = await freeAddresses();
  writeConfig(files, addresses, { extra });
  const p = spawnPortcullisFile(files.config, addresses);
  started.push(p);
  await until(async () => (await healthStatus(addresses.grpc)) === "SERVING", 20_000, "portcullis to start (SERVING)").catch((err: unknown) => {
    throw new Error(`${String(err)}; stderr: ${p.stderr()}`);
  });
  return { p, files };
}

/** "allowed", "denied <reason>", or "refused (gRPC n)" when no answer came. */
function asker(p: PortcullisProcess) {
  const client = authorizationClient(p.addresses.grpc);
  const ask = (token: string) =>
    client.check(envoyCheckRequest({ path: PODS, headers: { authorization: `Bearer ${token}` }, policy: "kube-api-proxy" })).then(
      (res) => {
        const s = summarize(res as CheckResponse);
        return s.allowed ? "allowed" : `denied ${String(s.reason)}`;
      },
      (err: { code?: number }) => `refused (gRPC ${String(err.code)})`,
    );
  return { ask, close: () => client.close() };
}

const logged = (p: PortcullisProcess, msg: string | RegExp) =>
  p.lines().filter((l) => (typeof msg === "string" ? l["msg"] === msg : msg.test(String(l["msg"]))));

it("a rotated secret file + SIGHUP: the new secret's tokens allowed, the old one's refused, same process, no check refused meanwhile", { timeout: 60_000 }, async () => {
  const { p, files } = await start("rotate");
  const { ask, close } = asker(p);
  const oldToken = await pluginToken({}, { secret: OLD_SECRET });
  const newToken = await pluginToken({}, { secret: SECRET });
  expect([await ask(oldToken), await ask(newToken)]).toEqual(["allowed", "denied invalid-token"]);
  const pid = p.child.pid;

  // Checks keep arriving through the reload: none may be refused or fail otherwise than by the secret in force.
  let sending = true;
  const during: string[] = [];
  const load = (async () => {
    while (sending) {
      during.push(await ask(oldToken), await ask(newToken));
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  writeFileSync(files.secret, `${SECRET}\n`);
  p.child.kill("SIGHUP");
  await until(async () => (await ask(newToken)) === "allowed", 10_000, "the new secret to be in force");
  sending = false;
  await load;

  expect([await ask(oldToken), await ask(newToken)]).toEqual(["denied invalid-token", "allowed"]);
  expect(p.child.pid).toBe(pid);
  expect(p.child.exitCode).toBeNull();
  expect(during.length).toBeGreaterThan(0);
  expect(new Set(during.filter((a) => a !== "allowed" && a !== "denied invalid-token"))).toEqual(new Set());
  await until(() => logged(p, "configuration reloaded").length === 1, 5_000, "the reload's log line");
  const metrics = await fetch(`http://${p.addresses.admin}/metrics`).then((r) => r.text());
  expect(metrics).toMatch(/portcullis_config_reloads_total\{outcome="applied"\} 1/);

  // Both secrets listed (the rotation's overlap): both tokens verify.
  writeConfig(files, p.addresses, { secrets: `[{ file: "${files.secret}" }, { file: "${files.otherSecret}" }]` });
  writeFileSync(files.otherSecret, `${OLD_SECRET}\n`);
  p.child.kill("SIGHUP");
  await until(async () => (await ask(oldToken)) === "allowed", 10_000, "both secrets to be in force");
  expect(await ask(newToken)).toBe("allowed");
  expect(p.child.pid).toBe(pid);
  close();
  for (const secret of [SECRET, OLD_SECRET, oldToken, newToken]) {
    expect(p.stdout()).not.toContain(secret);
    expect(p.stderr()).not.toContain(secret);
  }
});

it("an invalid file or an unreadable secret + SIGHUP: logged naming the field, the old configuration stays, the process serves on", { timeout: 60_000 }, async () => {
  const { p, files } = await start("invalid");
  const { ask, close } = asker(p);
  const token = await pluginToken({}, { secret: OLD_SECRET });
  const pid = p.child.pid;
  const cases = [
    { name: "a value of the wrong type", write: () => writeConfig(files, p.addresses, { extra: "check: { timeoutMs: soon }" }), field: "check.timeoutMs" },
    { name: "not YAML", write: () => writeFileSync(files.config, "listen: [unclosed\n"), field: "not valid YAML" },
    { name: "an empty secret file", write: () => writeFileSync(files.secret, ""), field: "tokens.secrets[0]" },
    { name: "a secret file gone", write: () => writeConfig(files, p.addresses, { secrets: `[{ file: "${files.secret}.gone" }]` }), field: "tokens.secrets[0]" },
  ];
  for (const [i, c] of cases.entries()) {
    writeConfig(files, p.addresses);
    writeFileSync(files.secret, `${OLD_SECRET}\n`);
    c.write();
    p.child.kill("SIGHUP");
    await until(() => logged(p, /^configuration reload refused/).length === i + 1, 10_000, `the refusal of ${c.name}`);
    const refusal = logged(p, /^configuration reload refused/)[i]!;
    expect(String(refusal["reason"]), c.name).toContain(c.field);
    expect(await ask(token), c.name).toBe("allowed");
    expect(p.child.pid).toBe(pid);
    expect(p.child.exitCode).toBeNull();
  }
  expect(logged(p, "configuration reloaded")).toHaveLength(0);
  const metrics = await fetch(`http://${p.addresses.admin}/metrics`).then((r) => r.text());
  expect(metrics).toMatch(/portcullis_config_reloads_total\{outcome="invalid"\} 4/);
  close();
  expect(p.stdout()).not.toContain(OLD_SECRET);
});

it("a changed port + SIGHUP: 'restart required for listen.grpc' logged, the old port still serves, the new one is not bound", { timeout: 60_000 }, async () => {
  const { p, files } = await start("port");
  const { ask, close } = asker(p);
  const token = await pluginToken({}, { secret: OLD_SECRET });
  const moved = await freeAddresses();
  writeConfig(files, { ...p.addresses, grpc: moved.grpc });
  p.child.kill("SIGHUP");
  await until(() => logged(p, "configuration reloaded").length === 1, 10_000, "the reload");
  expect(logged(p, "restart required for listen.grpc: not applied").map((l) => l["field"])).toEqual(["listen.grpc"]);
  expect(await ask(token)).toBe("allowed");
  // healthStatus reports a connection that no server answers as gRPC UNAVAILABLE (14).
  expect(await healthStatus(moved.grpc).catch(() => "error 14")).toBe("error 14");
  expect(p.child.exitCode).toBeNull();
  close();
});

it("another OpenFGA store + SIGHUP: checks go to the new store (one the fake does not hold: 503), and back", { timeout: 60_000 }, async () => {
  const { p, files } = await start("store");
  const { ask, close } = asker(p);
  const token = await pluginToken({}, { secret: OLD_SECRET });
  const moveStore = async (storeId: string, reloads: number) => {
    writeFileSync(files.config, readFileSync(files.config, "utf8").replace(/storeId: "[0-9A-Z]+"/, `storeId: "${storeId}"`));
    p.child.kill("SIGHUP");
    await until(() => logged(p, "configuration reloaded").length === reloads, 10_000, `the reload to store ${storeId}`);
  };
  expect(await ask(token)).toBe("allowed");
  await moveStore("01HVMMBCMGZNT3SED4Z17ECXCB", 1);
  expect(logged(p, "configuration reloaded")[0]!["applied"]).toEqual(["openfga.storeId"]);
  expect(await ask(token)).toBe("denied dependency-unavailable");
  await moveStore(world.openfga.storeId, 2);
  expect(await ask(token)).toBe("allowed");
  close();
});

it("another OpenFGA store + SIGHUP: the replaced gate stops reading the old store's changes, the new one reads the new store's", { timeout: 60_000 }, async () => {
  const { p, files } = await start("store-changes");
  const otherStore = "01HVMMBCMGZNT3SED4Z17ECXCD";
  const changesOf = (storeId: string) => world.openfga.requests.filter((r) => r.url.startsWith(`/stores/${storeId}/changes`)).length;
  await until(() => changesOf(world.openfga.storeId) > 0, 10_000, "the first store's changes to be read");
  writeFileSync(files.config, readFileSync(files.config, "utf8").replace(/storeId: "[0-9A-Z]+"/, `storeId: "${otherStore}"`));
  p.child.kill("SIGHUP");
  await until(() => logged(p, "configuration reloaded").length === 1, 10_000, "the reload");
  await until(() => changesOf(otherStore) > 0, 10_000, "the new store's changes to be read");
  // A poll in flight at the reload may still land; none starts after it (openfga.changesPollMs is 250 ms).
  await new Promise((r) => setTimeout(r, 500));
  const old = changesOf(world.openfga.storeId);
  await new Promise((r) => setTimeout(r, 1_000));
  expect(changesOf(world.openfga.storeId)).toBe(old);
  expect(changesOf(otherStore)).toBeGreaterThan(1);
});

it("workers: 2 — SIGHUP to the primary reaches every worker: each verifies with the rotated secret", { timeout: 60_000 }, async () => {
  const { p, files } = await start("workers", "workers: 2");
  const { ask, close } = asker(p);
  const newToken = await pluginToken({}, { secret: SECRET });
  writeFileSync(files.secret, `${SECRET}\n`);
  p.child.kill("SIGHUP");
  await until(() => logged(p, "configuration reloaded").length === 2, 10_000, "both workers to reload");
  // Connections are handed to the workers round-robin: fresh clients reach both.
  const answers = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const other = asker(p);
      const answer = await other.ask(newToken);
      other.close();
      return answer;
    }),
  );
  expect(new Set(answers)).toEqual(new Set(["allowed"]));
  expect(p.child.exitCode).toBeNull();
  close();
});
