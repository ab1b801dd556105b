#!/usr/bin/env bash
# Builds the Prometheus server once per machine from the official
# github.com/prometheus/prometheus Go module pinned in hack/tools/prometheus/
# (the module promtool comes from) into the per-machine cache, keyed by the pins.
#
#   hack/tools/prometheus.sh --build    build when needed, print the binary's path
#   hack/tools/prometheus.sh ARGS...    build when needed, then exec `prometheus ARGS...`
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

bin=$(go_tool prometheus "$here/prometheus" github.com/prometheus/prometheus/cmd/prometheus)
if [ "${1:-}" = "--build" ]; then
  echo "$bin"
  exit 0
fi
exec "$bin" "$@"
