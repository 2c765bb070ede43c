#!/usr/bin/env bash
# Installs the benchmark's load generator (ghz) and the peer (OPA-Envoy) into the same
# version-keyed cache as scripts/deps/install.sh, compiled from the Go module proxy.
#
#   bash bench/install-tools.sh           # build what is missing (OPA-Envoy: ~5-10 min cold)
#   bash bench/install-tools.sh ghz       # only ghz
#
# Prints nothing on stdout but the env lines (PORTCULLIS_GHZ_BIN=…, PORTCULLIS_OPA_ENVOY_BIN=…, versions).
set -euo pipefail

GHZ_VERSION=v0.121.0
# opa-envoy-plugin: the newest tag whose checksum the Go checksum database here verifies (v1.10.0-envoy and
# v1.12.0-envoy are served by the proxy but their sumdb lookups answer 404; v1.16+ answer 403).
OPA_ENVOY_VERSION=v1.4.2-envoy

CACHE="${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}"
BIN="$CACHE/bin"
GHZ_BIN="$BIN/ghz-$GHZ_VERSION"
OPA_ENVOY_BIN="$BIN/opa-envoy-$OPA_ENVOY_VERSION"

log() { printf '[bench-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }


main() {
  mkdir -p "$BIN"
  exec 9>"$CACHE/.bench-tools.lock"
  flock 9
  local only="${1:-all}"
  if [[ "$only" == all || "$only" == ghz ]]; then
    [[ -x "$GHZ_BIN" ]] && log "ghz $GHZ_VERSION: cached" || {
      command -v go >/dev/null || die "Go is required to build ghz"
      log "ghz $GHZ_VERSION: building"
      local tmp; tmp="$(mktemp -d)"
      env GOBIN="$tmp" GOFLAGS=-buildvcs=false go install -trimpath -ldflags="-s -w" "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" >"$CACHE/build-ghz.log" 2>&1 \
        || { tail -n 30 "$CACHE/build-ghz.log" >&2; die "building ghz failed"; }
      mv "$tmp/ghz" "$GHZ_BIN"; rm -rf "$tmp"
    }
  fi
  if [[ "$only" == all || "$only" == opa ]]; then
    [[ -x "$OPA_ENVOY_BIN" ]] && log "opa-envoy $OPA_ENVOY_VERSION: cached" || {
      command -v go >/dev/null || die "Go is required to build opa-envoy-plugin"
      log "opa-envoy $OPA_ENVOY_VERSION: building (a full OPA: several minutes)"
      local tmp; tmp="$(mktemp -d)"
      # `go install pkg@version` asks the proxy for the module's version list (to check deprecation),
      # which the proxy refuses here (403); a throwaway module that requires the pinned version does not.
      (
        cd "$tmp"
        go mod init bench-opa-envoy >/dev/null 2>&1
        go get "github.com/open-policy-agent/opa-envoy-plugin/cmd/opa-envoy-plugin@$OPA_ENVOY_VERSION" &&
          GOFLAGS=-buildvcs=false go build -trimpath -ldflags="-s -w" -o "$tmp/opa-envoy-plugin" github.com/open-policy-agent/opa-envoy-plugin/cmd/opa-envoy-plugin
      ) >"$CACHE/build-opa-envoy.log" 2>&1 \
        || { tail -n 30 "$CACHE/build-opa-envoy.log" >&2; die "building opa-envoy-plugin failed"; }
      mv "$tmp/opa-envoy-plugin" "$OPA_ENVOY_BIN"; rm -rf "$tmp"
    }
  fi
  echo "PORTCULLIS_GHZ_BIN=$GHZ_BIN"
  echo "PORTCULLIS_GHZ_VERSION=$GHZ_VERSION"
  echo "PORTCULLIS_OPA_ENVOY_BIN=$OPA_ENVOY_BIN"
  echo "PORTCULLIS_OPA_ENVOY_VERSION=$OPA_ENVOY_VERSION"
}

main "$@"; exit
