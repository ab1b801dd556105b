#!/usr/bin/env bash
# Runs promtool, built once from the official github.com/prometheus/prometheus
# Go module pinned in hack/tools/promtool/ (go.mod, go.sum) into the
# per-machine cache shared with the local control plane, keyed by the pins.
#
#   hack/tools/promtool.sh ARGS...    build when needed, then exec `promtool ARGS...`
#   hack/tools/promtool.sh --build    build when needed, print the binary's path
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

bin=$(go_tool promtool "$here/promtool" github.com/prometheus/prometheus/cmd/promtool)
if [ "${1:-}" = "--build" ]; then
  echo "$bin"
  exit 0
fi
exec "$bin" "$@"
