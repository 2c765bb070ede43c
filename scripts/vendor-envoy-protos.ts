// Vendors the exact subset of Envoy API protos that portcullis needs from an
// unpacked @grpc/grpc-js-xds package (which ships envoy-api, cncf/xds,
// googleapis and protoc-gen-validate under deps/).
//
//   cd /tmp && npm pack @grpc/grpc-js-xds@1.14.1 && tar xzf grpc-grpc-js-xds-1.14.1.tgz
//   npx node scripts/vendor-envoy-protos.ts /tmp/package
//
// The subset is the transitive import closure of SEEDS, so it is exact and
// reproducible. Only the .proto files of the vendored subtrees are replaced;
// LICENSE files, README.md and the hand-written grpc/health/v1/health.proto
// are left alone.
import { cpSync, existsSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

const SEEDS = [
  "envoy/service/auth/v3/external_auth.proto",
  "envoy/config/bootstrap/v3/bootstrap.proto",
  // The Cluster Discovery Service portcullis serves for registered clusters.
  "envoy/service/cluster/v3/cds.proto",
  // Extensions referenced from typed_config in our Envoy configs.
  "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
  "envoy/extensions/filters/http/ext_authz/v3/ext_authz.proto",
  "envoy/extensions/filters/http/cors/v3/cors.proto",
  "envoy/extensions/filters/http/router/v3/router.proto",
  "envoy/extensions/filters/http/header_mutation/v3/header_mutation.proto",
  "envoy/extensions/filters/http/lua/v3/lua.proto",
  "envoy/extensions/filters/http/health_check/v3/health_check.proto",
  "envoy/extensions/filters/http/dynamic_forward_proxy/v3/dynamic_forward_proxy.proto",
  "envoy/extensions/clusters/dynamic_forward_proxy/v3/cluster.proto",
  "envoy/extensions/common/dynamic_forward_proxy/v3/dns_cache.proto",
  "envoy/extensions/transport_sockets/tls/v3/tls.proto",
  "envoy/extensions/transport_sockets/tls/v3/cert.proto",
  "envoy/extensions/upstreams/http/v3/http_protocol_options.proto",
  "envoy/extensions/access_loggers/stream/v3/stream.proto",
  "envoy/extensions/access_loggers/file/v3/file.proto",
  "envoy/config/trace/v3/opentelemetry.proto",
  // Envoy Gateway's clusters (test/deploy/envoy-gateway-xds.test.ts decodes its ext_authz clusters).
  "envoy/extensions/load_balancing_policies/least_request/v3/least_request.proto",
  // Istio's CUSTOM provider enables ext_authz from a shadow RBAC filter's metadata
  // (test/deploy/istio-pilot-xds.test.ts reads its shadow rules).
  "envoy/extensions/filters/http/rbac/v3/rbac.proto",
];
const SEED_DIRS = ["envoy/config/route/v3"];

// Include roots inside the package, searched in order like protoc's -I.
const DEPS = ["envoy-api", "xds", "googleapis", "protoc-gen-validate"];
// Top-level directories of the vendored tree that this script owns.
const OWNED = ["envoy", "xds", "udpa", "google", "validate"];
// Well-known types: not shipped by the package; protobufjs and proto-loader bundle them.
const BUNDLED = /^google\/protobuf\//;

const IMPORT = /^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;/gm;

function main(pkgDir: string): void {
  const roots = DEPS.map((d) => join(pkgDir, "deps", d));
  const find = (name: string): string | undefined =>
    roots.map((r) => join(r, name)).find((p) => existsSync(p));

  const seeds = [...SEEDS];
  for (const dir of SEED_DIRS) {
    const abs = find(dir);
    if (!abs) throw new Error(`seed directory not found: ${dir}`);
    for (const f of readdirSync(abs).sort()) if (f.endsWith(".proto")) seeds.push(`${dir}/${f}`);
  }

  const files = new Map<string, string>(); // import name -> source path
  const bundled = new Set<string>();
  const missing: string[] = [];
  const queue = [...seeds];
  for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
    if (files.has(name) || bundled.has(name)) continue;
    const src = find(name);
    if (!src) {
      if (BUNDLED.test(name)) bundled.add(name);
      else missing.push(name);
      continue;
    }
    files.set(name, src);
    for (const m of readFileSync(src, "utf8").matchAll(IMPORT)) queue.push(m[1]!);
  }
  if (missing.length > 0) throw new Error(`imports not found in package:\n  ${missing.join("\n  ")}`);

  const out = resolve(import.meta.dirname, "../protos/envoy");
  for (const top of OWNED) removeProtos(join(out, top));
  let bytes = 0;
  for (const [name, src] of [...files].sort()) {
    cpSync(src, join(out, name));
    bytes += statSync(src).size;
  }
  console.log(`vendored ${files.size} proto files (${bytes} bytes) into ${out}`);
  console.log(`left to protobufjs's bundled well-known types: ${[...bundled].sort().join(", ")}`);
}

// Deletes *.proto files (and directories left empty) but keeps LICENSE etc.
function removeProtos(dir: string): void {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) {
      removeProtos(p);
      if (readdirSync(p).length === 0) rmSync(p, { recursive: true });
    } else if (entry.name.endsWith(".proto")) {
      rmSync(p);
    }
  }
}

const pkgDir = process.argv[2];
if (!pkgDir) {
  console.error("usage: node scripts/vendor-envoy-protos.ts <unpacked @grpc/grpc-js-xds package dir>");
  process.exit(2);
}
main(resolve(pkgDir));
