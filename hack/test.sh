#!/usr/bin/env bash
# The project's test command (README, .ci/run): lint, build the local control
# plane (cached per machine), start it, run every test against it, stop it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# A cold run builds ~10 GiB under target/ (dev profile, line tables only); say how much room is left
# so that a "No space left on device" from rustc or the linker is not a surprise.
free_gib=$(df -Pk "$repo" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
echo "== disk: ${free_gib} GiB free under $repo" >&2

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings" >&2
cargo clippy --workspace --all-targets -- -D warnings

echo "== vllm-sim and the operator binary (the real node's images are made from them at cluster.sh up)" >&2
# The same dev profile as cargo test, so the tests reuse these binaries.
cargo build -p vllm-sim -p vllmservice-operator

echo "== local control plane" >&2
# A fresh cluster for the run; stopped however the run ends.
hack/cluster/cluster.sh down >/dev/null 2>&1 || true
trap 'hack/cluster/cluster.sh down' EXIT
hack/cluster/cluster.sh up
echo "== autoscaling pipeline: Prometheus and KEDA (built once per machine from their Go modules)" >&2
hack/cluster/cluster.sh autoscaling

echo "== helm (built once per machine from its Go module, for the packaging tests)" >&2
hack/tools/helm.sh --build >/dev/null
echo "== promtool (built once per machine from its Go module, to check the alert rules)" >&2
hack/tools/promtool.sh --build >/dev/null

echo "== cargo test" >&2
cargo test --workspace --no-fail-fast "$@"
