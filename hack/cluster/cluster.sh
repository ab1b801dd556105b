#!/usr/bin/env bash
# A real local Kubernetes control plane for tests and the quickstart:
# etcd, kube-apiserver (TLS, RBAC, service-account keys), kube-controller-manager,
# kube-scheduler, kwok managing fake GPU nodes (no containers run on those:
# kwok only plays the kubelet's part in the API) and, by default, one real node
# (containerd, runc, CNI bridge, kubelet, kube-proxy) that runs real pods.
# docs/local-cluster.md describes the addresses (all in 198.18.0.0/15) and the real node.
#
#   cluster.sh up [--nodes N] [--real-nodes 0|1]
#                               start (or reuse a healthy running) cluster; N kwok
#                               GPU nodes (VLLM_CLUSTER_NODES, default 4), real
#                               nodes (VLLM_CLUSTER_REAL_NODES, default 1)
#   cluster.sh down             stop every component; leaves no process, mount,
#                               network namespace or veth behind
#   cluster.sh load-images [--cargo]  (re)build the images (hack/images/build.sh) and
#                               import the changed ones into the real node's containerd
#   cluster.sh autoscaling      start Prometheus and KEDA (operator, metrics API server)
#                               beside the running cluster (autoscaling.sh; built once
#                               per machine); `down` stops them too
#   cluster.sh status           exit 0 when the cluster answers
#   cluster.sh env              print `export KUBECONFIG=...`
#   cluster.sh stop-component NAME    stop one component (e.g. kube-apiserver)
#   cluster.sh start-component NAME   start it again with its saved command line
#   cluster.sh restart-apiserver [S]  stop kube-apiserver for S seconds (default 15), start it
#                                     again (same port, certificates and etcd), wait until ready
#
# State (certificates, kubeconfig, logs, pids) lives in $VLLM_CLUSTER_DIR,
# by default <repo>/target/cluster. Ports are chosen free at every start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
repo=$(cd "$here/../.." && pwd)
dir=${VLLM_CLUSTER_DIR:-$repo/target/cluster}
nodes=${VLLM_CLUSTER_NODES:-4}
gpus_per_node=${VLLM_CLUSTER_GPUS:-8}
real_nodes=${VLLM_CLUSTER_REAL_NODES:-1}
kubeconfig=$dir/kubeconfig
# shellcheck source=node.sh
source "$here/node.sh"
# shellcheck source=autoscaling.sh
source "$here/autoscaling.sh"

# Every component runs in its own session; its pid (= process group) is recorded here.
pids_file() { echo "$dir/pids"; }

stop_all() {
  local f; f=$(pids_file)
  [ -f "$f" ] || return 0
  local pids; pids=$(awk '{print $2}' "$f" | tac)
  for p in $pids; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=0
    for p in $pids; do alive "$p" && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in $pids; do kill -KILL -- "-$p" 2>/dev/null || true; done
  rm -f "$f"
}

