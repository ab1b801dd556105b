#!/usr/bin/env bash
# The rollout figure (BENCHMARKS.md, "Rollout"): requests sent / failed and
# latency while N VLLMServices roll out at once under load on the real node,
# with drain on and off. Bounded: about 1 min per mode and run.
#
#   hack/bench-rollout.sh [--services 3] [--replicas 2] [--concurrency 4] [--runs 1] [--label TEXT]
#                         (bench-rollout --help lists every option)
#
# Runs on the tests' local cluster (VLLM_CLUSTER_DIR, default target/cluster;
# `cluster.sh up` starts it or reuses it), because the figure needs its real
# node; everything it makes lives in a namespace of its own (deleted at the
# end) and its PersistentVolumes. The operator is the binary as users run it,
# `run --watch-namespace <that namespace>`. BENCH_PROFILE=dev builds it
# unoptimised (faster to build; the figure is about requests, not the
# operator's speed). Results: bench/rollout-<timestamp>.json and a section
# appended to BENCHMARKS.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
profile=${BENCH_PROFILE:-release}
case "$profile" in dev) out=debug ;; *) out=$profile ;; esac
cluster_dir=${VLLM_CLUSTER_DIR:-$repo/target/cluster}
cmd="hack/bench-rollout.sh"
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done

echo "== building the operator and the harness (profile $profile)" >&2
cargo build --profile "$profile" -p vllmservice-operator -p bench
echo "== the local cluster with its real node ($cluster_dir)" >&2
VLLM_CLUSTER_DIR=$cluster_dir hack/cluster/cluster.sh up >/dev/null
echo "== rollout benchmark" >&2
exec "$target/$out/bench-rollout" --kubeconfig "$cluster_dir/kubeconfig" \
  --operator-bin "$target/$out/vllmservice-operator" --command "$cmd" "$@"
