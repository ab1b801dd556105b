#!/usr/bin/env bash
# The scaling figure (BENCHMARKS.md, "Scaling"): one autoscaled VLLMService on
# the real node under a square-wave load, through the real pipeline (the
# simulator's metrics → Prometheus → KEDA → the HPA → /scale → the operator).
# Bounded: --seconds (default 600) plus about a minute of set-up.
#
#   hack/bench-autoscaling.sh [--seconds 600] [--period-seconds 200] [--concurrency 14] [--label TEXT]
#                             (bench-autoscaling --help lists every option)
#
# Runs on the tests' local cluster (VLLM_CLUSTER_DIR, default target/cluster;
# `cluster.sh up` starts it or reuses it, `cluster.sh autoscaling` adds
# Prometheus and KEDA), in a namespace of its own (deleted at the end). The
# operator is the binary as users run it, `run --watch-namespace <that
# namespace>`. BENCH_PROFILE=dev builds it unoptimised. Results:
# bench/autoscaling-<timestamp>.json and a section appended to BENCHMARKS.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
profile=${BENCH_PROFILE:-release}
case "$profile" in dev) out=debug ;; *) out=$profile ;; esac
cluster_dir=${VLLM_CLUSTER_DIR:-$repo/target/cluster}
cmd="hack/bench-autoscaling.sh"
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done

echo "== building the operator and the harness (profile $profile)" >&2
cargo build --profile "$profile" -p vllmservice-operator -p bench
echo "== the local cluster with its real node and autoscaling pipeline ($cluster_dir)" >&2
VLLM_CLUSTER_DIR=$cluster_dir hack/cluster/cluster.sh up >/dev/null
VLLM_CLUSTER_DIR=$cluster_dir hack/cluster/cluster.sh autoscaling
echo "== scaling benchmark" >&2
export VLLM_CLUSTER_DIR=$cluster_dir
exec "$target/$out/bench-autoscaling" --kubeconfig "$cluster_dir/kubeconfig" \
  --operator-bin "$target/$out/vllmservice-operator" --command "$cmd" "$@"
