/** Requests a real kube-apiserver has served for one resource, by verb, from its own /metrics. */
import { request } from "node:https";
import type { KubeApiserver } from "../../harness/index.ts";

export async function apiserverRequests(api: KubeApiserver, resource: string): Promise<{ LIST: number; WATCH: number }> {
  const text = await new Promise<string>((resolve, reject) => {
    const req = request(new URL("/metrics", api.url), { ca: api.caPem, headers: { authorization: `Bearer ${api.adminToken}` } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () => resolve(body));
    });
    req.on("error", reject);
    req.end();
  });
  const served = (verb: string) =>
    [...text.matchAll(/^apiserver_request_total\{([^}]*)\} (\d+)$/gm)]
      .filter(([, labels]) => labels!.includes(`resource="${resource}"`) && labels!.includes(`verb="${verb}"`))
      .reduce((sum, [, , n]) => sum + Number(n), 0);
  return { LIST: served("LIST"), WATCH: served("WATCH") };
}
