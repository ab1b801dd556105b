#!/usr/bin/env bash
# Builds the local control plane's binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd, kwok) from the Go modules
# pinned in kube/, etcd/ and kwok/, into a per-machine cache keyed by those
# pins. A second run with the same pins reuses the cache. Prints the bin dir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to build the local control plane"

bin=$(cluster_bin_dir)
if [ -f "$bin/.complete" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
log="$(cluster_cache_root)/build-$(cluster_key).log"
: >"$log"
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/kube/go.mod")
major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
cgo="k8s.io/client-go/pkg/version"
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for p in $pkg $cgo; do
  ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
done

build() { # module-dir output-name package
  local dir=$1 out=$2 pkg=$3 flags=${4:-"-s -w"}
  echo "building $out from $pkg ..." >&2
  if ! (cd "$here/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$flags" -o "$bin/$out.tmp" "$pkg") >>"$log" 2>&1; then
    die "building $out failed ($(grep -m1 -E 'error|cannot|unrecognized|dial' "$log" || tail -n1 "$log")); full log: $log"
  fi
  mv "$bin/$out.tmp" "$bin/$out"
}

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  build kube "$c" "k8s.io/kubernetes/cmd/$c" "$ldflags"
done
touch "$bin/.complete"
echo "$bin"
