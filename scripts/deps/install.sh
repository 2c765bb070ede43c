#!/usr/bin/env bash
# Provides the pinned binaries the integration tests run for real: OpenFGA,
# kube-apiserver, etcd and tini (the image's init); egctl, helm, Istio's pilot-discovery and the Gateway API, Envoy Gateway
# and Istio CRDs for the gateway manifests' tests. They are cached outside the repo, keyed by version,
# so a warm run only checks that the files exist. Also installs jemalloc (Debian's libjemalloc2),
# the allocator portcullis ships with (src/cli/node-flags.ts), where the system has none: it is
# preloaded by name, so it must be where the dynamic loader looks, as in the image.
#
#   bash scripts/deps/install.sh            # build/install what is missing
#   bash scripts/deps/install.sh --stack    # only what `npm start` runs (jemalloc, etcd, tini, OpenFGA, kube-apiserver)
#   source "${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}/env"
#
# Only package registries are reachable here (no release downloads), hence:
# OpenFGA, kube-apiserver, egctl, helm and pilot-discovery are compiled from the Go module proxy (the
# CRD files come from the same modules), etcd and
# tini come from Debian's packages.
set -euo pipefail

OPENFGA_VERSION=v1.22.1
# Renders deploy/ kustomizations in the tests (what `kubectl apply -k` runs; kubectl 1.32 embeds v5.5.0).
KUSTOMIZE_VERSION=v5.5.0
# Debian bookworm's etcd-server; kube-apiserver accepts 3.4 (it only turns off
# watch-progress-based consistent reads, which the tests do not depend on).
ETCD_VERSION=3.4.23
# Debian's tini, the init the image's ENTRYPOINT runs node under (the Dockerfile says why).
TINI_VERSION=0.19.0
# Envoy Gateway's CLI: `egctl experimental translate` is its own Gateway API -> xDS translator,
# run offline by test/deploy/envoy-gateway-xds.test.ts (cold build: about 4 min). Its module also
# ships the Envoy Gateway CRDs.
ENVOY_GATEWAY_VERSION=v1.9.1
# The Gateway API release Envoy Gateway v1.9.1 builds against (its go.mod); its standard-channel CRDs.
GATEWAY_API_VERSION=v1.6.1
# istio.io/api: Istio's CRDs with their OpenAPI schemas (kubernetes/customresourcedefinitions.gen.yaml).
ISTIO_API_VERSION=v1.32.0
# Renders and lints deploy/helm/portcullis in the tests (cold build: about 2 min).
HELM_VERSION=v3.21.4
# Istio's control plane (istio.io/istio's pilot): its own Gateway API -> xDS generation, served over
# ADS to test/deploy/istio-pilot-xds.test.ts (cold build: about 5 min). A master pseudo-version: the
# proxy refuses the 1.28.0 release tag's zip (403).
ISTIO_PILOT_VERSION=v0.0.0-20260827124520-eed52ebb66ad

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_MODULE_DIR="$HERE/kube-apiserver"
# The Kubernetes version is pinned once, in kube-apiserver/go.mod.
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$K8S_MODULE_DIR/go.mod")"

CACHE="${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}"
BIN="$CACHE/bin"
OPENFGA_BIN="$BIN/openfga-$OPENFGA_VERSION"
KUBE_APISERVER_BIN="$BIN/kube-apiserver-$K8S_VERSION"
ETCD_BIN="$BIN/etcd-$ETCD_VERSION"
TINI_BIN="$BIN/tini-$TINI_VERSION"
KUSTOMIZE_BIN="$BIN/kustomize-$KUSTOMIZE_VERSION"
EGCTL_BIN="$BIN/egctl-$ENVOY_GATEWAY_VERSION"
HELM_BIN="$BIN/helm-$HELM_VERSION"
ISTIO_PILOT_BIN="$BIN/pilot-discovery-$ISTIO_PILOT_VERSION"
# CRD files copied out of the Go module cache, one directory per module version.
CRDS="$CACHE/crds"
GATEWAY_API_CRDS="$CRDS/gateway-api-$GATEWAY_API_VERSION"
ENVOY_GATEWAY_CRDS="$CRDS/envoy-gateway-$ENVOY_GATEWAY_VERSION"
ISTIO_CRDS="$CRDS/istio-api-$ISTIO_API_VERSION"
# istio.io/api's .proto files (with the common protos they import), to decode the generated Istio objects.
ISTIO_API_PROTOS="$CACHE/protos/istio-api-$ISTIO_API_VERSION"
# The differential oracle links k8s.io/apiserver at the release matching
# K8S_VERSION; keyed by its source too, so an edit rebuilds it.
ORACLE_DIR="$HERE/requestinfo-oracle"
ORACLE_HASH="$(cat "$ORACLE_DIR/go.mod" "$ORACLE_DIR/go.sum" "$ORACLE_DIR"/*.go | sha256sum | cut -c1-12)"
REQUESTINFO_ORACLE_BIN="$BIN/requestinfo-oracle-$K8S_VERSION-$ORACLE_HASH"

