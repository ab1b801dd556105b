#!/usr/bin/env bash
# The quickstart: build the operator, start the local cluster (or reuse it),
# install the CRDs, run the operator, create a sample VLLMService on fake GPU
# nodes and follow it until it is Available.
#
#   hack/quickstart.sh         run it
#   hack/quickstart.sh down    stop the operator and the local cluster
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
state=target/quickstart
mkdir -p "$state"
export KUBECONFIG=$repo/target/cluster/kubeconfig

stop_operator() {
  if [ -f "$state/operator.pid" ]; then
    kill "$(cat "$state/operator.pid")" 2>/dev/null || true
    rm -f "$state/operator.pid"
  fi
}

if [ "${1:-}" = down ]; then
  stop_operator
  hack/cluster/cluster.sh down
  exit 0
fi

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Building the operator"
cargo build -p vllmservice-operator
bin=$repo/target/debug/vllmservice-operator

step "Starting the local control plane (first run builds it from Go modules: ~15 min)"
hack/cluster/cluster.sh up
kubectl get nodes

step "Installing the CRDs: VLLMService, Gateway API, Prometheus Operator (from the Go module cache)"
crds=(config/crd/vllmservice.yaml $(hack/cluster/crds.sh gateway) $(hack/cluster/crds.sh prometheus))
for f in "${crds[@]}"; do kubectl apply --server-side --force-conflicts -f "$f" >/dev/null; done
for f in "${crds[@]}"; do kubectl wait --for=condition=Established --timeout=60s -f "$f" >/dev/null; done
kubectl get crd

step "Running the operator (log: $state/operator.log)"
stop_operator
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" run --metrics-addr "127.0.0.1:$metrics_port" >"$state/operator.log" 2>&1 &
echo $! >"$state/operator.pid"
echo "operator pid $(cat "$state/operator.pid"), metrics on http://127.0.0.1:$metrics_port/metrics"

step "Creating the sample: namespace ai-demo, PV/PVC, Gateway llm-gateway and VLLMService qwen-demo"
kubectl apply -f config/samples/quickstart.yaml

step "Playing the Gateway controller (none runs here): accepting HTTPRoute qwen-demo"
for _ in $(seq 1 60); do
  gen=$(kubectl -n ai-demo get httproute qwen-demo -o jsonpath='{.metadata.generation}' 2>/dev/null || true)
  [ -n "$gen" ] && break
  sleep 1
done
[ -n "$gen" ] || { echo "the operator made no HTTPRoute; see $state/operator.log" >&2; exit 1; }
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kubectl -n ai-demo patch httproute qwen-demo --subresource=status --type=merge -p "{\"status\":{\"parents\":[{
  \"controllerName\":\"example.com/quickstart\",
  \"parentRef\":{\"group\":\"gateway.networking.k8s.io\",\"kind\":\"Gateway\",\"name\":\"llm-gateway\",\"namespace\":\"ai-demo\",\"sectionName\":\"http\"},
  \"conditions\":[
    {\"type\":\"Accepted\",\"status\":\"True\",\"reason\":\"Accepted\",\"message\":\"accepted by the quickstart\",\"observedGeneration\":$gen,\"lastTransitionTime\":\"$now\"},
    {\"type\":\"ResolvedRefs\",\"status\":\"True\",\"reason\":\"ResolvedRefs\",\"message\":\"resolved\",\"observedGeneration\":$gen,\"lastTransitionTime\":\"$now\"}]}]}}"

step "Waiting for qwen-demo to become Available"
deadline=$((SECONDS + 120))
last=""
while :; do
  line=$(kubectl -n ai-demo get vllm qwen-demo --no-headers 2>/dev/null || true)
  [ "$line" != "$last" ] && echo "$line" && last=$line
  phase=$(kubectl -n ai-demo get vllm qwen-demo -o jsonpath='{.status.phase}' 2>/dev/null || true)
  [ "$phase" = Running ] && break
  if [ $SECONDS -ge $deadline ]; then
    echo "qwen-demo is not Available after 120s; what the operator says:" >&2
    kubectl -n ai-demo describe vllm qwen-demo >&2 || true
    tail -n 20 "$state/operator.log" >&2
    exit 1
  fi
  sleep 1
done
kubectl -n ai-demo get vllm,deployment,service,httproute,servicemonitor,prometheusrule,pods -o wide

cat <<EOT

qwen-demo is Available. The nodes are kwok fakes: pods are scheduled onto
GPU nodes and reported Ready, but no vLLM container really runs, and no
Gateway controller or Prometheus either: the quickstart accepted the route
itself, and the ServiceMonitor and PrometheusRule wait for a Prometheus.

Try next:
  export KUBECONFIG=$KUBECONFIG
  kubectl -n ai-demo describe vllm qwen-demo          # conditions and events
  kubectl -n ai-demo scale vllm qwen-demo --replicas=3
  kubectl -n ai-demo patch vllm qwen-demo --type=merge -p '{"spec":{"resources":{"limits":{"nvidia.com/gpu":"9"},"requests":{"nvidia.com/gpu":"9"}}}}'
                                                      # unschedulable: see Degraded
  kubectl explain vllmservice.spec.engineArgs
  tail -f $state/operator.log

Stop everything: hack/quickstart.sh down
EOT
