#!/usr/bin/env bash
# What one write of each kind costs the API server (BENCHMARKS.md, "Write
# costs"): creating a Deployment or Service with a POST or a server-side apply,
# a VLLMService status by server-side apply or merge patch, an event, and the
# one read the operator sends (a pod's log); --kinds picks some. Not part of
# hack/test.sh; about 5 minutes.
#
#   hack/bench-writes.sh [--count 300] [--rounds 3] [--concurrency 16]
#                        (bench-writes --help lists every option)
#
# Runs on the bench's own cluster (target/cluster-bench, started fresh and
# stopped at the end; never the tests' target/cluster) with no operator.
# Results: bench/writes-<timestamp>.json and a section appended to BENCHMARKS.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
ts=$(date -u +%Y%m%dT%H%M%SZ)
cmd="hack/bench-writes.sh"
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done
export VLLM_CLUSTER_DIR=$repo/target/cluster-bench
echo "== building the harness" >&2
cargo build --release -p bench
echo "== local control plane binaries (cached per machine)" >&2
hack/cluster/build.sh >/dev/null
trap 'hack/cluster/cluster.sh down >/dev/null 2>&1 || true' EXIT
target/release/bench-writes --timestamp "$ts" --command "$cmd" "$@"
