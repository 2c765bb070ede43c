#!/usr/bin/env bash
# Re-proves the two fixtures the tests read in place of Fundament's chart (charts/fundament of
# fundament-oss/fundament), at the commit test/deploy/fixtures/fundament-httproutes.yaml names:
#  - test/deploy/fixtures/fundament-httproutes.yaml: the chart's HTTPRoutes, with
#    test/deploy/fixtures/fundament-values.yaml;
#  - test/deploy/fixtures/fundament-proxy-services.yaml: the Service objects of the chart's own
#    kube-api-proxy and plugin-proxy templates, with both components enabled and with the defaults.
# Without --write it diffs both against the committed fixtures. Not a test and not run in CI (CI has
# no checkout of Fundament); run it by hand when the pinned commit moves.
#
#   bash scripts/render-fundament-routes.sh FUNDAMENT_GIT_DIR [COMMIT]     # diff; exit 1 on a difference
#   bash scripts/render-fundament-routes.sh FUNDAMENT_GIT_DIR COMMIT --write   # rewrite the fixtures
#
# FUNDAMENT_GIT_DIR is a clone (or bare git dir) of fundament-oss/fundament; helm is the one
# scripts/deps/install.sh builds (PORTCULLIS_HELM_BIN) or the one on PATH.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
fixture="$here/test/deploy/fixtures/fundament-httproutes.yaml"
services_fixture="$here/test/deploy/fixtures/fundament-proxy-services.yaml"
values="$here/test/deploy/fixtures/fundament-values.yaml"
git_dir="${1:?usage: render-fundament-routes.sh FUNDAMENT_GIT_DIR [COMMIT] [--write]}"
commit="${2:-$(sed -n 's/^# commit: \([0-9a-f]\{40\}\)$/\1/p' "$fixture")}"
write="${3:-}"
if [[ -z "${PORTCULLIS_HELM_BIN:-}" && -f "${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}/env" ]]; then
  # shellcheck disable=SC1091
  source "${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}/env"
fi
helm="${PORTCULLIS_HELM_BIN:-helm}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git -C "$git_dir" archive --prefix=charts/fundament/ "$commit:charts/fundament" | tar -x -C "$work"
render() { (cd "$work" && HELM_CACHE_HOME="$work" HELM_CONFIG_HOME="$work" HELM_DATA_HOME="$work" "$helm" "$@"); }

templates=$(cd "$work/charts/fundament" && ls templates/*-httproute.yaml | sed 's/^/--show-only /' | tr '\n' ' ')
command="helm template fundament charts/fundament --namespace fundament-system --values test/deploy/fixtures/fundament-values.yaml $templates"
# shellcheck disable=SC2086
rendered="$(render template fundament charts/fundament --namespace fundament-system --values "$values" $templates)"
{
  echo "# The HTTPRoutes Fundament's chart renders: data, not Fundament's code. Produced from"
  echo "# fundament-oss/fundament charts/fundament at"
  echo "# commit: $commit"
  echo "# by scripts/render-fundament-routes.sh, which extracted that commit's charts/fundament and ran:"
  echo "#   $command"
  echo "$rendered"
} > "$work/fundament-httproutes.yaml"

# The whole chart is rendered (with the defaults those templates render nothing, which --show-only
# refuses); the Services whose source is kube-api-proxy.yaml or plugin-proxy.yaml are kept, as a list.
required="jwtSecretRef.name=fundament-jwt,jwtSecretRef.key=secret"
proxy_services() {
  awk '
    function flush(  i) { if (src && svc) for (i = 1; i <= n; i++) print (lines[i] == "" ? "" : (i == 1 ? "  - " : "    ") lines[i]); n = 0; src = 0; svc = 0 }
    /^---$/ { flush(); next }
    /^# Source: fundament\/templates\/(kube-api-proxy|plugin-proxy)\.yaml$/ { src = 1; next }
    /^# Source: / { next }
    /^kind: Service$/ { svc = 1 }
    { lines[++n] = $0 }
    END { flush() }'
}
as_list() { local items; items="$(cat)"; if [[ -z "$items" ]]; then echo "$1: []"; else echo "$1:"; echo "$items"; fi; }
enabled_command="helm template fundament charts/fundament --namespace fundament-system --set $required,kubeApiProxy.enabled=true,pluginProxy.enabled=true"
defaults_command="helm template fundament charts/fundament --namespace fundament-system --set $required"
enabled="$(render template fundament charts/fundament --namespace fundament-system --set "$required,kubeApiProxy.enabled=true,pluginProxy.enabled=true" | proxy_services | as_list enabled)"
defaults="$(render template fundament charts/fundament --namespace fundament-system --set "$required" | proxy_services | as_list defaults)"
{
  echo "# The Services of Fundament's own kube-api-proxy and plugin-proxy templates: data, not Fundament's"
  echo "# code. Produced from fundament-oss/fundament charts/fundament at"
  echo "# commit: $commit"
  echo "# by scripts/render-fundament-routes.sh, which extracted that commit's charts/fundament, ran"
  echo "#   enabled:  $enabled_command"
  echo "#   defaults: $defaults_command"
  echo "# and kept the Service objects whose source is templates/kube-api-proxy.yaml or templates/plugin-proxy.yaml."
  echo "$enabled"
  echo "$defaults"
} > "$work/fundament-proxy-services.yaml"

if [[ "$write" == "--write" ]]; then
  cp "$work/fundament-httproutes.yaml" "$fixture"
  cp "$work/fundament-proxy-services.yaml" "$services_fixture"
  echo "wrote $fixture and $services_fixture"
else
  status=0
  diff -u "$fixture" "$work/fundament-httproutes.yaml" || status=1
  diff -u "$services_fixture" "$work/fundament-proxy-services.yaml" || status=1
  [[ $status == 0 ]] && echo "both fixtures are what Fundament's chart renders at $commit"
  exit $status
fi
