# Shared helpers for build.sh and cluster.sh.
die() { echo "local-cluster: error: $*" >&2; exit 1; }

# alive PID: the process exists and is not a zombie (an exited component whose
# parent has not reaped it yet must count as stopped).
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

cluster_here() { cd "$(dirname "${BASH_SOURCE[0]}")" && pwd; }

cluster_cache_root() {
  local root=${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}
  mkdir -p "$root"
  echo "$root"
}

# The cache key: every pin (go.mod, go.sum) and the build recipe itself.
cluster_key() {
  local h; h=$(cluster_here)
  cat "$h"/kube/go.mod "$h"/kube/go.sum "$h"/etcd/go.mod "$h"/etcd/go.sum \
      "$h"/kwok/go.mod "$h"/kwok/go.sum "$h"/build.sh | sha256sum | cut -c1-16
}

cluster_bin_dir() { echo "$(cluster_cache_root)/cluster-bin/$(cluster_key)"; }

# go_tool NAME MODULE_DIR PACKAGE [LDFLAGS]: builds the command PACKAGE from the
# wrapper Go module in MODULE_DIR once per machine, into a cache directory keyed
# by that module's go.mod, go.sum and the ldflags, and prints the binary's path.
go_tool() {
  local name=$1 mod=$2 pkg=$3 ldflags=${4:-"-s -w"}
  local version key dir bin log
  version=$(awk '$1=="require" && NF==3 {print $3; exit}' "$mod/go.mod")
  [ -n "$version" ] || die "no single-line require in $mod/go.mod"
  key=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "$ldflags") | sha256sum | cut -c1-16)
  dir="$(cluster_cache_root)/tools/$name-$version-$key"
  bin=$dir/$name
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to build $name"
    mkdir -p "$dir"
    exec 8>"$dir.lock"
    flock -w 900 8 || die "another build holds $dir.lock"
    if [ ! -x "$bin" ]; then
      log=$dir/build.log
      echo "building $name $version from $pkg (once per machine; log: $log) ..." >&2
      if ! (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
            -o "$bin.tmp" "$pkg") >"$log" 2>&1; then
        die "building $name failed ($(grep -m1 -E 'error|cannot|dial' "$log" || tail -n1 "$log")); full log: $log"
      fi
      mv "$bin.tmp" "$bin"
    fi
    exec 8>&-
  fi
  echo "$bin"
}

# The real node's binaries (kubelet, kube-proxy; node-build.sh) have a cache key
# of their own, so that changing the node recipe never rebuilds the control plane.
node_key() {
  local h; h=$(cluster_here)
  cat "$h"/kube/go.mod "$h"/kube/go.sum "$h"/node-build.sh | sha256sum | cut -c1-16
}

node_bin_dir() { echo "$(cluster_cache_root)/node-bin/$(node_key)"; }
