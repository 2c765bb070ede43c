/**
 * Child process for the freeze replay: fires SubjectAccessReviews at one API server the way
 * portcullis does (withDeadline's 300 ms abort through a cluster's callOptions) and answers the
 * parent's heartbeat. A native loop on the main thread shows as heartbeats that stop.
 *
 * It reports the storm's counts, then whether one more review after the restart is answered.
 *
 * argv: <kubeconfig> <pool|h2-default> <duration ms>
 * - pool: the cluster from Clusters.load (the fix);
 * - h2-default: the connection setup of the old clusters.ts, an undici Agent with its defaults.
 */
import { AuthorizationV1Api, KubeConfig, Observable, type RequestContext, type ResponseContext } from "@kubernetes/client-node";
import { Agent } from "undici";
import { type Cluster, Clusters } from "../../../src/kube-fleet/clusters.ts";
import { DependencyUnavailable } from "../../../src/dependencies/unavailable.ts";
import { withDeadline } from "../../../src/dependencies/deadline.ts";

const [kubeconfig, mode, durationArg] = process.argv.slice(2) as [string, "pool" | "h2-default", string];
const counts = { fired: 0, answered: 0, unavailable: 0, other: 0 };

async function h2DefaultCluster(): Promise<Cluster> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfig);
  const tls: Record<string, unknown> = {};
  await kubeConfig.applyToHTTPSOptions(tls);
  const pool = new Agent({ connect: { ca: tls["ca"] as Buffer, keepAlive: true, keepAliveInitialDelay: 30_000 } });
  return {
    id: "a",
    envoyCluster: "kube-api-a",
    kubeConfig,
    callOptions: (signal) => ({
      middleware: [
        {
          pre: (context: RequestContext) => {
            context.setDispatcher(pool);
            context.setSignal(signal);
            return new Observable(Promise.resolve(context));
          },
          post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
        },
      ],
      middlewareMergeStrategy: "append",
    }),
  };
}

const clusters = mode === "pool" ? await Clusters.load([{ id: "a", kubeconfig }]) : new Clusters([await h2DefaultCluster()]);
const cluster = clusters.get("a") as Cluster;
const api = cluster.kubeConfig.makeApiClient(AuthorizationV1Api);

async function review(n: number, deadlineMs: number): Promise<boolean> {
  const body = {
    apiVersion: "authorization.k8s.io/v1",
    kind: "SubjectAccessReview",
    spec: { user: `system:serviceaccount:users:u-${n}`, resourceAttributes: { verb: "get", group: "", version: "v1", resource: "pods", namespace: "default" } },
  };
  await withDeadline("kube-subjectaccessreview", deadlineMs, (signal) => api.createSubjectAccessReview({ body }, cluster.callOptions(signal)));
  return true;
}

async function stormReview(n: number): Promise<void> {
  counts.fired++;
  try {
    await review(n, 300);
    counts.answered++;
  } catch (err) {
    if (err instanceof DependencyUnavailable) counts.unavailable++;
    else counts.other++;
  }
}

process.on("message", (message) => {
  if (message === "ping") process.send?.({ pong: counts });
});

process.send?.({ ready: true });
let n = 0;
const storm = setInterval(() => {
  for (let i = 0; i < 10; i++) void stormReview(n++);
}, 20);
setTimeout(() => {
  clearInterval(storm);
  // Every storm review ends by its 300 ms deadline at the latest; then one review, with time to
  // spare on a busy machine, shows the API server reachable again through the same pool.
  setTimeout(() => {
    void review(n, 10_000)
      .catch(() => false)
      .then((recovered) => {
        process.send?.({ done: { ...counts, recovered } });
        void clusters.close();
      });
  }, 1_000);
}, Number(durationArg));