log() { printf '[deps %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Runs a long command with its output in a log file, printing a heartbeat so a
# multi-minute cold build is visibly alive; shows the log tail if it fails.
run_with_progress() {
  local what="$1"; shift
  local logfile="$CACHE/build-$what.log"
  local start=$SECONDS
  "$@" >"$logfile" 2>&1 &
  local pid=$! next=30
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS - start >= next )); then
      log "  still building $what ($(( next / 60 ))m$(( next % 60 ))s)"
      next=$(( next + 30 ))
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$logfile" >&2
    die "building $what failed (full log: $logfile)"
  fi
  log "built $what in $(( SECONDS - start ))s"
}

need_go() {
  command -v go >/dev/null || die "Go is required (go.mod files here declare go 1.26)"
}

# `go install`s command $1 (the binary's name) of package $4 at version $2 as $3, unless it is
# cached; $5: how long a cold build takes, for the log; $6: -X version stamps beside -s -w.
go_install_cached() {
  local name="$1" version="$2" dest="$3" package="$4" cold="${5:-}" stamps="${6:-}"
  [[ -x "$dest" ]] && { log "$name $version: cached"; return; }
  need_go
  log "$name $version: building from the Go module proxy${cold:+ (cold: $cold)}"
  # Temp dirs live in the cache so the final mv is a same-filesystem rename.
  local tmp; tmp="$(mktemp -d "$BIN/.$name.XXXXXX")"
  run_with_progress "$name" env GOBIN="$tmp" GOFLAGS=-buildvcs=false \
    go install -trimpath -ldflags="-s -w${stamps:+ $stamps}" "$package@$version"
  # Rename last so an interrupted build never leaves a half-written binary.
  mv "$tmp/$name" "$dest"
  rmdir "$tmp"
}

install_openfga() {
  go_install_cached openfga "$OPENFGA_VERSION" "$OPENFGA_BIN" github.com/openfga/openfga/cmd/openfga "" \
    "-X github.com/openfga/openfga/internal/build.Version=$OPENFGA_VERSION"
}

install_kustomize() {
  go_install_cached kustomize "$KUSTOMIZE_VERSION" "$KUSTOMIZE_BIN" sigs.k8s.io/kustomize/kustomize/v5 "about 1 min"
}

