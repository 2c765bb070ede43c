/**
 * Scenario 3's allow (a warm PluginToken check on kube-api-proxy) as portcullis answers it: the
 * caller's credential swapped for a ~1 KB ServiceAccount token and the upstream cluster named, built
 * by portcullis's own mutations() and toCheckResponse() and encoded by the server's serializer. The
 * same-bytes no-op (bench/noop-server.ts --scenario same-bytes) answers these bytes, encoded once;
 * test/bench/same-bytes-noop.test.ts holds them to what the real check answers.
 */
import { allow } from "../src/authz/decision.ts";
import { KUBE_API_CLUSTER_HEADER, kubeApiEnvoyCluster } from "../src/envoy/kube-api-upstream.ts";
import { toCheckResponse } from "../src/authz/check-response.ts";
import type { CheckResponseMessage } from "../src/envoy/check-response-message.ts";
import { checkService } from "../src/envoy/protos.ts";
import { bearerCredential, mutations, type SafeHeaderValue, safeHeaderValue } from "../src/headers/mutations.ts";
import { BENCH_CLUSTER } from "./workload.ts";

/** What a warm TokenRequest hands out: a ServiceAccount token of realistic size (kube-apiserver's are ~1 KB). */
export function constantServiceAccountToken(): SafeHeaderValue {
  const seg = (n: number) => "x".repeat(n);
  // Checked once, as the real port checks a token when it caches it.
  return safeHeaderValue(`eyJhbGciOiJSUzI1NiIsImtpZCI6ImJlbmNoIn0.${seg(700)}.${seg(342)}`)!;
}

/** The CheckResponse of scenario 3's allow: kube-api-proxy's credential swap (its requests carry no cookie, no WebSocket bearer, no x-fundament- header). */
export function scenario3Allow(): CheckResponseMessage {
  const swap = mutations({}, {
    set: { [KUBE_API_CLUSTER_HEADER]: kubeApiEnvoyCluster(BENCH_CLUSTER) },
    remove: ["cookie"],
    checked: { authorization: bearerCredential(constantServiceAccountToken()) },
  });
  return toCheckResponse(allow(swap), { bodyShape: "kube-status", retryAfterSeconds: 1 });
}

/** scenario3Allow() as the server's serializer writes it (protos.ts checkService). */
export function encodedScenario3Allow(): Buffer {
  return checkService()["Check"]!.responseSerialize(scenario3Allow());
}
