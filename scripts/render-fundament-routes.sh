#!/usr/bin/env bash
# Re-proves test/deploy/fixtures/fundament-httproutes.yaml: renders the HTTPRoutes of Fundament's chart
# (charts/fundament of fundament-oss/fundament) at the commit the fixture names, with the fixture's
# values, and diffs them against the committed fixture. Not a test and not run in CI (CI has no
# checkout of Fundament); run it by hand when the pinned commit moves.
#
#   bash scripts/render-fundament-routes.sh FUNDAMENT_GIT_DIR [COMMIT]     # diff; exit 1 on a difference
#   bash scripts/render-fundament-routes.sh FUNDAMENT_GIT_DIR COMMIT --write   # rewrite the fixture
#
# FUNDAMENT_GIT_DIR is a clone (or bare git dir) of fundament-oss/fundament; helm is the one
# scripts/deps/install.sh builds (PORTCULLIS_HELM_BIN) or the one on PATH.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
fixture="$here/test/deploy/fixtures/fundament-httproutes.yaml"
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
templates=$(cd "$work/charts/fundament" && ls templates/*-httproute.yaml | sed 's/^/--show-only /' | tr '\n' ' ')
command="helm template fundament charts/fundament --namespace fundament-system --values test/deploy/fixtures/fundament-values.yaml $templates"
# shellcheck disable=SC2086
rendered="$(cd "$work" && HELM_CACHE_HOME="$work" HELM_CONFIG_HOME="$work" HELM_DATA_HOME="$work" \
  "$helm" template fundament charts/fundament --namespace fundament-system --values "$values" $templates)"
{
  echo "# The HTTPRoutes Fundament's chart renders: data, not Fundament's code. Produced from"
  echo "# fundament-oss/fundament charts/fundament at"
  echo "# commit: $commit"
  echo "# by scripts/render-fundament-routes.sh, which extracted that commit's charts/fundament and ran:"
  echo "#   $command"
  echo "$rendered"
} > "$work/fixture.yaml"
if [[ "$write" == "--write" ]]; then
  cp "$work/fixture.yaml" "$fixture"
  echo "wrote $fixture"
else
  diff -u "$fixture" "$work/fixture.yaml" && echo "the fixture is what Fundament's chart renders at $commit"
fi
