#!/usr/bin/env bash
# Regenerates crates/cli/code-order.txt: the functions the operator runs in the
# bench, which the shipped (dist) build lays out first (crates/cli/build.rs;
# BENCHMARKS.md, "Eleventh step"). A diagnostic, not part of the tests: it
# takes ~20 minutes (a dist build and two M = 1000 bench runs).
#
#   hack/code-order.sh
#
# 1. Builds the operator with every function aligned to a page (the dist profile
#    with `-C llvm-args=-align-all-functions=12`, in target/code-order/target;
#    the symbols' names are those of the plain dist build).
# 2. Runs it in the bench, plain and routed variants (M = 1000), under
#    hack/code-order/shim.so, which serves the code's pages through userfaultfd
#    and logs each page on its first touch: the functions that ran (needs root
#    or vm.unprivileged_userfaultfd=1).
# 3. hack/code-order/order.py writes their names, in address order, to
#    crates/cli/code-order.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=$repo/target/code-order
export VLLM_CLUSTER_DIR=$repo/target/cluster-bench
mkdir -p "$out"
rm -rf "$out/pages"
mkdir -p "$out/pages"

echo "== the operator with every function on its own page (target/code-order/target)" >&2
RUSTFLAGS="-C llvm-args=-align-all-functions=12" CARGO_TARGET_DIR=$out/target \
  cargo build --profile dist -p vllmservice-operator
bin=$out/target/dist/vllmservice-operator
cc -O2 -Wall -Wextra -shared -fPIC -o "$out/shim.so" hack/code-order/shim.c -lpthread
cat >"$out/operator" <<WRAP
#!/bin/sh
CODE_ORDER_DIR=$out/pages LD_PRELOAD=$out/shim.so exec $bin "\$@"
WRAP
chmod +x "$out/operator"
echo "== the harness and the control plane" >&2
cargo build --release -p bench
hack/cluster/build.sh >/dev/null

trap 'hack/cluster/cluster.sh down >/dev/null 2>&1 || true' EXIT
for variant in plain routed; do
  echo "== bench, $variant variant, recording the pages touched" >&2
  target/release/bench --sizes 1000 --runs 1 --gpus-per-node 32 --steady-seconds 30 \
    --variant "$variant" --operator-bin "$out/operator" \
    --out-dir "$out" --markdown "$out/runs.md" --label "code order: pages touched" >/dev/null
done
hack/code-order/order.py "$bin" crates/cli/code-order.txt "$out"/pages/pages-*.txt
echo "code-order: wrote crates/cli/code-order.txt ($(wc -l <crates/cli/code-order.txt) functions)" >&2
