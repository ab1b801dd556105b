#!/usr/bin/env bash
# Builds KEDA's operator, metrics API server and admission webhooks once per machine from the
# official github.com/kedacore/keda/v2 Go module pinned in hack/tools/keda/
# (a wrapper module: KEDA's go.mod has a replace and an exclude, so `go install`
# refuses it) into the per-machine cache, keyed by the pins.
#
#   hack/tools/keda.sh --build    build when needed, print the three binaries' paths
#                                 (operator, metrics adapter, admission webhooks)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

[ "${1:-}" = "--build" ] || { echo "usage: $0 --build" >&2; exit 2; }
go_tool keda-operator "$here/keda" github.com/kedacore/keda/v2/cmd/operator
go_tool keda-adapter "$here/keda" github.com/kedacore/keda/v2/cmd/adapter
go_tool keda-webhooks "$here/keda" github.com/kedacore/keda/v2/cmd/webhooks
