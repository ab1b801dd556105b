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
die() { echo "helm.sh: error: $*" >&2; exit 1; }

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
# The cache key: the pins and the build flags.
key=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "$ldflags") | sha256sum | cut -c1-16)
dir="$(cluster_cache_root)/tools/helm-$version-$key"
bin=$dir/helm

if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to build helm"
  mkdir -p "$dir"
  exec 9>"$dir.lock"
  flock -w 900 9 || die "another build holds $dir.lock"
  if [ ! -x "$bin" ]; then
    log=$dir/build.log
    echo "building helm $version from $p/cmd/helm (once per machine; log: $log) ..." >&2
    if ! (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
          -o "$bin.tmp" "$p/cmd/helm") >"$log" 2>&1; then
      die "building helm failed ($(grep -m1 -E 'error|cannot|dial' "$log" || tail -n1 "$log")); full log: $log"
    fi
    mv "$bin.tmp" "$bin"
  fi
fi

if [ "${1:-}" = "--build" ]; then
  echo "$bin"
  exit 0
fi
# helm keeps no state of ours in $HOME: config, cache and data under the build dir.
export HELM_CONFIG_HOME=${HELM_CONFIG_HOME:-$dir/config}
export HELM_CACHE_HOME=${HELM_CACHE_HOME:-$dir/cache}
export HELM_DATA_HOME=${HELM_DATA_HOME:-$dir/data}
exec "$bin" "$@"
