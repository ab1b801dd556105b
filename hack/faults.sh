#!/usr/bin/env bash
# The fault suite (issue 8) at full scale, and the leader-election failover
# tests, against the local control plane; prints the results table of
# docs/reliability.md (also written to target/faults-report.md).
#
#   hack/faults.sh                 full counts (VLLM_FAULTS_SCALE=full)
#   hack/faults.sh --fast          the counts the normal test command uses
#   hack/faults.sh [--fast] NAME   only the tests whose name contains NAME
#
# Scenarios run one at a time (--test-threads=1) so that their figures do not
# include each other's load. The shared cluster is started (or reused) by the
# tests and left running; scenarios that restart kube-apiserver or replace the
# CRD use private clusters of their own (target/cluster-faults-*).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

scale=full
if [ "${1:-}" = --fast ]; then scale=fast; shift; fi
filter=("$@")
report=$repo/target/faults-report.md
mkdir -p "$repo/target"
: >"$report"
export VLLM_FAULTS_SCALE=$scale VLLM_FAULTS_REPORT=$report

status=0
cargo test -p vllmservice-controller --test faults -- --nocapture --test-threads=1 "${filter[@]}" || status=$?
cargo test -p vllmservice-operator --test leader_election -- --nocapture --test-threads=1 "${filter[@]}" || status=$?

{
  echo
  echo "Fault suite ($scale), $(date -u +%Y-%m-%dT%H:%MZ):"
  echo
  echo "| scenario | injected | objects | converged | time to converge | lost | orphaned | duplicated | overwritten | regressed | leaked |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  sort "$report"
} | tee "$report.table" >&2
mv "$report.table" "$report"
[ $status = 0 ] || echo "faults: some scenarios failed (see above); the table has every scenario that reported" >&2
exit $status
