#!/usr/bin/env bash
# Builds the real node's Kubernetes binaries (kubelet, kube-proxy) from the
# k8s.io/kubernetes module pinned in kube/go.mod, into a per-machine cache
# keyed by kube/go.mod, kube/go.sum and this script (not build.sh's key: the
# control plane is never rebuilt for them). Prints the bin dir.
#
# The build runs in a scratch copy of kube/go.mod and go.sum, so that
# `-mod=mod` may add the kubelet's extra go.sum lines there without touching
# the files of the control plane's cache key.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

bin=$(node_bin_dir)
if [ -f "$bin/.complete" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to build the kubelet"
mkdir -p "$bin"
exec 8>"$bin.lock"
flock -w 1800 8 || die "another build holds $bin.lock"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi
log="$(cluster_cache_root)/node-build-$(node_key).log"
: >"$log"
mod="$bin/.mod"
rm -rf "$mod"; mkdir -p "$mod"
cp "$here/kube/go.mod" "$here/kube/go.sum" "$mod/"
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$mod/go.mod")
[ -n "$k8s_version" ] || die "no k8s.io/kubernetes require in $here/kube/go.mod"
major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
done
for c in kubelet kube-proxy; do
  echo "building $c $k8s_version from k8s.io/kubernetes/cmd/$c (once per machine; log: $log) ..." >&2
  if ! (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
        -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c") >>"$log" 2>&1; then
    die "building $c failed ($(grep -m1 -E 'error|cannot|unrecognized|dial' "$log" || tail -n1 "$log")); full log: $log"
  fi
  mv "$bin/$c.tmp" "$bin/$c"
done
rm -rf "$mod"
touch "$bin/.complete"
echo "$bin"
