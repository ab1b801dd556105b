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
die() { echo "promtool.sh: error: $*" >&2; exit 1; }

mod=$here/promtool
version=$(awk '$1=="require" && $2=="github.com/prometheus/prometheus" {print $3}' "$mod/go.mod")
[ -n "$version" ] || die "no github.com/prometheus/prometheus requirement in $mod/go.mod"
key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
dir="$(cluster_cache_root)/tools/promtool-$version-$key"
bin=$dir/promtool

if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to build promtool"
  mkdir -p "$dir"
  exec 9>"$dir.lock"
  flock -w 900 9 || die "another build holds $dir.lock"
  if [ ! -x "$bin" ]; then
    log=$dir/build.log
    echo "building promtool $version (once per machine; log: $log) ..." >&2
    if ! (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" \
          -o "$bin.tmp" github.com/prometheus/prometheus/cmd/promtool) >"$log" 2>&1; then
      die "building promtool failed ($(grep -m1 -E 'error|cannot|dial' "$log" || tail -n1 "$log")); full log: $log"
    fi
    mv "$bin.tmp" "$bin"
  fi
fi

if [ "${1:-}" = "--build" ]; then
  echo "$bin"
  exit 0
fi
exec "$bin" "$@"
