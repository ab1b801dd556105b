#!/usr/bin/env bash
# Runs helm, built once from the official helm.sh/helm/v3 Go module pinned in
# hack/tools/helm/ (go.mod, go.sum) into the per-machine cache shared with the
# local control plane (hack/cluster/lib.sh), keyed by those pins.
#
#   hack/tools/helm.sh ARGS...    build when needed, then exec `helm ARGS...`
#   hack/tools/helm.sh --build    build when needed, print the binary's path
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

mod=$here/helm
version=$(awk '$1=="require" && $2=="helm.sh/helm/v3" {print $3}' "$mod/go.mod")
[ -n "$version" ] || die "no helm.sh/helm/v3 requirement in $mod/go.mod"
# The Kubernetes version helm assumes offline (helm template, lint): that of
# the client-go it is built with, as helm's own Makefile does.
kver=$(awk '$1=="k8s.io/client-go" {print $2}' "$mod/go.mod")
kminor=${kver#v0.}; kminor=${kminor%%.*}
p=helm.sh/helm/v3
ldflags="-s -w -X $p/internal/version.version=$version -X $p/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X $p/$pkg.k8sVersionMajor=1 -X $p/$pkg.k8sVersionMinor=$kminor"
done
bin=$(go_tool helm "$mod" "$p/cmd/helm" "$ldflags")
dir=$(dirname "$bin")

if [ "${1:-}" = "--build" ]; then
  echo "$bin"
  exit 0
fi
# helm keeps no state of ours in $HOME: config, cache and data under the build dir.
export HELM_CONFIG_HOME=${HELM_CONFIG_HOME:-$dir/config}
export HELM_CACHE_HOME=${HELM_CACHE_HOME:-$dir/cache}
export HELM_DATA_HOME=${HELM_DATA_HOME:-$dir/data}
exec "$bin" "$@"