healthy() {
  [ -f "$kubeconfig" ] && [ -f "$(pids_file)" ] || return 1
  local p
  for p in $(awk '{print $2}' "$(pids_file)"); do alive "$p" || return 1; done
  kubectl --kubeconfig "$kubeconfig" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

# free_port: a port for a component to listen on. Taken from the slot's own
# block (20000+1000*slot, below the kernel's ephemeral range 32768-60999), not
# from bind(0): a port the kernel hands out as ephemeral can be taken, before
# the component binds it, as the local port of any outgoing connection (the API
# server's to etcd, say) or by a cluster of another slot starting at the same
# time, and the component then exits with "address already in use". Ports
# handed out since the cluster's `up` are recorded in $dir/ports and not reused.
free_port() {
  local s; s=$(cat "$dir/slot" 2>/dev/null) || die "free_port: $dir holds no slot"
  python3 - "$((20000 + 1000 * s))" "$dir/ports" <<'PY' || die "no free port in the slot's block"
import socket, sys
base, path = int(sys.argv[1]), sys.argv[2]
try:
    used = set(open(path).read().split())
except FileNotFoundError:
    used = set()
for port in range(base, base + 1000):
    if str(port) in used:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    with open(path, "a") as f:
        f.write(f"{port}\n")
    print(port)
    sys.exit(0)
sys.exit(f"every port of {base}..{base + 999} is taken or handed out")
PY
}

# start NAME CMD...: runs CMD in its own session with output to logs/NAME.log.
start() {
  local name=$1; shift
  # The exact command line, so that start-component can start it again.
  mkdir -p "$dir/cmd"; printf '%q ' "$@" >"$dir/cmd/$name"
  # 9>&-: the components must not inherit (and so hold) the start lock.
  # Started from a subshell, so that the component is no job of this shell: it
  # is reaped as soon as it exits (a zombie would look alive to kill -0).
  (setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null 9>&- & echo "$name $!" >>"$(pids_file)")
}

fail_start() {
  local name=$1 why=$2
  echo "local-cluster: error: $name $why; last lines of $dir/logs/$name.log:" >&2
  tail -n 15 "$dir/logs/$name.log" >&2 || true
  teardown
  exit 1
}

# wait_for NAME TIMEOUT CHECK...: waits until CHECK succeeds, failing fast if NAME died.
wait_for() {
  local name=$1 timeout=$2; shift 2
  local pid; pid=$(awk -v n="$name" '$1==n {print $2}' "$(pids_file)")
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    alive "$pid" || fail_start "$name" "exited during start"
    [ $SECONDS -lt $deadline ] || fail_start "$name" "did not become ready within ${timeout}s"
    sleep 0.2
  done
}

make_pki() {
  local pki=$dir/pki
  if [ -f "$pki/.complete" ]; then
    [ "$(cat "$pki/san" 2>/dev/null)" = "$host_ip $svc_ip" ] && return 0
    # Another slot (other addresses): a serving certificate for them.
    (cd "$pki" && sed -i "s/^subjectAltName=.*/subjectAltName=IP:127.0.0.1,IP:$host_ip,IP:$svc_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local/" san.cnf &&
      openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
        -days 3650 -extfile san.cnf -extensions v3 2>/dev/null && echo "$host_ip $svc_ip" >san) \
      || die "renewing the API server certificate with openssl failed in $pki"
    return 0
  fi
  rm -rf "$pki"; mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=vllm-operator-local-ca" 2>/dev/null
    cat >san.cnf <<EOF
[v3]
subjectAltName=IP:127.0.0.1,IP:$host_ip,IP:$svc_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EOF
    printf '[v3]\nextendedKeyUsage=clientAuth\n' >client.cnf
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
      -days 3650 -extfile san.cnf -extensions v3 2>/dev/null
    for who in "admin:/O=system:masters/CN=kubernetes-admin" \
               "controller-manager:/CN=system:kube-controller-manager" \
               "scheduler:/CN=system:kube-scheduler"; do
      local n=${who%%:*} subj=${who#*:}
      openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "$subj" 2>/dev/null
      openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$n.crt" \
        -days 3650 -extfile client.cnf -extensions v3 2>/dev/null
    done
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    echo "$host_ip $svc_ip" >san
    touch .complete
  ) || die "creating certificates with openssl failed in $pki"
}

# The aggregation layer's front proxy (as kubeadm sets it up): a CA of its own and
# the client certificate kube-apiserver presents to extension API servers (KEDA's
# metrics adapter), which trust the user it names in X-Remote-* headers.
make_front_proxy_pki() {
  local pki=$dir/pki
  [ -f "$pki/front-proxy-client.crt" ] && return 0
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt \
      -days 3650 -subj "/CN=vllm-operator-local-front-proxy-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
      -subj "/CN=front-proxy-client" 2>/dev/null
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
      -CAcreateserial -out front-proxy-client.crt -days 3650 -extfile client.cnf -extensions v3 2>/dev/null
  ) || die "creating the front proxy certificates with openssl failed in $pki"
}

write_kubeconfig() { # file user port
  local file=$1 user=$2 port=$3 pki=$dir/pki
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vllm-local
  cluster:
    server: https://$host_ip:$port
    certificate-authority: $pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $pki/$user.crt
    client-key: $pki/$user.key
contexts:
- name: vllm-local
  context: {cluster: vllm-local, user: $user}
current-context: vllm-local
EOF
}

node_manifest() { # index
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: gpu-node-$1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node-role.kubernetes.io/gpu: ""
    type: kwok
    nvidia.com/gpu.present: "true"
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "$gpus_per_node"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "$gpus_per_node"}
  nodeInfo: {architecture: amd64, kubeletVersion: fake, operatingSystem: linux}
  phase: Running
EOF
}

