#!/usr/bin/env bash
# A sitting: operator binaries (and the control plane alone) benchmarked in
# rotated order, then one before/after table (BENCHMARKS.md). Not part of
# hack/test.sh: each run takes ~3 minutes at M = 1000 (~1.5 for direct).
#
#   hack/bench-compare.sh [--rounds 3] [--size 1000] [--title TEXT] ARM... [-- BENCH-ARGS...]
#
#   ARM is NAME=PATH (an operator binary), NAME=dist (this checkout, built as it
#   ships: hack/images/shipped.sh), NAME=direct or NAME=floor (those variants,
#   no operator: BENCHMARKS.md). The first arm is what the others are compared
#   with ("before").
#   BENCH-ARGS go to every run (e.g. --steady-seconds 30; target/release/bench --help).
#
# Every binary is copied into target/bench-compare/<timestamp>/ first, so the
# checkout can be edited and rebuilt while the sitting runs. Round r runs the arms
# in order, round r+1 in reverse (A B, B A, A B, ...): this machine is shared and
# its speed drifts over minutes, and a run right after a heavy one starts slower,
# so neither arm may keep one position. Each run is an ordinary bench run
# (bench/results-<ts>.json, a section under "Runs"); the table comes last. Each run
# records a speed probe taken just before it (BENCHMARKS.md, "How to run").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export VLLM_CLUSTER_DIR=$repo/target/cluster-bench
ts=$(date -u +%Y%m%dT%H%M%SZ)
cmd="hack/bench-compare.sh"
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done

rounds=3 size=1000 title="" arms=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --title) title=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *=*) arms+=("$1"); shift ;;
    *) echo "bench-compare: unknown argument $1 (want NAME=PATH|dist|direct|floor; --help)" >&2; exit 2 ;;
  esac
done
[ ${#arms[@]} -ge 2 ] || { echo "bench-compare: give at least two arms (--help)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-compare: --rounds must be a positive integer, got $rounds" >&2; exit 2; }
title=${title:-"${arms[*]%%=*}"}

sitting=$repo/target/bench-compare/$ts
mkdir -p "$sitting"
names=() bins=()
for arm in "${arms[@]}"; do
  name=${arm%%=*} what=${arm#*=}
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "bench-compare: arm name '$name' must be letters, digits, . _ -" >&2; exit 2; }
  case "$what" in
    direct|floor) bin=$what ;;
    dist)
      echo "== building the operator as it ships: hack/images/shipped.sh" >&2
      cp "$(hack/images/shipped.sh)" "$sitting/$name"; bin=$sitting/$name ;;
    *)
      [ -x "$what" ] || { echo "bench-compare: $what (arm $name) is not an executable file" >&2; exit 2; }
      cp "$what" "$sitting/$name"; bin=$sitting/$name ;;
  esac
  names+=("$name") bins+=("$bin")
done

python=$(hack/bench-venv.sh)
echo "== building the harness" >&2
cargo build --release -p bench
echo "== local control plane binaries (cached per machine)" >&2
hack/cluster/build.sh >/dev/null
# The harness and the table are copied too: a rebuild during the sitting changes neither.
cp target/release/bench target/release/bench-compare "$sitting/"
trap 'hack/cluster/cluster.sh down >/dev/null 2>&1 || true' EXIT

declare -A results
order=()
for ((r = 1; r <= rounds; r++)); do
  idx=($(seq 0 $((${#names[@]} - 1))))
  if ((r % 2 == 0)); then idx=($(printf '%s\n' "${idx[@]}" | tac)); fi
  for i in "${idx[@]}"; do
    name=${names[$i]} bin=${bins[$i]}
    run_ts=$(date -u +%Y%m%dT%H%M%SZ)
    if [ "$bin" = direct ] || [ "$bin" = floor ]; then
      args=(--variant "$bin")
    else
      args=(--operator-bin "$bin")
    fi
    echo "== round $r of $rounds: $name" >&2
    json=$("$sitting/bench" --timestamp "$run_ts" --command "$cmd" --sizes "$size" --runs 1 \
      "${args[@]}" --label "$name: $title (sitting $ts, round $r)" "${extra[@]}")
    "$python" crates/bench/plot.py "$json" "bench/available-$run_ts.png" >/dev/null
    hack/cluster/cluster.sh down >/dev/null 2>&1 || true
    results[$name]+="$json,"
    order+=("$name")
  done
done

table_args=()
for name in "${names[@]}"; do table_args+=("$name=${results[$name]}"); done
"$sitting/bench-compare" --title "$title" --command "$cmd" "${table_args[@]}"
echo "bench-compare: ${#order[@]} runs (${order[*]}), table appended to BENCHMARKS.md" >&2
