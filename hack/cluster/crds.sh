#!/usr/bin/env bash
# Prints, one per line, the paths of third-party CRD manifests inside the Go
# module cache, downloading the modules pinned in crds/go.mod when needed.
#
#   crds.sh gateway      Gateway API standard channel CRDs (config/crd/standard/)
#   crds.sh prometheus   Prometheus Operator ServiceMonitor and PrometheusRule CRDs
#   crds.sh keda         KEDA's CRDs (config/crd/bases/: ScaledObject first; all six are
#                        what the KEDA operator needs to start)
#
# Only CustomResourceDefinitions are printed: the Gateway API standard channel
# also ships a ValidatingAdmissionPolicy (vap_safeupgrades), an upgrade guard
# that is not an API and is left out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod_dir=$here/crds

die() { echo "crds.sh: error: $*" >&2; exit 1; }

case "${1:-}" in
  gateway) module=sigs.k8s.io/gateway-api ;;
  prometheus) module=github.com/prometheus-operator/prometheus-operator ;;
  keda) module=github.com/kedacore/keda/v2 ;;
  *) echo "usage: $0 gateway|prometheus|keda" >&2; exit 2 ;;
esac

command -v go >/dev/null 2>&1 || die "go toolchain not found on PATH: install Go >= 1.26 to get the $1 CRDs"

# The version pinned in crds/go.mod (the one place it is written).
version=$(awk -v m="$module" '($1==m || ($1=="require" && $2==m)) {print ($1=="require") ? $3 : $2; exit}' "$mod_dir/go.mod")
[ -n "$version" ] || die "$module is not required in $mod_dir/go.mod"

# Inside the helper module, so go.sum verifies the download.
if ! json=$(cd "$mod_dir" && go mod download -json "$module@$version" 2>&1); then
  err=$(printf '%s\n' "$json" | sed -n 's/.*"Error": "\(.*\)".*/\1/p' | head -n1)
  die "cannot download $module@$version: ${err:-$(printf '%s\n' "$json" | tail -n1)}"
fi
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n1)
[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download gave no directory for $module@$version"

case $1 in
  gateway)
    files=()
    for f in "$dir"/config/crd/standard/*.yaml; do
      grep -q '^kind: CustomResourceDefinition' "$f" && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] || die "no CRDs in $dir/config/crd/standard"
    ;;
  prometheus)
    crd_dir=$dir/example/prometheus-operator-crd
    files=("$crd_dir/monitoring.coreos.com_servicemonitors.yaml"
           "$crd_dir/monitoring.coreos.com_prometheusrules.yaml")
    ;;
  keda)
    files=("$dir/config/crd/bases/keda.sh_scaledobjects.yaml")
    for f in "$dir"/config/crd/bases/*.yaml; do
      [ "$f" = "${files[0]}" ] || files+=("$f")
    done
    ;;
esac
for f in "${files[@]}"; do
  [ -f "$f" ] || die "$f is missing from $module@$version"
  echo "$f"
done