# stop_component NAME: stops one component (its process group) and forgets its pid.
stop_component() {
  local name=$1 f; f=$(pids_file)
  local pid; pid=$(awk -v n="$name" '$1==n {print $2}' "$f" 2>/dev/null || true)
  [ -n "$pid" ] || die "$name is not running (no pid in $f)"
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  awk -v n="$name" '$1!=n' "$f" >"$f.tmp" && mv "$f.tmp" "$f"
}

# start_component NAME: starts a stopped component with the command line `up` started it
# with (same ports and state); for kube-apiserver, waits until it is ready.
start_component() {
  local name=$1 cmd=$dir/cmd/$1
  [ -f "$cmd" ] || die "no saved command line for $name in $dir/cmd (was the cluster started by this script?)"
  ! awk -v n="$name" '$1==n {f=1} END {exit !f}' "$(pids_file)" || die "$name is already running"
  eval "set -- $(cat "$cmd")"
  (setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null 9>&- & echo "$name $!" >>"$(pids_file)")
  [ "$name" = kube-apiserver ] || return 0
  local pid deadline=$((SECONDS + 60))
  pid=$(awk -v n="$name" '$1==n {print $2}' "$(pids_file)")
  until kubectl --kubeconfig "$dir/admin.kubeconfig" --request-timeout=2s get --raw /readyz >/dev/null 2>&1; do
    alive "$pid" || { tail -n 15 "$dir/logs/$name.log" >&2; die "$name exited during restart"; }
    [ $SECONDS -lt $deadline ] || die "$name did not become ready within 60s after restart"
    sleep 0.2
  done
}

up() {
  if healthy; then
    echo "local-cluster: reusing the running cluster ($kubeconfig)" >&2
    return 0
  fi
  teardown  # a previous cluster from this directory that is half up: never leak it
  local bin; bin=$("$here/build.sh")
  case $real_nodes in 0|1) ;; *) die "--real-nodes must be 0 or 1 (got $real_nodes)" ;; esac
  rm -rf "$dir/etcd-data" "$dir/logs"; mkdir -p "$dir/logs"
  node_packages
  if [ "$real_nodes" = 1 ]; then "$here/node-build.sh" >/dev/null; fi
  local t0=$SECONDS
  : >"$(pids_file)"
  for c in ip nsenter; do command -v $c >/dev/null || die "$c not found (Debian: iproute2, util-linux)"; done
  slot_claim
  : >"$dir/ports"
  net_up
  make_pki
  make_front_proxy_pki
  make_node_pki  # the API server's kubelet client certificate is needed without a real node too
  local pki=$dir/pki
  local etcd_port etcd_peer api_port kcm_port sched_port
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
  kcm_port=$(free_port); sched_port=$(free_port)

  if [ "$real_nodes" = 1 ]; then node_runtime_start "$api_port"; fi

  start etcd "$bin/etcd" --data-dir "$dir/etcd-data" --name local \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --quota-backend-bytes 4294967296 \
    --listen-metrics-urls "" --log-level warn
  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

  # Writes by the ServiceAccounts of namespace vllm-audited are audited, so a
  # test can tell which process wrote what (a stalled leader writes nothing
  # after it resumes); everything else is not logged.
  cat > "$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:vllm-audited"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
