/**
 * The cluster registry's pure half: which Secret registers which cluster (table of valid and
 * adversarial Secrets), and what each arrival, change, deletion and fresh list changes in the
 * fleet (RegistryView). The watch against a real kube-apiserver is in cluster-registry.kube.test.ts.
 */
import { afterAll, describe, expect, it } from "vitest";
import { type FleetChange, type InvalidSecret, registeredClusterOf, RegistryView } from "../../src/kube-watch/cluster-registry.ts";
import { Clusters, connectCluster } from "../../src/kube-fleet/clusters.ts";
import { TestPki } from "../support/certificates.ts";

const pki = new TestPki();
const ca = pki.ca("registry-ca");
const client = pki.leaf("registry-client", "registry-ca", "client");
const other = pki.leaf("registry-other", "registry-ca", "client");

afterAll(() => pki.remove());

const ID = "0b7c9a4e-6a37-4d2b-9e4f-0c1a2b3c4d5e";
const ID2 = "5f0e1d2c-3b4a-4968-8776-655443322110";
const SERVER = "https://10.0.0.1:6443";
const TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwb3J0Y3VsbGlzIn0.c2lnbmF0dXJl";

/** A Secret's `data`: each value base64, as the API server returns it. */
function data(fields: Record<string, string | Buffer>): Record<string, string> {
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, Buffer.from(v).toString("base64")]));
}

const tokenCluster = { clusterId: ID, server: SERVER, token: TOKEN };

