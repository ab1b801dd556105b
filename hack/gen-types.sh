#!/usr/bin/env bash
# Generates the checked-in Rust types of the third-party CRDs the operator writes
# with kopium, from the CRD manifests pinned in hack/cluster/crds/go.mod (see
# hack/cluster/crds.sh): the Prometheus Operator's ServiceMonitor and
# PrometheusRule (monitoring.coreos.com/v1) and KEDA's ScaledObject (keda.sh/v1alpha1).
#
#   hack/gen-types.sh                 regenerate crates/operator/src/{prometheus,keda}/*.rs
#   hack/gen-types.sh --check         regenerate into a temp dir; fail if the checked-in files differ
#   hack/gen-types.sh --install-only  only make sure the pinned kopium is installed
#
# kopium is installed once per machine with `cargo install --locked` into
# ~/.cache/vllm-operator/tools/kopium-<version> (the first install compiles it:
# a few minutes).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
kopium_version=0.24.1
cache=${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}
root=$cache/tools/kopium-$kopium_version
kopium=$root/bin/kopium
src_dir=$repo/crates/operator/src
# crds.sh set, output file (under crates/operator/src) and the CRD manifest's path
# inside its Go module.
targets=(
  "prometheus prometheus/servicemonitors.rs example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
  "prometheus prometheus/prometheusrules.rs example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
  "keda keda/scaledobjects.rs config/crd/bases/keda.sh_scaledobjects.yaml"
)
# -A: docs, JsonSchema and schema=derived (so CustomResourceExt::crd() works);
# Default and PartialEq make the types easy to build and compare.
kopium_flags=(-A --derive Default --derive PartialEq --smart-derive-elision)

die() { echo "gen-types.sh: error: $*" >&2; exit 1; }

install_kopium() {
  [ -x "$kopium" ] && return 0
  command -v cargo >/dev/null 2>&1 || die "cargo not found on PATH: it is needed to install kopium $kopium_version"
  mkdir -p "$(dirname "$root")"
  # One install at a time per machine (hack/test.sh and the drift test may race).
  exec 8>"$root.lock"
  flock -w 1200 8 || die "another kopium install holds $root.lock for 20 minutes"
  if [ ! -x "$kopium" ]; then
    echo "gen-types.sh: installing kopium $kopium_version into $root (compiles it: a few minutes) ..." >&2
    local log=$root.install.log
    if ! cargo install --locked kopium --version "$kopium_version" --root "$root" >"$log" 2>&1; then
      die "cargo install kopium $kopium_version failed; last lines of $log: $(tail -n 5 "$log")"
    fi
  fi
  exec 8>&-
}

# generate DIR: writes every target into DIR (as DIR/prometheus/..., DIR/keda/...).
generate() {
  local dest=$1 f t set out path files gomodcache
  gomodcache=$(cd "$repo/hack/cluster/crds" && go env GOMODCACHE)
  for t in "${targets[@]}"; do
    read -r set out path <<<"$t"
    files=$("$repo/hack/cluster/crds.sh" "$set") || die "hack/cluster/crds.sh $set failed"
    f=$(printf '%s\n' "$files" | grep "/$path\$") || die "crds.sh $set printed no $path"
    # kopium records its command line in the header: run it from the module
    # root with a relative path so the output does not depend on the machine.
    local mod_root=${f%/"$path"} module_at
    # The module's path inside the module cache (wherever GOMODCACHE points).
    module_at=${mod_root#"$gomodcache"/}
    mkdir -p "$(dirname "$dest/$out")"
    (cd "$mod_root" && "$kopium" -f "$path" "${kopium_flags[@]}") >"$dest/$out.raw" \
      || die "kopium failed on $f"
    {
      head -n 1 "$dest/$out.raw"
      echo "// source: $module_at (hack/cluster/crds/go.mod); regenerate with hack/gen-types.sh"
      tail -n +2 "$dest/$out.raw" | sed -e 's/[[:space:]]*$//'
    } >"$dest/$out"
    rm -f "$dest/$out.raw"
    rustfmt --edition 2024 "$dest/$out" || die "rustfmt failed on the generated $out"
  done
}

mode=${1:-generate}
case $mode in
  --install-only) install_kopium ;;
  generate)
    install_kopium
    generate "$src_dir"
    for t in "${targets[@]}"; do
      read -r _ out _ <<<"$t"
      echo "gen-types.sh: wrote crates/operator/src/$out" >&2
    done
    ;;
  --check)
    install_kopium
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    drift=0
    for t in "${targets[@]}"; do
      read -r _ out _ <<<"$t"
      if ! diff -u "$src_dir/$out" "$tmp/$out" >"$tmp/diff" 2>&1; then
        drift=1
        echo "gen-types.sh: crates/operator/src/$out differs from kopium's output:" >&2
        head -n 40 "$tmp/diff" >&2
      fi
    done
    [ $drift = 0 ] || die "generated types are out of date: run hack/gen-types.sh and commit the result"
    echo "gen-types.sh: generated types are up to date" >&2
    ;;
  *) echo "usage: $0 [--check | --install-only]" >&2; exit 2 ;;
esac
