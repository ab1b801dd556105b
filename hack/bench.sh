#!/usr/bin/env bash
# The operator's scale benchmark (BENCHMARKS.md). Not part of hack/test.sh: it
# runs for many minutes.
#
#   hack/bench.sh [--sizes 100,1000] [--runs N|N,N] [--variant plain|routed|direct|floor]
#                 [--steady-seconds 120] [--operator-arg=--concurrency=64] [--label TEXT]
#                 (target/release/bench --help lists every option)
#
# For every size and run it starts a fresh local cluster in target/cluster-bench
# (never the tests' target/cluster) with 100 kwok nodes, installs the CRDs, runs
# the operator binary users run (hack/images/shipped.sh: the Dockerfile's
# recipe, static musl, dist profile) as its own process, creates the
# VLLMServices and measures; the cluster is stopped at the end. Results:
# bench/results-<timestamp>.json, bench/available-<timestamp>.png and a section
# appended to BENCHMARKS.md.
#
# Needs what hack/test.sh needs (Go, Rust, kubectl, openssl, python3 with venv);
# the plot uses matplotlib, installed from PyPI into target/bench-venv once.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export VLLM_CLUSTER_DIR=$repo/target/cluster-bench
ts=$(date -u +%Y%m%dT%H%M%SZ)
cmd="hack/bench.sh"
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done

case "${1:-}" in
  -h|--help)
    cargo build --release -q -p bench
    exec target/release/bench --help ;;
esac

echo "== plotting environment (target/bench-venv)" >&2
python=$(hack/bench-venv.sh)

echo "== building the operator as it ships: hack/images/shipped.sh" >&2
hack/images/shipped.sh >/dev/null
echo "== building the harness" >&2
cargo build --release -p bench
echo "== local control plane binaries (cached per machine)" >&2
hack/cluster/build.sh >/dev/null

cleanup() {
  local pidfile=$VLLM_CLUSTER_DIR/operator.pid
  if [ -f "$pidfile" ]; then
    local pid; pid=$(cat "$pidfile")
    # Only our operator: the pid file may be stale.
    if grep -q vllmservice-operator "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
  hack/cluster/cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== benchmark" >&2
json=$(target/release/bench --timestamp "$ts" --command "$cmd" "$@")
png=$(dirname "$json")/available-$ts.png
"$python" crates/bench/plot.py "$json" "$png"
echo "bench: results $json, plot $png, summary appended to BENCHMARKS.md" >&2
