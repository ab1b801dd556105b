#!/usr/bin/env bash
# Generates the checked-in Rust types of the Prometheus Operator CRDs
# (ServiceMonitor, PrometheusRule; monitoring.coreos.com/v1) with kopium, from
# the CRD manifests pinned in hack/cluster/crds/go.mod (see hack/cluster/crds.sh).
#
#   hack/gen-types.sh                 regenerate crates/operator/src/prometheus/*.rs
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
out_dir=$repo/crates/operator/src/prometheus
# kind -> output file and CRD manifest (as named in the prometheus-operator module).
targets=(
  "servicemonitors.rs monitoring.coreos.com_servicemonitors.yaml"
  "prometheusrules.rs monitoring.coreos.com_prometheusrules.yaml"
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

# generate DIR: writes every target into DIR.
generate() {
  local dest=$1 files f t
  files=$("$repo/hack/cluster/crds.sh" prometheus) || die "hack/cluster/crds.sh prometheus failed"
  for t in "${targets[@]}"; do
    local out=${t%% *} name=${t#* }
    f=$(printf '%s\n' "$files" | grep "/$name\$") || die "crds.sh printed no $name"
    # kopium records its command line in the header: run it from the module
    # root with a relative path so the output does not depend on the machine.
    local mod_root=${f%/example/*} module_at
    # The module's path inside the module cache (wherever GOMODCACHE points).
    module_at=${mod_root#"$(cd "$repo/hack/cluster/crds" && go env GOMODCACHE)"/}
    (cd "$mod_root" && "$kopium" -f "${f#"$mod_root"/}" "${kopium_flags[@]}") >"$dest/$out.raw" \
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
    mkdir -p "$out_dir"
    generate "$out_dir"
    echo "gen-types.sh: wrote ${targets[*]%% *} into ${out_dir#"$repo"/}" >&2
    ;;
  --check)
    install_kopium
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    drift=0
    for t in "${targets[@]}"; do
      out=${t%% *}
      if ! diff -u "$out_dir/$out" "$tmp/$out" >"$tmp/$out.diff" 2>&1; then
        drift=1
        echo "gen-types.sh: crates/operator/src/prometheus/$out differs from kopium's output:" >&2
        head -n 40 "$tmp/$out.diff" >&2
      fi
    done
    [ $drift = 0 ] || die "generated types are out of date: run hack/gen-types.sh and commit the result"
    echo "gen-types.sh: generated types are up to date" >&2
    ;;
  *) echo "usage: $0 [--check | --install-only]" >&2; exit 2 ;;
esac