install_kube_apiserver() {
  [[ -x "$KUBE_APISERVER_BIN" ]] && { log "kube-apiserver $K8S_VERSION: cached"; return; }
  need_go
  log "kube-apiserver $K8S_VERSION: building (cold: about 5 min on 2 idle cores)"
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  # Stamp the version the release build would, so /version and the emulation
  # version logic see v1.Y.Z instead of v0.0.0-master.
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  (
    cd "$K8S_MODULE_DIR"
    # -mod=readonly: the committed go.sum must already be complete.
    run_with_progress kube-apiserver go build -mod=readonly -buildvcs=false -trimpath \
      -ldflags="$ldflags" -o "$KUBE_APISERVER_BIN.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  )
  mv "$KUBE_APISERVER_BIN.tmp" "$KUBE_APISERVER_BIN"
}

# Built with the same local toolchain and flags as kube-apiserver, so both read
# queries with the same net/url (e.g. its 10,000-parameter limit).
install_requestinfo_oracle() {
  [[ -x "$REQUESTINFO_ORACLE_BIN" ]] && { log "requestinfo-oracle $K8S_VERSION-$ORACLE_HASH: cached"; return; }
  need_go
  log "requestinfo-oracle $K8S_VERSION-$ORACLE_HASH: building (cold: about 2 min)"
  (
    cd "$ORACLE_DIR"
    run_with_progress requestinfo-oracle env GOTOOLCHAIN=local go build -mod=readonly -buildvcs=false -trimpath \
      -o "$REQUESTINFO_ORACLE_BIN.tmp" .
  )
  mv "$REQUESTINFO_ORACLE_BIN.tmp" "$REQUESTINFO_ORACLE_BIN"
}

install_egctl() {
  go_install_cached egctl "$ENVOY_GATEWAY_VERSION" "$EGCTL_BIN" github.com/envoyproxy/gateway/cmd/egctl "about 4 min"
}

install_istio_pilot() {
  go_install_cached pilot-discovery "$ISTIO_PILOT_VERSION" "$ISTIO_PILOT_BIN" istio.io/istio/pilot/cmd/pilot-discovery "about 5 min"
}

install_helm() {
  # Stamps the version `helm version` and the chart's kubeVersion checks read.
  go_install_cached helm "$HELM_VERSION" "$HELM_BIN" helm.sh/helm/v3/cmd/helm "about 2 min" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

# The directory of Go module $1 at version $2 in the module cache (downloaded if missing).
module_dir() {
  need_go
  local dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "$1@$2" | awk -F'"' '$2 == "Dir" { print $4 }')"
  [[ -d "$dir" ]] || die "go mod download $1@$2 gave no directory"
  printf '%s\n' "$dir"
}

# Copies CRD files $3... (relative to module $1@$2's directory) into directory $4's final name.
copy_crds() {
  local module="$1" version="$2" dest="$3"; shift 3
  [[ -d "$dest" ]] && { log "CRDs of $module $version: cached"; return; }
  local dir; dir="$(module_dir "$module" "$version")"
  local tmp; tmp="$(mktemp -d "$CRDS/.crds.XXXXXX")"
  local f
  for f in "$@"; do cp "$dir/$f" "$tmp/"; done
  chmod 644 "$tmp"/*
  mv "$tmp" "$dest"
  log "CRDs of $module $version: copied from the module cache"
}

install_crds() {
  mkdir -p "$CRDS"
  local gwapi=config/crd/standard/gateway.networking.k8s.io
  copy_crds sigs.k8s.io/gateway-api "$GATEWAY_API_VERSION" "$GATEWAY_API_CRDS" \
    "${gwapi}_gatewayclasses.yaml" "${gwapi}_gateways.yaml" "${gwapi}_httproutes.yaml" "${gwapi}_grpcroutes.yaml" \
    "${gwapi}_referencegrants.yaml" "${gwapi}_backendtlspolicies.yaml"
  local eg=charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io
  copy_crds github.com/envoyproxy/gateway "$ENVOY_GATEWAY_VERSION" "$ENVOY_GATEWAY_CRDS" \
    "${eg}_securitypolicies.yaml" "${eg}_clienttrafficpolicies.yaml" "${eg}_backendtrafficpolicies.yaml" \
    "${eg}_backends.yaml" "${eg}_httproutefilters.yaml" "${eg}_envoyproxies.yaml"
  copy_crds istio.io/api "$ISTIO_API_VERSION" "$ISTIO_CRDS" kubernetes/customresourcedefinitions.gen.yaml
  if [[ -d "$ISTIO_API_PROTOS" ]]; then log "protos of istio.io/api $ISTIO_API_VERSION: cached"; return; fi
  local dir; dir="$(module_dir istio.io/api "$ISTIO_API_VERSION")"
  mkdir -p "$CACHE/protos"
  local tmp; tmp="$(mktemp -d "$CACHE/protos/.istio.XXXXXX")"
  (cd "$dir" && find . -name '*.proto' -print0 | xargs -0 cp --parents -t "$tmp")
  chmod -R u+w,go+r "$tmp"
  mv "$tmp" "$ISTIO_API_PROTOS"
  log "protos of istio.io/api $ISTIO_API_VERSION: copied from the module cache"
}

# Unpacks Debian package $1 into $2/root. Download and unpack rather than
# install: installing etcd-server would also set up (and outside containers
# start) a system etcd service nobody needs.
unpack_debian_package() {
  local sudo=(); [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  # _apt cannot write into a mktemp dir; the sandbox only matters for root.
  (cd "$2" && apt-get download -qq -o APT::Sandbox::User=root "$1")
  dpkg-deb -x "$2/$1"_*.deb "$2/root"
}

# ldconfig is in sbin, which a user's PATH may lack.
has_jemalloc() { [[ "$(PATH="$PATH:/usr/sbin:/sbin" ldconfig -p)" == *"libjemalloc.so.2 "* ]]; }

install_jemalloc() {
  if has_jemalloc; then log "jemalloc: installed"; return; fi
  log "jemalloc: installing Debian package libjemalloc2 (the shipped allocator)"
  local sudo=(); [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libjemalloc2 >/dev/null
  has_jemalloc || die "libjemalloc2 installed, but the dynamic loader does not find libjemalloc.so.2"
}

install_etcd() {
  [[ -x "$ETCD_BIN" ]] && { log "etcd $ETCD_VERSION: cached"; return; }
  log "etcd $ETCD_VERSION: fetching Debian package etcd-server"
  local tmp; tmp="$(mktemp -d "$BIN/.etcd.XXXXXX")"
  unpack_debian_package etcd-server "$tmp"
  local got; got="$("$tmp/root/usr/bin/etcd" --version | awk '/^etcd Version:/ { print $3 }')"
  [[ "$got" == "$ETCD_VERSION" ]] || die "Debian ships etcd $got, expected $ETCD_VERSION: update ETCD_VERSION in $0"
  mv "$tmp/root/usr/bin/etcd" "$ETCD_BIN"
  rm -rf "$tmp"
  log "etcd $ETCD_VERSION: unpacked into the cache"
}

install_tini() {
  [[ -x "$TINI_BIN" ]] && { log "tini $TINI_VERSION: cached"; return; }
  log "tini $TINI_VERSION: fetching Debian package tini"
  local tmp; tmp="$(mktemp -d "$BIN/.tini.XXXXXX")"
  unpack_debian_package tini "$tmp"
  local got; got="$("$tmp/root/usr/bin/tini" --version | awk '{ print $3 }')"
  [[ "$got" == "$TINI_VERSION" ]] || die "Debian ships tini $got, expected $TINI_VERSION: update TINI_VERSION in $0"
  mv "$tmp/root/usr/bin/tini" "$TINI_BIN"
  rm -rf "$tmp"
  log "tini $TINI_VERSION: unpacked into the cache"
}

main() {
  mkdir -p "$BIN"
  # Two concurrent runs would otherwise build the same binary twice.
  exec 9>"$CACHE/.install.lock"
  flock 9

  install_jemalloc
  install_etcd
  install_tini
  install_openfga
  install_kube_apiserver
  # `--stack`: what `npm start`'s local stack runs, no more (the rest serves the tests only).
  if [[ "${1:-}" != "--stack" ]]; then
    install_requestinfo_oracle
    install_kustomize
    install_egctl
    install_helm
    install_istio_pilot
    install_crds
  fi

  cat >"$CACHE/env" <<EOF
export PORTCULLIS_OPENFGA_BIN="$OPENFGA_BIN"
export PORTCULLIS_KUBE_APISERVER_BIN="$KUBE_APISERVER_BIN"
export PORTCULLIS_ETCD_BIN="$ETCD_BIN"
export PORTCULLIS_TINI_BIN="$TINI_BIN"
export PORTCULLIS_REQUESTINFO_ORACLE_BIN="$REQUESTINFO_ORACLE_BIN"
export PORTCULLIS_KUSTOMIZE_BIN="$KUSTOMIZE_BIN"
export PORTCULLIS_EGCTL_BIN="$EGCTL_BIN"
export PORTCULLIS_HELM_BIN="$HELM_BIN"
export PORTCULLIS_ISTIO_PILOT_BIN="$ISTIO_PILOT_BIN"
export PORTCULLIS_GATEWAY_API_CRDS="$GATEWAY_API_CRDS"
export PORTCULLIS_ENVOY_GATEWAY_CRDS="$ENVOY_GATEWAY_CRDS"
export PORTCULLIS_ISTIO_CRDS="$ISTIO_CRDS"
export PORTCULLIS_ISTIO_API_PROTOS="$ISTIO_API_PROTOS"
EOF
  log "wrote $CACHE/env (the test harness reads it; or source it):"
  cat "$CACHE/env"
}

# Bash reads a script as it runs it; with main and exit on the last line,
# editing this file (e.g. a git pull) during a long build cannot derail it.
main "$@"; exit
