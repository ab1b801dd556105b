#!/usr/bin/env bash
# The quickstart: build the operator and the vLLM simulator, start the local
# cluster (or reuse it), install the CRDs, run the operator, create a sample
# VLLMService on the cluster's real node, follow it until it is Available, and
# send it a chat completion through its Service.
#
#   hack/quickstart.sh         run it
#   hack/quickstart.sh down    stop the operator and the local cluster
#
# VLLM_CLUSTER_DIR picks another cluster directory (as for hack/cluster/cluster.sh);
# the quickstart's own state is then in $VLLM_CLUSTER_DIR-quickstart.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [ -n "${VLLM_CLUSTER_DIR:-}" ]; then
  export VLLM_CLUSTER_DIR=$(realpath -m "$VLLM_CLUSTER_DIR")
  state=$VLLM_CLUSTER_DIR-quickstart
else
  state=$repo/target/quickstart
fi
mkdir -p "$state"
export KUBECONFIG=${VLLM_CLUSTER_DIR:-$repo/target/cluster}/kubeconfig

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

step "Building the operator and the vLLM simulator"
cargo build -p vllmservice-operator -p vllm-sim
bin=$repo/target/debug/vllmservice-operator

step "Starting the local control plane (first run builds it from Go modules: ~15 min)"
hack/cluster/cluster.sh up
# A running cluster is reused: bring its images up to date with the binaries.
hack/cluster/cluster.sh load-images
kubectl get nodes
if ! kubectl get node real-node-0 >/dev/null 2>&1; then
  echo "the local cluster has no real node (started with --real-nodes 0?): the sample needs it;" \
       "restart it: hack/cluster/cluster.sh down && hack/cluster/cluster.sh up" >&2
  exit 1
fi

step "Installing the CRDs: VLLMService, Gateway API, Prometheus Operator (from the Go module cache)"
crds=(config/crd/vllmservice.yaml $(hack/cluster/crds.sh gateway) $(hack/cluster/crds.sh prometheus))
for f in "${crds[@]}"; do kubectl apply --server-side --force-conflicts -f "$f" >/dev/null; done
for f in "${crds[@]}"; do kubectl wait --for=condition=Established --timeout=60s -f "$f" >/dev/null; done
kubectl get crd

step "Running the operator (log: $state/operator.log)"
stop_operator
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Only namespace ai-demo: the operator leaves VLLMServices elsewhere (e.g. tests'
# on a shared cluster) alone.
health_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Plain-HTTP /metrics on loopback for this demo; in a cluster it is HTTPS with a token.
"$bin" run --watch-namespace ai-demo --metrics-addr "127.0.0.1:$metrics_port" --metrics-insecure \
  --health-addr "127.0.0.1:$health_port" >"$state/operator.log" 2>&1 &
echo $! >"$state/operator.pid"
echo "operator pid $(cat "$state/operator.pid"), watching namespace ai-demo, metrics on http://127.0.0.1:$metrics_port/metrics"

step "Copying the fake model (config/samples/fake-model) to $state/models for the hostPath PersistentVolume"
models=$state/models
mkdir -p "$models/Qwen2.5-1.5B-Instruct"
cp config/samples/fake-model/config.json "$models/Qwen2.5-1.5B-Instruct/config.json"
chmod -R a+rX "$models"
ls -l "$models/Qwen2.5-1.5B-Instruct"
# A PersistentVolume's source cannot change: replace one a run with another path left.
old=$(kubectl get pv ai-demo-qwen-models -o jsonpath='{.spec.hostPath.path}' 2>/dev/null || true)
if [ -n "$old" ] && [ "$old" != "$models" ]; then
  echo "replacing the old sample (PersistentVolume ai-demo-qwen-models had hostPath $old)"
  kubectl delete namespace ai-demo --ignore-not-found --wait=true >/dev/null
  kubectl delete pv ai-demo-qwen-models --ignore-not-found --wait=true >/dev/null
fi

step "Creating the sample: namespace ai-demo, PV/PVC, Gateway llm-gateway and VLLMService qwen-demo"
sed "s#hostPath: {path: /data/models, type: Directory}#hostPath: {path: $models, type: Directory}#" \
  config/samples/quickstart.yaml | kubectl apply -f -

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
  # A line when phase or readiness changes (not for every tick of AGE).
  key=$(awk '{print $2, $3}' <<<"$line")
  [ "$key" != "$last" ] && echo "$line" && last=$key
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

ip=$(kubectl -n ai-demo get service qwen-demo -o jsonpath='{.spec.clusterIP}')
port=$(kubectl -n ai-demo get service qwen-demo -o jsonpath='{.spec.ports[0].port}')
step "Asking qwen-demo through its Service: POST http://$ip:$port/v1/chat/completions"
request='{"model": "qwen2.5-1.5b-instruct", "max_tokens": 12, "messages": [{"role": "user", "content": "Hello! Who are you?"}]}'
echo "$request"
answer=$(curl -sS --fail-with-body --max-time 30 -H 'Content-Type: application/json' \
  -d "$request" "http://$ip:$port/v1/chat/completions") \
  || { echo "the chat completion failed: $answer" >&2; exit 1; }
python3 -c '
import json, sys
a = json.loads(sys.argv[1])
print("model:  ", a["model"])
print("answer: ", a["choices"][0]["message"]["content"])
print("usage:  ", json.dumps(a["usage"]))
' "$answer"

cat <<EOT

qwen-demo is Available and answered. Its pod runs on the real node
real-node-0 (containerd, kubelet, kube-proxy; docs/local-cluster.md) with the
vLLM simulator localhost/vllm-sim:dev (crates/vllm-sim), which plays vLLM's
OpenAI-compatible server: the answer is filler text, not a model's. The GPU is
a counted resource (nvidia.com/gpu: 4 on the node), not a device. No Gateway
controller or Prometheus runs: the quickstart accepted the route itself, and
the ServiceMonitor and PrometheusRule wait for a Prometheus.

Try next:
  export KUBECONFIG=$KUBECONFIG
  curl -s http://$ip:$port/v1/models
  curl -s http://$ip:$port/metrics | grep '^vllm:'
  kubectl -n ai-demo describe vllm qwen-demo          # conditions and events
  kubectl -n ai-demo scale vllm qwen-demo --replicas=3
  kubectl -n ai-demo patch vllm qwen-demo --type=merge -p '{"spec":{"resources":{"limits":{"nvidia.com/gpu":"9"},"requests":{"nvidia.com/gpu":"9"}}}}'
                                                      # unschedulable: see Degraded
  kubectl explain vllmservice.spec.engineArgs
  tail -f $state/operator.log

Stop everything: hack/quickstart.sh down
EOT
