#!/usr/bin/env bash
# The fault suite (issue 8) at full scale, and the leader-election failover
# tests, against the local control plane; prints the results table of
# docs/reliability.md (also written to target/faults-report.md).
#
#   hack/faults.sh                 full counts (VLLM_FAULTS_SCALE=full)
#   hack/faults.sh --fast          the counts the normal test command uses
#   hack/faults.sh [--fast] NAME   only the tests whose name contains NAME
#
# The suite runs on a cluster of its own (target/cluster-faults, stopped at the
# end), so that other test runs neither disturb it nor add to its figures; set
# VLLM_CLUSTER_DIR to use another one (it is then left running). Scenarios that
# restart kube-apiserver or replace the CRD start private clusters of their own
# (target/cluster-faults-*). Scenarios run one at a time (--test-threads=1).
# In full mode the generated-spec scenario runs every case and lists each kind
# of failure (VLLM_FAULTS_EXPLORE=1) instead of stopping at the first.
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
[ $scale = fast ] || export VLLM_FAULTS_EXPLORE=${VLLM_FAULTS_EXPLORE:-1}
if [ -z "${VLLM_CLUSTER_DIR:-}" ]; then
  export VLLM_CLUSTER_DIR=$repo/target/cluster-faults
  trap 'hack/cluster/cluster.sh down' EXIT
fi
hack/cluster/cluster.sh up

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
} >"$report.table"
mv "$report.table" "$report"
cat "$report" >&2
[ $status = 0 ] || echo "faults: some scenarios failed (see above); the table has every scenario that reported" >&2
exit $status
