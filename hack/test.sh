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

# The binary users run (the Dockerfile's recipe), in the background from the start: the
# operator image the chart and in-cluster tests run is made from it (hack/images/build.sh).
mkdir -p target
echo "== the shipped operator binary (hack/images/shipped.sh: musl, static, dist), in the background" >&2
hack/images/shipped.sh >target/shipped.log 2>&1 &
shipped=$!
echo "== the Python clients (hack/tools/py-clients.sh: openai and guidellm, a venv made once per machine from PyPI), in the background" >&2
hack/tools/py-clients.sh --build >target/py-clients.log 2>&1 &
py_clients=$!

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings" >&2
cargo clippy --workspace --all-targets -- -D warnings

echo "== vllm-sim and the operator binary (cluster.sh up makes the real node's images from them; the operator's is replaced by the shipped one below)" >&2
# The same dev profile as cargo test, so the tests reuse these binaries.
cargo build -p vllm-sim -p vllmservice-operator

echo "== the real hf images (hack/images/build.sh hf-0.36 hf-2: huggingface_hub from PyPI, wheels kept per machine), for crates/vllm-sim/tests/real_hf and the download Jobs in the cluster" >&2
# Here rather than only in cluster.sh load-images, where a failed image is a note: these tests need them.
hack/images/build.sh hf-0.36 hf-2 >/dev/null

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

echo "== waiting for the shipped operator binary" >&2
wait "$shipped" || { tail -n 30 target/shipped.log >&2; echo "hack/images/shipped.sh failed (log: target/shipped.log)" >&2; exit 1; }
VLLM_OPERATOR_BINARY=$(tail -n 1 target/shipped.log)
export VLLM_OPERATOR_BINARY
echo "== the real node's operator image from $VLLM_OPERATOR_BINARY" >&2
hack/cluster/cluster.sh load-images

echo "== waiting for the Python clients" >&2
wait "$py_clients" || { tail -n 30 target/py-clients.log >&2; echo "hack/tools/py-clients.sh failed (log: target/py-clients.log)" >&2; exit 1; }
VLLM_PY_CLIENTS=$(tail -n 1 target/py-clients.log)
export VLLM_PY_CLIENTS

echo "== cargo test" >&2
cargo test --workspace --no-fail-fast "$@"
