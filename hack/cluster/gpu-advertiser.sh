#!/usr/bin/env bash
# gpu-advertiser KUBECONFIG NODE COUNT: advertises COUNT nvidia.com/gpu on the real
# node the documented way for an extended resource (a PATCH of the node's status
# capacity), and re-applies it whenever the node's status lacks it: it watches
# the node, so it reacts to the kubelet's status updates, not to a timer. When
# the watch ends (API server restart, server-side timeout) it watches again.
set -uo pipefail
kubeconfig=$1 node=$2 count=$3
k() { kubectl --kubeconfig "$kubeconfig" --request-timeout=10s "$@"; }
patch() {
  k patch node "$node" --subresource=status --type=merge \
    -p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"$count\"},\"allocatable\":{\"nvidia.com/gpu\":\"$count\"}}}" >/dev/null \
    && echo "$(date -u +%FT%TZ) advertised nvidia.com/gpu=$count on $node"
}
while true; do
  kubectl --kubeconfig "$kubeconfig" get node "$node" --watch --output-watch-events=false \
      -o jsonpath='{.status.capacity.nvidia\.com/gpu}/{.status.allocatable.nvidia\.com/gpu}{"\n"}' 2>&1 |
    while read -r line; do
      [ "$line" = "$count/$count" ] || patch
    done
  sleep 1 # the watch ended: back off a second before watching again
done
