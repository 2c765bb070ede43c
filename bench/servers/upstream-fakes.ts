/**
 * The memory scenario's dependencies, in their own process so their memory is not charged to
 * portcullis: the wire fakes of OpenFGA and kube-apiserver (test/support/wire-fakes) with N
 * PluginInstallations in the watched index and a ServiceAccount for each, answering every
 * can_view, SubjectAccessReview and TokenRequest with an allow. The installations are served as a
 * real API server serves them after `kubectl apply` and a controller's reconcile (managedFields,
 * the last-applied-configuration annotation: 2.2 KB of JSON each in the list, against
 * 0.43 KB with only the fields the gateway reads), unless `PORTCULLIS_BENCH_BARE_INSTALLATIONS=1`.
 *
 *   node bench/servers/upstream-fakes.ts --ready-file F --world W.json
 */
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { FakeKubeApi } from "../../test/support/wire-fakes/kube-apiserver.ts";
import { FakeOpenFga } from "../../test/support/wire-fakes/openfga.ts";
import { appliedAndReconciled } from "../../test/support/wire-fakes/realistic-objects.ts";
import type { BenchWorld } from "../workload.ts";
import { announceReady, serverArgs } from "./common.ts";

const args = serverArgs();
const world = JSON.parse(readFileSync(args.world, "utf8")) as BenchWorld;
const openfga = await new FakeOpenFga().start();
const kube = await new FakeKubeApi().start();
for (const i of world.installations) {
  const bare = { uid: i.uid, name: i.name, definitionHash: i.definitionHash };
  kube.put(process.env["PORTCULLIS_BENCH_BARE_INSTALLATIONS"] === "1" ? bare : { ...bare, extra: appliedAndReconciled(bare) });
  kube.serviceAccounts.add(`plugin-${i.name}/plugin-${i.name}`);
}
// The fakes keep every request for tests to inspect; here nobody reads them.
setInterval(() => {
  openfga.requests.length = 0;
  openfga.checks.length = 0;
  kube.requests.length = 0;
  kube.sarSpecs.length = 0;
  kube.issuedTokens.length = 0;
}, 1_000).unref();

announceReady(args.readyFile, {
  port: kube.port,
  openfgaUrl: openfga.url,
  storeId: openfga.storeId,
  kubeconfig: kube.writeKubeconfig(dirname(args.readyFile)),
});
process.on("SIGTERM", () => {
  void Promise.all([openfga.stop(), kube.stop()]).then(() => process.exit(0));
});
