# Shared helpers for build.sh and cluster.sh.
die() { echo "local-cluster: error: $*" >&2; exit 1; }

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
