import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { decodeBootstrap, envoyRoot } from "../../src/envoy/bootstrap.ts";

const T = "type.googleapis.com/";
const HCM_PATH = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";

// A small but realistic bootstrap: listener -> HCM -> ext_authz (gRPC) + router; one static cluster.
function validBootstrap() {
  return {
    node: { id: "portcullis-test", cluster: "test", metadata: { team: "fundament", tags: ["a", 1, true, null] } },
    static_resources: {
      listeners: [
        {
          name: "ingress",
          address: { socket_address: { address: "0.0.0.0", port_value: 8080 } },
          filter_chains: [
            {
              filters: [
                {
                  name: "envoy.filters.network.http_connection_manager",
                  typed_config: {
                    "@type": `${T}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`,
                    stat_prefix: "ingress",
                    route_config: {
                      name: "local",
                      virtual_hosts: [
                        {
                          name: "all",
                          domains: ["*"],
                          routes: [{ match: { prefix: "/" }, route: { cluster: "portcullis", timeout: "5s" } }],
                        },
                      ],
                    },
                    http_filters: [
                      {
                        name: "envoy.filters.http.ext_authz",
                        typed_config: {
                          "@type": `${T}envoy.extensions.filters.http.ext_authz.v3.ExtAuthz`,
                          transport_api_version: "V3",
                          failure_mode_allow: false,
                          grpc_service: { envoy_grpc: { cluster_name: "portcullis" }, timeout: "0.25s" },
                        },
                      },
                      {
                        name: "envoy.filters.http.router",
                        typed_config: { "@type": `${T}envoy.extensions.filters.http.router.v3.Router` },
                      },
                    ],
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [
        {
          name: "portcullis",
          type: "STATIC",
          connect_timeout: "1s",
          per_connection_buffer_limit_bytes: 32768,
          typed_extension_protocol_options: {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
              "@type": `${T}envoy.extensions.upstreams.http.v3.HttpProtocolOptions`,
              explicit_http_config: { http2_protocol_options: {} },
            },
          },
          load_assignment: {
            cluster_name: "portcullis",
            endpoints: [
              { lb_endpoints: [{ endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: 9001 } } } }] },
            ],
          },
        },
      ],
    },
  };
}

type Bootstrap = ReturnType<typeof validBootstrap>;
const hcm = (b: Bootstrap) => b.static_resources.listeners[0]!.filter_chains[0]!.filters[0]!.typed_config;
const httpFilter = (b: Bootstrap, i: number) => hcm(b).http_filters[i]!.typed_config as Record<string, unknown>;
const cluster = (b: Bootstrap) => b.static_resources.clusters[0] as Record<string, unknown>;

function decodeErrors(mutate: (b: Bootstrap & Record<string, unknown>) => void): string[] {
  const b = validBootstrap();
  mutate(b);
  const res = decodeBootstrap(JSON.stringify(b));
  return res.ok ? [] : res.errors;
}

describe("decodeBootstrap", () => {
  it("decodes a valid bootstrap given as YAML into a real Bootstrap message", () => {
    const res = decodeBootstrap(stringify(validBootstrap()));
    if (!res.ok) expect.fail(res.errors.join("\n"));
    const msg = res.message.toJSON();
    expect(msg["static_resources"].clusters[0].connect_timeout).toEqual({ seconds: "1", nanos: 0 });
    expect(msg["static_resources"].clusters[0].per_connection_buffer_limit_bytes).toEqual({ value: 32768 });
    expect(msg["node"].metadata.fields.team).toEqual({ stringValue: "fundament" });
    expect(msg["node"].metadata.fields.tags.listValue.values).toHaveLength(4);

    // typed_config is packed like Envoy's Any: unpack it and check the ext_authz filter.
    const any = (res.message as unknown as Record<string, any>)["static_resources"].listeners[0].filter_chains[0]
      .filters[0].typed_config;
    const hcmType = envoyRoot().lookupType(
      "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    );
    expect(any.type_url).toBe(`${T}${hcmType.fullName.slice(1)}`);
    const hcmMsg = hcmType.toObject(hcmType.decode(any.value), { enums: String }) as Record<string, any>;
    const authz = envoyRoot().lookupType("envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
    const authzMsg = authz.toObject(authz.decode(hcmMsg["http_filters"][0].typed_config.value), {
      enums: String,
    });
    expect(authzMsg["transport_api_version"]).toBe("V3");
    expect(authzMsg["grpc_service"].timeout).toMatchObject({ nanos: 250_000_000 });
  });

  it("accepts lowerCamel JSON field names as Envoy does", () => {
    const errors = decodeErrors((b) => {
      const c = cluster(b);
      c["connectTimeout"] = c["connect_timeout"];
      delete c["connect_timeout"];
    });
    expect(errors).toEqual([]);
  });

  const failures: [string, (b: Bootstrap & Record<string, unknown>) => void, string][] = [
    ["unknown top-level field", (b) => (b["foo"] = 1), `<root>: unknown field "foo"`],
    ["unknown field in HCM", (b) => ((hcm(b) as Record<string, unknown>)["foo"] = true), `${HCM_PATH}: unknown field "foo"`],
    [
      "unknown field inside a nested Any",
      (b) => (httpFilter(b, 0)["foo"] = 1),
      `${HCM_PATH}.http_filters[0].typed_config: unknown field "foo"`,
    ],
    [
      "@type that does not exist",
      (b) => (httpFilter(b, 1)["@type"] = `${T}envoy.extensions.filters.http.nope.v3.Nope`),
      `${HCM_PATH}.http_filters[1].typed_config: unknown type "envoy.extensions.filters.http.nope.v3.Nope" in "@type"`,
    ],
    [
      "string where a bool is expected",
      (b) => (httpFilter(b, 0)["failure_mode_allow"] = "yes"),
      `${HCM_PATH}.http_filters[0].typed_config.failure_mode_allow: expected bool, got string "yes"`,
    ],
    [
      "bool where a message is expected",
      (b) => ((hcm(b) as Record<string, unknown>)["route_config"] = true),
      `${HCM_PATH}.route_config: expected object for envoy.config.route.v3.RouteConfiguration, got boolean true`,
    ],
    [
      "bad enum name",
      (b) => (cluster(b)["type"] = "STATC"),
      `static_resources.clusters[0].type: invalid value string "STATC" for enum envoy.config.cluster.v3.Cluster.DiscoveryType`,
    ],
    [
      "bad duration string",
      (b) => (cluster(b)["connect_timeout"] = "5 seconds"),
      `static_resources.clusters[0].connect_timeout: expected duration string like "5s" or "0.25s", got string "5 seconds"`,
    ],
    [
      "non-array for a repeated field",
      (b) => ((b.static_resources as Record<string, unknown>)["clusters"] = { name: "x" }),
      `static_resources.clusters: expected array, got object`,
    ],
    [
      "two members of a oneof",
      (b) => ((hcm(b).route_config.virtual_hosts[0]!.routes[0]!.route as Record<string, unknown>)["cluster_header"] = "x"),
      `${HCM_PATH}.route_config.virtual_hosts[0].routes[0].route: oneof "cluster_specifier" has more than one member set: "cluster" and "cluster_header"`,
    ],
    [
      "Any without @type",
      (b) => delete httpFilter(b, 1)["@type"],
      `${HCM_PATH}.http_filters[1].typed_config: Any needs "@type": "type.googleapis.com/<full.name>", got undefined`,
    ],
  ];

  it.each(failures)("rejects %s", (_name, mutate, expected) => {
    expect(decodeErrors(mutate)).toEqual([expected]);
  });

  it("reports every problem, not just the first", () => {
    const errors = decodeErrors((b) => {
      b["foo"] = 1;
      cluster(b)["type"] = "STATC";
    });
    expect(errors).toHaveLength(2);
  });

  it("reports YAML syntax errors", () => {
    const res = decodeBootstrap("static_resources: [");
    expect(res.ok).toBe(false);
    if (!res.ok) expect(res.errors[0]).toMatch(/^parse error: /);
  });
});