describe("registeredClusterOf: the cluster a Secret registers", () => {
  const valid: Array<{ name: string; input: Record<string, string>; expected: object }> = [
    { name: "a token, no CA (the system's CAs)", input: data(tokenCluster), expected: { id: ID, server: SERVER, credential: { token: TOKEN } } },
    {
      name: "a token with the trailing newline of --from-file",
      input: data({ ...tokenCluster, clusterId: `${ID}\n`, server: `${SERVER}\n`, token: `${TOKEN}\n` }),
      expected: { id: ID, server: SERVER, credential: { token: TOKEN } },
    },
    {
      name: "a client certificate, a CA and a TLS server name",
      input: data({ clusterId: ID, server: "https://api.prod-1.example.com", "ca.crt": ca.cert, "tls.crt": client.cert, "tls.key": client.key, "tls-server-name": "kubernetes.default.svc" }),
      expected: {
        id: ID,
        server: "https://api.prod-1.example.com",
        caPem: ca.cert.toString(),
        tlsServerName: "kubernetes.default.svc",
        credential: { certPem: client.cert.toString(), keyPem: client.key.toString() },
      },
    },
    {
      name: "a server behind a path prefix (a proxy in front of the API server)",
      input: data({ ...tokenCluster, server: "https://rancher.example.com/k8s/clusters/c-m-1" }),
      expected: { id: ID, server: "https://rancher.example.com/k8s/clusters/c-m-1", credential: { token: TOKEN } },
    },
    {
      name: "a service domain (plugin-proxy's upstreams), with --from-file's newline, lower-cased",
      input: data({ ...tokenCluster, "service-domain": "Svc.Prod-1.Mesh.example\n" }),
      expected: { id: ID, server: SERVER, serviceDomain: "svc.prod-1.mesh.example", credential: { token: TOKEN } },
    },
    {
      name: "a CA bundle of two certificates",
      input: data({ ...tokenCluster, "ca.crt": Buffer.concat([ca.cert, client.cert]) }),
      expected: { id: ID, server: SERVER, caPem: Buffer.concat([ca.cert, client.cert]).toString(), credential: { token: TOKEN } },
    },
  ];
  it.each(valid)("$name", ({ input, expected }) => {
    expect(registeredClusterOf(input)).toEqual({ cluster: expected });
  });

  const invalid: Array<{ name: string; input: Record<string, string> | undefined; expected: InvalidSecret }> = [
    // The data itself
    { name: "no data at all", input: undefined, expected: "missing-cluster-id" },
    { name: "a value that is not base64", input: { ...data(tokenCluster), token: "not base64!" }, expected: "undecodable-data" },
    { name: "base64 without its padding", input: { ...data(tokenCluster), clusterId: Buffer.from(ID).toString("base64").replace(/=+$/, "") + "A" }, expected: "undecodable-data" },
    { name: "a value that is not UTF-8", input: { ...data(tokenCluster), server: Buffer.from([0x68, 0xff, 0xfe]).toString("base64") }, expected: "undecodable-data" },
    // clusterId
    { name: "no clusterId", input: data({ server: SERVER, token: TOKEN }), expected: "missing-cluster-id" },
    { name: "an empty clusterId", input: data({ ...tokenCluster, clusterId: "" }), expected: "missing-cluster-id" },
    { name: "an upper-case UUID (ids are lower-case)", input: data({ ...tokenCluster, clusterId: ID.toUpperCase() }), expected: "bad-cluster-id" },
    { name: "a UUID followed by a path", input: data({ ...tokenCluster, clusterId: `${ID}/../x` }), expected: "bad-cluster-id" },
    { name: "a UUID with a second line", input: data({ ...tokenCluster, clusterId: `${ID}\nx` }), expected: "missing-cluster-id" },
    { name: "a name instead of a UUID", input: data({ ...tokenCluster, clusterId: "prod-1" }), expected: "bad-cluster-id" },
    // server
    { name: "no server", input: data({ clusterId: ID, token: TOKEN }), expected: "missing-server" },
    { name: "a plain-http server", input: data({ ...tokenCluster, server: "http://10.0.0.1:6443" }), expected: "bad-server" },
    { name: "a server that is no URL", input: data({ ...tokenCluster, server: "10.0.0.1:6443" }), expected: "bad-server" },
    { name: "a server with credentials in the URL", input: data({ ...tokenCluster, server: "https://admin:pw@10.0.0.1:6443" }), expected: "bad-server" },
    { name: "a server with a query", input: data({ ...tokenCluster, server: `${SERVER}/?x=1` }), expected: "bad-server" },
    { name: "a server with a fragment", input: data({ ...tokenCluster, server: `${SERVER}/#x` }), expected: "bad-server" },
    // ca.crt
    { name: "a CA that is not PEM", input: data({ ...tokenCluster, "ca.crt": "not a certificate" }), expected: "bad-ca" },
    { name: "an empty CA", input: data({ ...tokenCluster, "ca.crt": "" }), expected: "bad-ca" },
    {
      name: "a PEM CA whose body is corrupt",
      input: data({ ...tokenCluster, "ca.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }),
      expected: "bad-ca",
    },
    { name: "a private key as the CA", input: data({ ...tokenCluster, "ca.crt": client.key }), expected: "bad-ca" },
    // The credential
    { name: "no credential", input: data({ clusterId: ID, server: SERVER }), expected: "no-credential" },
    { name: "a token and a client certificate", input: data({ ...tokenCluster, "tls.crt": client.cert, "tls.key": client.key }), expected: "two-credentials" },
    { name: "an empty token", input: data({ ...tokenCluster, token: "" }), expected: "bad-token" },
    { name: "a token with a space", input: data({ ...tokenCluster, token: "Bearer abc" }), expected: "bad-token" },
    { name: "a token smuggling a header (CR LF)", input: data({ ...tokenCluster, token: "abc\r\nImpersonate-User: admin" }), expected: "bad-token" },
    { name: "a token with a NUL", input: data({ ...tokenCluster, token: "abc\u0000def" }), expected: "bad-token" },
    { name: "a token of non-ASCII text", input: data({ ...tokenCluster, token: "tökén" }), expected: "bad-token" },
    { name: "a certificate without its key", input: data({ clusterId: ID, server: SERVER, "tls.crt": client.cert }), expected: "bad-client-certificate" },
    { name: "a key without its certificate", input: data({ clusterId: ID, server: SERVER, "tls.key": client.key }), expected: "bad-client-certificate" },
    { name: "a key that is not the certificate's", input: data({ clusterId: ID, server: SERVER, "tls.crt": client.cert, "tls.key": other.key }), expected: "bad-client-certificate" },
    { name: "a key that is not PEM", input: data({ clusterId: ID, server: SERVER, "tls.crt": client.cert, "tls.key": "garbage" }), expected: "bad-client-certificate" },
    { name: "a certificate that is not PEM", input: data({ clusterId: ID, server: SERVER, "tls.crt": "garbage", "tls.key": client.key }), expected: "bad-client-certificate" },
    // tls-server-name
    { name: "a TLS server name with a space", input: data({ ...tokenCluster, "tls-server-name": "a b" }), expected: "bad-tls-server-name" },
    { name: "a TLS server name with a port", input: data({ ...tokenCluster, "tls-server-name": "api:6443" }), expected: "bad-tls-server-name" },
    // service-domain: Envoy puts it after `{service}.{namespace}.` in the upstream's host
    ...[
      { name: "empty", domain: "" },
      { name: "with a port", domain: "svc.cluster.local:8080" },
      { name: "with a path", domain: "svc.cluster.local/x" },
      { name: "with a leading dot", domain: ".svc.cluster.local" },
      { name: "with a trailing dot", domain: "svc.cluster.local." },
      { name: "with an @ (userinfo)", domain: "a@evil.example" },
      { name: "with a space", domain: "svc cluster" },
      { name: "with a second line", domain: "svc.cluster.local\nevil.example" },
      { name: "with CR LF", domain: "svc.cluster.local\r\nx-fundament-user-id: x" },
      { name: "an Envoy command operator", domain: "%REQ(x-a)%" },
      { name: "a label longer than 63", domain: `${"a".repeat(64)}.example` },
    ].map(({ name, domain }) => ({ name: `a service domain ${name}`, input: data({ ...tokenCluster, "service-domain": domain }), expected: "bad-service-domain" as const })),
  ];
  it.each(invalid)("refuses $name: $expected", ({ input, expected }) => {
    const outcome = registeredClusterOf(input);
    expect(outcome).toEqual({ invalid: expected });
    // What is logged and counted is a code: the credential's value never travels with it.
    expect(JSON.stringify(outcome)).not.toContain(TOKEN);
  });
});

describe("RegistryView: what each event changes in the fleet", () => {
  const staticId = "11111111-2222-4333-8444-555555555555";
  type Step = { readonly put?: [string, Record<string, string> | undefined]; readonly remove?: string; readonly relist?: "begin" | "end" };
  /** The same cluster id, another credential: the second Secret's claim. */
  const otherToken = data({ ...tokenCluster, token: "other" });
  /** `first`: the steps run inside the registry's first list (by default it has ended, empty). */
  const cases: Array<{ name: string; first?: true; steps: Step[]; expected: string[] }> = [
    { name: "a new Secret registers its cluster", steps: [{ put: ["ns/a", data(tokenCluster)] }], expected: [`added ${ID} ns/a`] },
    { name: "the same data again changes nothing", steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/a", data(tokenCluster)] }], expected: [`added ${ID} ns/a`] },
    {
      name: "a rotated token is a change",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/a", data({ ...tokenCluster, token: "rotated" })] }],
      expected: [`added ${ID} ns/a`, `changed ${ID} ns/a`],
    },
    {
      name: "another CA is a change",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/a", data({ ...tokenCluster, "ca.crt": ca.cert })] }],
      expected: [`added ${ID} ns/a`, `changed ${ID} ns/a`],
    },
    {
      name: "a Secret that now names another cluster id removes the old one first",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/a", data({ ...tokenCluster, clusterId: ID2 })] }],
      expected: [`added ${ID} ns/a`, `removed ${ID} ns/a`, `added ${ID2} ns/a`],
    },
    {
      name: "a Secret that becomes invalid unregisters its cluster",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/a", data({ ...tokenCluster, server: "http://x" })] }],
      expected: [`added ${ID} ns/a`, `removed ${ID} ns/a`, "invalid bad-server"],
    },
    { name: "an invalid Secret registers nothing", steps: [{ put: ["ns/a", data({ clusterId: ID, server: SERVER })] }], expected: ["invalid no-credential"] },
    { name: "a deleted Secret unregisters its cluster", steps: [{ put: ["ns/a", data(tokenCluster)] }, { remove: "ns/a" }], expected: [`added ${ID} ns/a`, `removed ${ID} ns/a`] },
    { name: "deleting a Secret that registered nothing changes nothing", steps: [{ put: ["ns/a", data({ clusterId: "x" })] }, { remove: "ns/a" }], expected: ["invalid bad-cluster-id"] },
    { name: "a static cluster's id is refused", steps: [{ put: ["ns/a", data({ ...tokenCluster, clusterId: staticId })] }], expected: ["invalid static-cluster-id"] },
    {
      name: "two Secrets naming a static id are no conflict: both refused, the static cluster stays",
      steps: [{ put: ["ns/a", data({ ...tokenCluster, clusterId: staticId })] }, { put: ["ns/b", data({ ...tokenCluster, clusterId: staticId })] }],
      expected: ["invalid static-cluster-id", "invalid static-cluster-id"],
    },
    // Issue 42: a second claim takes the id out of service everywhere; it never takes it over.
    {
      name: "a second Secret claiming a registered id: served by neither; deleting the second restores the first",
      steps: [{ put: ["ns/cluster-prod-1", data(tokenCluster)] }, { put: ["ns/aaa-cluster-prod-1", otherToken] }, { remove: "ns/aaa-cluster-prod-1" }],
      expected: [
        `added ${ID} ns/cluster-prod-1`,
        `conflict ${ID} ns/aaa-cluster-prod-1,ns/cluster-prod-1`,
        `removed ${ID} ns/cluster-prod-1`,
        `conflict-resolved ${ID} ns/cluster-prod-1`,
        `added ${ID} ns/cluster-prod-1`,
      ],
    },
    {
      name: "deleting the first of two claimants leaves the id to the second",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", otherToken] }, { remove: "ns/a" }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`, `conflict-resolved ${ID} ns/b`, `added ${ID} ns/b`],
    },
    {
      name: "the same data in two Secrets is a conflict too",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", data(tokenCluster)] }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`],
    },
    {
      name: "a claimant changed to name another id releases its old claim: both ids served",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", otherToken] }, { put: ["ns/b", data({ ...tokenCluster, clusterId: ID2 })] }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`, `conflict-resolved ${ID} ns/a`, `added ${ID} ns/a`, `added ${ID2} ns/b`],
    },
    {
      name: "a claimant that becomes invalid releases its claim",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", otherToken] }, { put: ["ns/b", data({ ...tokenCluster, server: "http://x" })] }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`, `conflict-resolved ${ID} ns/a`, `added ${ID} ns/a`, "invalid bad-server"],
    },
    {
      name: "a third claimant, then two leaving: each change of the claimants is reported, the id served once one is left",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", otherToken] }, { put: ["ns/c", otherToken] }, { remove: "ns/c" }, { remove: "ns/b" }],
      expected: [
        `added ${ID} ns/a`,
        `conflict ${ID} ns/a,ns/b`,
        `removed ${ID} ns/a`,
        `conflict ${ID} ns/a,ns/b,ns/c`,
        `conflict ${ID} ns/a,ns/b`,
        `conflict-resolved ${ID} ns/a`,
        `added ${ID} ns/a`,
      ],
    },
    {
      name: "a conflicted id whose claimant rotates its token: nothing served, nothing reported again",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", otherToken] }, { put: ["ns/a", data({ ...tokenCluster, token: "rotated" })] }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`],
    },
    // The first list is applied when it ends, whatever order it came in.
    { name: "nothing is registered before the first list ends", first: true, steps: [{ put: ["ns/a", data(tokenCluster)] }], expected: [] },
    {
      name: "the first list registers what it holds when it ends",
      first: true,
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { put: ["ns/b", data({ ...tokenCluster, clusterId: ID2 })] }, { relist: "end" }],
      expected: [`added ${ID} ns/a`, `added ${ID2} ns/b`],
    },
    {
      name: "a first list holding two claimants of an id (the attacker's sorted first) serves neither",
      first: true,
      steps: [{ put: ["ns/aaa-cluster-prod-1", otherToken] }, { put: ["ns/cluster-prod-1", data(tokenCluster)] }, { put: ["ns/c", data({ ...tokenCluster, clusterId: ID2 })] }, { relist: "end" }],
      expected: [`conflict ${ID} ns/aaa-cluster-prod-1,ns/cluster-prod-1`, `added ${ID2} ns/c`],
    },
    // After the registry's watch broke: the clusters stay until a fresh list has ended.
    {
      name: "a fresh list keeps what it names unchanged, and removes what it does not name only when it ends",
      steps: [
        { put: ["ns/a", data(tokenCluster)] },
        { put: ["ns/b", data({ ...tokenCluster, clusterId: ID2 })] },
        { relist: "begin" },
        { put: ["ns/a", data(tokenCluster)] },
        { relist: "end" },
      ],
      expected: [`added ${ID} ns/a`, `added ${ID2} ns/b`, `removed ${ID2} ns/b`],
    },
    {
      name: "a fresh list that names a changed Secret changes it when it ends",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { relist: "begin" }, { put: ["ns/a", data({ ...tokenCluster, token: "rotated" })] }, { relist: "end" }],
      expected: [`added ${ID} ns/a`, `changed ${ID} ns/a`],
    },
    {
      name: "a fresh list naming a second claimant of a served id takes it out at once, not when the list ends",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { relist: "begin" }, { put: ["ns/aaa", otherToken] }, { put: ["ns/a", data(tokenCluster)] }, { relist: "end" }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/aaa`, `removed ${ID} ns/a`],
    },
    {
      name: "a fresh list: the id of a Secret deleted during the outage goes to the Secret claiming it now when the list ends",
      steps: [{ put: ["ns/a", data(tokenCluster)] }, { relist: "begin" }, { put: ["ns/b", otherToken] }, { relist: "end" }],
      expected: [`added ${ID} ns/a`, `conflict ${ID} ns/a,ns/b`, `removed ${ID} ns/a`, `conflict-resolved ${ID} ns/b`, `added ${ID} ns/b`],
    },
    { name: "a sync that follows no fresh list removes nothing", steps: [{ put: ["ns/a", data(tokenCluster)] }, { relist: "end" }], expected: [`added ${ID} ns/a`] },
  ];
  it.each(cases)("$name", ({ first, steps, expected }) => {
    const view = new RegistryView((id) => id === staticId);
    if (first === undefined) expect(view.endRelist()).toEqual([]);
    const changes = steps.flatMap((step) => {
      if (step.put !== undefined) return view.put(...step.put);
      if (step.remove !== undefined) return view.remove(step.remove);
      if (step.relist === "begin") {
        view.beginRelist();
        return [];
      }
      return view.endRelist();
    });
    expect(changes.map(show)).toEqual(expected);
  });

  it("reports the conflicts standing now, and what each is served with (nothing)", () => {
    const view = new RegistryView(() => false);
    view.put("ns/b", otherToken);
    view.put("ns/a", data(tokenCluster));
    view.put("ns/c", data({ ...tokenCluster, clusterId: ID2 }));
    view.endRelist();
    expect(view.conflicts()).toEqual([{ clusterId: ID, secrets: ["ns/a", "ns/b"] }]);
    expect(view.size).toBe(1);
    view.remove("ns/b");
    expect(view.conflicts()).toEqual([]);
    expect(view.size).toBe(2);
  });
});

function show(change: FleetChange): string {
  switch (change.event) {
    case "invalid":
      return `invalid ${change.problem}`;
    case "conflict":
    case "conflict-resolved":
      return `${change.event} ${change.clusterId} ${change.secrets.join(",")}`;
    case "removed":
      return `removed ${change.clusterId} ${change.secret}`;
    default:
      return `${change.event} ${change.cluster.id} ${change.secret}`;
  }
}

describe("a registered cluster's service domain, as plugin-proxy reads it (Clusters.serviceDomainOf)", () => {
  it("is the Secret's for a registered cluster, follows a re-registration, and is never a static cluster's", async () => {
    const registered = registeredClusterOf(data({ ...tokenCluster, "service-domain": "svc.prod-1.example" }));
    if (!("cluster" in registered)) throw new Error("not registered");
    const staticId = "5e5e5e5e-0000-4000-8000-00000000005e";
    const staticCluster = { id: staticId, envoyCluster: `kube-api-${staticId}`, serviceDomain: "never.read", kubeConfig: undefined as never, callOptions: () => ({}) };
    const clusters = new Clusters([staticCluster]);
    const first = connectCluster(registered.cluster);
    clusters.put(first);
    expect(clusters.serviceDomainOf(ID)).toBe("svc.prod-1.example");
    expect(clusters.serviceDomainOf(staticId)).toBeUndefined();
    const without = registeredClusterOf(data(tokenCluster));
    if (!("cluster" in without)) throw new Error("not registered");
    clusters.put(connectCluster(without.cluster));
    expect(clusters.serviceDomainOf(ID)).toBeUndefined();
    clusters.remove(ID);
    expect(clusters.serviceDomainOf(ID)).toBeUndefined();
    await clusters.close();
    await first.pool.destroy();
  });
});