EOF
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-format json \
    --bind-address "$host_ip" --advertise-address "$host_ip" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" \
    --proxy-client-key-file "$pki/front-proxy-client.key" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC --service-cluster-ip-range "$svc_cidr" \
    --allow-privileged=true \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    --enable-priority-and-fairness=false
  write_kubeconfig "$dir/admin.kubeconfig" admin "$api_port"
  write_kubeconfig "$dir/controller-manager.kubeconfig" controller-manager "$api_port"
  write_kubeconfig "$dir/scheduler.kubeconfig" scheduler "$api_port"
  wait_for kube-apiserver 60 kubectl --kubeconfig "$dir/admin.kubeconfig" --request-timeout=2s get --raw /readyz

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --controllers '*' --use-service-account-credentials=true \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --kube-api-qps 500 --kube-api-burst 1000 --concurrent-deployment-syncs 20 \
    --concurrent-replicaset-syncs 20 --concurrent-gc-syncs 40
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false \
    --kube-api-qps 500 --kube-api-burst 1000
  # kwok plays the fake nodes' kubelet server too, where the API server looks for it
  # (the node's InternalIP, port 10250, TLS): `pods/log` of a kwok pod is the file of
  # kwok-logs/ that the ClusterLogs rule names.
  { cat "$here/kwok-stages.yaml"
    printf -- '---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata:\n  name: vllm-logs\n'
    printf 'spec:\n  logs:\n  - logsFile: %s\n    previousLogsFile: %s\n' \
      "$here/kwok-logs/vllm-running.log" "$here/kwok-logs/vllm-crashed.log"
  } >"$dir/kwok-config.yaml"
  start kwok "$bin/kwok" --kubeconfig "$dir/admin.kubeconfig" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --disregard-status-with-annotation-selector kwok.x-k8s.io/status=custom \
    --cidr "$kwok_first" --node-ip "$host_ip" --node-port 10250 \
    --node-lease-duration-seconds 40 \
    --server-address "$host_ip:10250" --tls-cert-file "$pki/apiserver.crt" \
    --tls-private-key-file "$pki/apiserver.key" --config "$dir/kwok-config.yaml"

  local k="kubectl --kubeconfig $dir/admin.kubeconfig"
  local i
  for i in $(seq 0 $((nodes - 1))); do node_manifest "$i"; echo '---'; done \
    | $k apply -f - >/dev/null || fail_start kube-apiserver "refused the fake nodes"
  wait_for kube-controller-manager 60 \
    bash -c "$k -n default get serviceaccount default"
  wait_for kwok 60 \
    bash -c "[ \$($k get nodes --no-headers 2>/dev/null | grep -cw Ready) -ge $nodes ]"
  local real=""
  if [ "$real_nodes" = 1 ]; then
    node_up
    real=" and real node $node_name ($node_gpus nvidia.com/gpu, label vllm.example.com/node=real, taint vllm.example.com/node=real:NoSchedule)"
  fi
  cp "$dir/admin.kubeconfig" "$kubeconfig"
  echo "local-cluster: up in $((SECONDS - t0))s with $nodes fake GPU nodes ($gpus_per_node nvidia.com/gpu each)$real; KUBECONFIG=$kubeconfig" >&2
}

case "${1:-}" in
  up)
    shift
    while [ $# -gt 0 ]; do
      case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --real-nodes) real_nodes=$2; shift 2 ;;
        *) die "unknown option $1 (usage: cluster.sh up [--nodes N] [--real-nodes 0|1])" ;;
      esac
    done
    mkdir -p "$dir"
    # One start at a time per state directory, so two test binaries never race.
    exec 9>"$dir.lock"
    flock -w 600 9 || die "another start holds $dir.lock for 10 minutes; is a build stuck?"
    up
    ;;
  down)
    mkdir -p "$dir"; exec 9>"$dir.lock"
    flock -w 120 9 || die "another start holds $dir.lock; try again when it finishes"
    teardown; rm -f "$kubeconfig"
    echo "local-cluster: stopped" >&2 ;;
  load-images)
    [ -S "$dir/node/containerd/containerd.sock" ] || die "no real node runs in $dir (cluster.sh up --real-nodes 1)"
    exec 9>"$dir.lock"
    flock -w 120 9 || die "another start holds $dir.lock; try again when it finishes"
    shift; load_images "${1:-}"
    echo "local-cluster: images loaded" >&2 ;;
  autoscaling)
    exec 9>"$dir.lock"
    flock -w 1800 9 || die "another start holds $dir.lock for 30 minutes; is a build stuck?"
    autoscaling_up ;;
  status) healthy ;;
  env) echo "export KUBECONFIG=$kubeconfig" ;;
  stop-component|start-component|restart-apiserver)
    [ -f "$(pids_file)" ] || die "no cluster runs in $dir"
    exec 9>"$dir.lock"
    flock -w 120 9 || die "another start holds $dir.lock; try again when it finishes"
    case $1 in
      stop-component) stop_component "${2:?component name}" ;;
      start-component) start_component "${2:?component name}" ;;
      restart-apiserver)
        stop_component kube-apiserver
        echo "local-cluster: kube-apiserver stopped for ${2:-15}s" >&2
        sleep "${2:-15}"
        start_component kube-apiserver
        echo "local-cluster: kube-apiserver ready again" >&2 ;;
    esac ;;
  *) echo "usage: $0 up [--nodes N] [--real-nodes 0|1] | autoscaling | down | load-images [--cargo] | status | env | stop-component NAME | start-component NAME | restart-apiserver [SECONDS]" >&2; exit 2 ;;
esac
