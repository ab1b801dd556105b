# The local cluster's network and its real node; sourced by cluster.sh (which
# defines dir, start, wait_for, fail_start, stop_component, pids_file).
# See docs/local-cluster.md for the design.
#
# Each cluster directory that runs claims a slot s (0..7) in /run/vllm-operator/slots.
# The slot fixes the cluster's addresses, all in 198.18.0.0/15, so two clusters
# (the shared test cluster and a test's own) never collide:
#
#   198.18.0.(4s+1)/30   host end of veth vllm<s>-h: kube-apiserver listens and advertises here
#   198.18.0.(4s+2)/30   node end (netns vllm-s<s>): the real node's InternalIP, kubelet, kube-proxy
#   198.18.(16+s).0/24   real node's pod CIDR (bridge vllmbr0 inside the netns, host-local IPAM)
#   198.18.(128+16s).0/20  kwok's fake pod IPs (routed into the netns, unreachable there)
#   198.19.(32s).0/19    Service CIDR; .1 is the `kubernetes` Service
#
# The real node's processes (containerd, kubelet, kube-proxy) run in the network
# namespace vllm-s<s> (entered with nsenter --net, so they share the host's mount
# namespace and cgroups): their iptables rules, bridge and veths live in that
# namespace and go with it. The host gets only the veth and routes through it.
# Nothing is added to the host's iptables.

slot_root=/run/vllm-operator/slots
max_slots=8

# Sets the slot's names and addresses from $slot.
slot_vars() {
  local s=$slot
  netns=vllm-s$s
  veth_host=vllm$s-h
  veth_node=vllm$s-n
  host_ip=198.18.0.$((4 * s + 1))
  node_ip=198.18.0.$((4 * s + 2))
  pod_cidr=198.18.$((16 + s)).0/24
  kwok_cidr=198.18.$((128 + 16 * s)).0/20
  kwok_first=198.18.$((128 + 16 * s)).1/20
  svc_cidr=198.19.$((32 * s)).0/19
  svc_ip=198.19.$((32 * s)).1
}

# A slot is held while its claimer's state directory is locked (an `up` or
# `down` runs) or has a live component.
slot_in_use() { # claimer-dir
  local d=$1 p
  [ -d "$d" ] || return 1
  if [ -e "$d.lock" ] && ! flock -n "$d.lock" true 2>/dev/null; then return 0; fi
  [ -f "$d/pids" ] || return 1
  for p in $(awk '{print $2}' "$d/pids"); do alive "$p" && return 0; done
  return 1
}

# Claims a slot for $dir (its own from a previous start when still recorded).
slot_claim() {
  mkdir -p "$slot_root"
  exec 7>"$slot_root/.lock"
  flock -w 60 7 || die "another cluster holds $slot_root/.lock"
  slot=
  if [ -f "$dir/slot" ]; then
    local s; s=$(cat "$dir/slot")
    [ "$(cat "$slot_root/$s" 2>/dev/null)" = "$dir" ] && slot=$s
  fi
  if [ -z "$slot" ]; then
    local s owner
    for s in $(seq 0 $((max_slots - 1))); do
      owner=$(cat "$slot_root/$s" 2>/dev/null || true)
      if [ -z "$owner" ] || { [ "$owner" != "$dir" ] && ! slot_in_use "$owner"; }; then
        slot=$s; break
      fi
    done
    [ -n "$slot" ] || die "all $max_slots cluster slots in $slot_root are in use (clusters: $(cat "$slot_root"/[0-9]* | tr '\n' ' '))"
    echo "$dir" >"$slot_root/$slot"
    echo "$slot" >"$dir/slot"
  fi
  exec 7>&-
  slot_vars
}

slot_release() {
  [ -f "$dir/slot" ] || return 0
  local s; s=$(cat "$dir/slot")
  [ "$(cat "$slot_root/$s" 2>/dev/null)" = "$dir" ] && rm -f "$slot_root/$s"
  rm -f "$dir/slot"
}

# The slot's names when $dir holds one (for down); returns 1 when it holds none.
slot_owned() {
  [ -f "$dir/slot" ] || return 1
  slot=$(cat "$dir/slot")
  [ "$(cat "$slot_root/$slot" 2>/dev/null)" = "$dir" ] || return 1
  slot_vars
}

nsx() { nsenter --net="/run/netns/$netns" -- "$@"; }

# Debian packages the real node needs, installed when missing.
node_packages() {
  local missing=() p
  for p in containerd:containerd runc:runc iptables:iptables conntrack:conntrack nsenter:util-linux; do
    command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p#*:}")
  done
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "local-cluster: installing ${missing[*]} (apt-get) for the real node ..." >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
       >"$dir/logs/apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update >>"$dir/logs/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
      >>"$dir/logs/apt.log" 2>&1 \
      || die "apt-get install ${missing[*]} failed; log: $dir/logs/apt.log"
  fi
}

# The network namespace, veth pair, routes and the egress guard.
net_up() {
  net_down_quiet
  {
    ip netns add "$netns" &&
    ip link add "$veth_host" type veth peer name "$veth_node" netns "$netns" &&
    sysctl -qw "net.ipv6.conf.$veth_host.disable_ipv6=1" &&
    ip addr add "$host_ip/30" dev "$veth_host" &&
    ip link set "$veth_host" up &&
    nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 &&
    nsx ip link set lo up &&
    nsx ip addr add "$node_ip/30" dev "$veth_node" &&
    nsx ip link set "$veth_node" up &&
    nsx ip route add default via "$host_ip" &&
    nsx ip route add unreachable "$kwok_cidr" &&
    ip route add "$pod_cidr" via "$node_ip" dev "$veth_host" &&
    ip route add "$svc_cidr" via "$node_ip" dev "$veth_host" &&
    ip route add "$kwok_cidr" via "$node_ip" dev "$veth_host" &&
    nsx sysctl -qw net.ipv4.ip_forward=1 &&
    # Nothing in the node's namespace (its processes or its pods) sends
    # anywhere but 198.18.0.0/15 and loopback.
    nsx iptables -w -N VLLM-EGRESS &&
    nsx iptables -w -A VLLM-EGRESS -d 198.18.0.0/15 -j RETURN &&
    nsx iptables -w -A VLLM-EGRESS -d 127.0.0.0/8 -j RETURN &&
    nsx iptables -w -A VLLM-EGRESS -j REJECT -m comment --comment "vllm-local: only 198.18.0.0/15" &&
    nsx iptables -w -I OUTPUT -j VLLM-EGRESS -m comment --comment vllm-local-egress &&
    nsx iptables -w -I FORWARD -j VLLM-EGRESS -m comment --comment vllm-local-egress
  } >"$dir/logs/network.log" 2>&1 || {
    echo "local-cluster: error: network (netns $netns, veth $veth_host) could not be set up; log: $dir/logs/network.log" >&2
    teardown; exit 1
  }
  # br_netfilter: Service traffic between pods on the bridge passes iptables.
  modprobe br_netfilter 2>/dev/null || true
  nsx sysctl -qw net.bridge.bridge-nf-call-iptables=1 >>"$dir/logs/network.log" 2>&1 || true
}

net_down_quiet() {
  ip netns del "$netns" 2>/dev/null || true
  ip link del "$veth_host" 2>/dev/null || true
}

node_name=real-node-0
node_gpus=${VLLM_CLUSTER_REAL_GPUS:-4}
sandbox_image=localhost/pause:dev

node_paths() {
  nd=$dir/node
  ctrd_root=$nd/containerd/root
  ctrd_state=$nd/containerd/state
  ctrd_sock=$nd/containerd/containerd.sock
  runc_root=$nd/containerd/runc
  cni_conf=$nd/cni/net.d
  cni_bin=${VLLM_CLUSTER_CNI_BIN:-/usr/lib/cni}
  kubelet_root=$nd/kubelet
}

make_node_pki() {
  local pki=$dir/pki who n subj
  for who in "kubelet:/O=system:nodes/CN=system:node:$node_name" \
             "kube-proxy:/CN=system:kube-proxy" \
             "apiserver-kubelet-client:/O=system:masters/CN=kube-apiserver-kubelet-client"; do
    n=${who%%:*} subj=${who#*:}
    [ -f "$pki/$n.crt" ] && continue
    (cd "$pki" &&
      openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "$subj" 2>/dev/null &&
      openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$n.crt" \
        -days 3650 -extfile client.cnf -extensions v3 2>/dev/null) || die "creating the $n certificate failed in $pki"
  done
}

write_node_config() { # api_port
  local api_port=$1
  node_paths
  rm -rf "$nd"
  mkdir -p "$ctrd_root" "$ctrd_state" "$runc_root" "$cni_conf" "$nd/cni/ipam" "$kubelet_root" "$nd/pod-logs"
  [ ${#ctrd_sock} -lt 100 ] || die "the containerd socket path $ctrd_sock is too long for a unix socket; use a shorter VLLM_CLUSTER_DIR"
  local cbin=/usr/bin/containerd
  [ "${VLLM_CLUSTER_FAULT:-}" = containerd ] && cbin=/nonexistent/containerd
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$ctrd_root"
state = "$ctrd_state"
oom_score = 0
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$ctrd_sock"
[ttrpc]
  address = "$ctrd_sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox_image"
  # These machines refuse lowering oom_score_adj: without this runc fails with
  # "failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$runc_root"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$cni_conf"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
EOF
  echo "$cbin" >"$nd/containerd.bin"
  cat >"$cni_conf/10-vllm-local.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "vllm-local",
  "plugins": [
    {"type": "bridge", "bridge": "vllmbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$nd/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # Pods' resolv.conf: there is no cluster DNS. The name server is the host's
  # end of the veth, where nothing listens on port 53, so a lookup fails at once
  # and never reaches the machine's resolver.
  printf 'nameserver %s\noptions ndots:1 timeout:1 attempts:1\n' "$host_ip" >"$nd/resolv.conf"
  local pki=$dir/pki
  write_kubeconfig "$dir/kubelet.kubeconfig" kubelet "$api_port"
  write_kubeconfig "$dir/kube-proxy.kubeconfig" kube-proxy "$api_port"
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$ctrd_sock
# These machines have cgroup v1 controllers, and the node must not create or
# change cgroups above its containers'.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$host_ip]
resolvConf: $nd/resolv.conf
podLogsDir: $nd/pod-logs
volumePluginDir: $kubelet_root/volume-plugins
registerNode: true
registerWithTaints:
- {key: vllm.example.com/node, value: real, effect: NoSchedule}
maxPods: 50
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Absolute, small thresholds: the machine's shared disk can run low (1 % of 252G is 2.5G),
# and a node under DiskPressure taints itself and refuses every test pod.
evictionHard: {memory.available: 100Mi, nodefs.available: 512Mi, imagefs.available: 512Mi, nodefs.inodesFree: 1%}
makeIPTablesUtilChains: true
shutdownGracePeriod: 0s
EOF
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $pod_cidr
bindAddress: $node_ip
healthzBindAddress: $node_ip:10256
metricsBindAddress: $node_ip:10249
# Leave the kernel's conntrack sysctls as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# One line naming the component and its log, then everything made is removed.
node_fail() { # name why [log]
  local name=$1 why=$2 log=${3:-$dir/logs/$1.log}
  local last
  last=$(grep -iE 'error|fail|fatal|no such|denied|not found' "$log" 2>/dev/null | tail -n1 | cut -c1-300 || true)
  [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$log" 2>/dev/null | tail -n1 | cut -c1-300 || true)
  echo "local-cluster: error: $name $why${last:+ (\"$last\")}; log: $log" >&2
  teardown
  exit 1
}

node_wait() { # name timeout check...
  local name=$1 timeout=$2; shift 2
  local pid; pid=$(awk -v n="$name" '$1==n {print $2}' "$(pids_file)")
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    alive "$pid" || node_fail "$name" "exited during start"
    [ $SECONDS -lt $deadline ] || node_fail "$name" "did not become ready within ${timeout}s"
    sleep 0.2
  done
}

ctr_() { ctr -a "$ctrd_sock" -n k8s.io "$@"; }

# Builds the images (unchanged ones are not rebuilt) and imports into the node's
# containerd those it does not have at the same digest.
load_images() { # [--cargo]
  node_paths
  local line name tar digest have out
  out=$("$repo/hack/images/build.sh" ${1:-} pause busybox 2>>"$dir/logs/images.log") \
    || node_fail images "could not be built" "$dir/logs/images.log"
  local others
  # hf-0.36 and hf-2: the real hf clients and the stand-in Hub (model_fetch.rs); their first
  # build needs PyPI, so a failure is a note too.
  for w in vllm-sim operator hf-0.36 hf-2; do
    if others=$("$repo/hack/images/build.sh" ${1:-} "$w" 2>>"$dir/logs/images.log"); then
      out+=$'\n'$others
    else
      echo "local-cluster: note: image $w not loaded: $(tail -n1 "$dir/logs/images.log")" >&2
    fi
  done
  while read -r name tar digest; do
    [ -n "$name" ] || continue
    have=$(ctr_ images ls "name==$name" 2>/dev/null | awk 'NR>1 {print $3}')
    if [ "$have" = "$digest" ]; then continue; fi
    ctr_ images import "$tar" >>"$dir/logs/images.log" 2>&1 \
      || node_fail images "import of $name failed" "$dir/logs/images.log"
    echo "imported $name ($digest)" >>"$dir/logs/images.log"
  done <<<"$out"
}

# CNI: checks the plugins and the configuration by running the bridge plugin
# once (ADD, then DEL) in a throwaway namespace inside the node's.
cni_check() {
  local log=$dir/logs/cni.log p
  : >"$log"
  for p in bridge host-local portmap loopback; do
    [ -x "$cni_bin/$p" ] || { echo "CNI plugin $cni_bin/$p not found" >>"$log"; node_fail CNI "plugin $p is missing" "$log"; }
  done
  local probe=vllm-s$slot-probe conf
  conf=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); p=c["plugins"][0]; p["cniVersion"]=c["cniVersion"]; p["name"]=c["name"]; p["ipam"]["dataDir"]+="-probe"; print(json.dumps(p))' \
         "$cni_conf/10-vllm-local.conflist")
  ip netns del "$probe" 2>/dev/null || true
  ip netns add "$probe" || node_fail CNI "probe namespace could not be made" "$log"
  local env=(CNI_CONTAINERID=probe CNI_NETNS=/run/netns/$probe CNI_IFNAME=eth0 CNI_PATH=$cni_bin)
  if ! echo "$conf" | nsx env "${env[@]}" CNI_COMMAND=ADD "$cni_bin/bridge" >>"$log" 2>&1; then
    ip netns del "$probe" 2>/dev/null || true
    node_fail CNI "bridge plugin failed (ADD)" "$log"
  fi
  echo "$conf" | nsx env "${env[@]}" CNI_COMMAND=DEL "$cni_bin/bridge" >>"$log" 2>&1 || true
  ip netns del "$probe" 2>/dev/null || true
  rm -rf "$nd/cni/ipam-probe"
}

# Starts containerd (not waiting for it: the control plane starts meanwhile).
node_runtime_start() { # api_port
  make_node_pki
  write_node_config "$1"
  start containerd nsenter --net="/run/netns/$netns" -- "$(cat "$nd/containerd.bin")" --config "$nd/containerd.toml"
}

node_up() {
  local nbin k="kubectl --kubeconfig $dir/admin.kubeconfig"
  nbin=$("$here/node-build.sh") || { teardown; exit 1; }
  node_paths
  node_wait containerd 30 ctr -a "$ctrd_sock" version
  load_images
  cni_check

  local kubelet_extra=()
  [ "${VLLM_CLUSTER_FAULT:-}" = kubelet ] && kubelet_extra=(--no-such-flag)
  start kubelet nsenter --net="/run/netns/$netns" -- "$nbin/kubelet" --config "$nd/kubelet.yaml" \
    --kubeconfig "$dir/kubelet.kubeconfig" --root-dir "$kubelet_root" --cert-dir "$kubelet_root/pki" \
    --hostname-override "$node_name" --node-ip "$node_ip" \
    --node-labels vllm.example.com/node=real -v 1 "${kubelet_extra[@]}"
  node_wait kubelet 60 bash -c "$k get node $node_name -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"

  # nvidia.com/gpu: an extended resource advertised the documented way (a
  # PATCH of the node's status); the advertiser re-applies it whenever the
  # kubelet resets it (it does when it registers again after a restart).
  start gpu-advertiser "$here/gpu-advertiser.sh" "$dir/admin.kubeconfig" "$node_name" "$node_gpus"
  node_wait gpu-advertiser 30 bash -c "[ \"\$($k get node $node_name -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')\" = $node_gpus ]"

  local proxy_extra=()
  [ "${VLLM_CLUSTER_FAULT:-}" = kube-proxy ] && proxy_extra=(--no-such-flag)
  start kube-proxy nsenter --net="/run/netns/$netns" -- "$nbin/kube-proxy" --config "$nd/kube-proxy.yaml" \
    -v 1 "${proxy_extra[@]}"
  # Ready when the host reaches the API server through the `kubernetes` Service's ClusterIP.
  node_wait kube-proxy 60 curl -s --max-time 1 --cacert "$dir/pki/ca.crt" -o /dev/null "https://$svc_ip/readyz"
}

# Stops the node's processes, its containers (whatever containerd's shims or
# runc still run) and unmounts what it mounted under $dir. Safe to run twice.
node_down() {
  node_paths
  local n
  for n in kube-proxy gpu-advertiser kubelet; do
    awk -v n="$n" '$1==n {f=1} END {exit !f}' "$(pids_file)" 2>/dev/null && stop_component "$n"
  done
  if [ -S "$ctrd_sock" ] && ctr -a "$ctrd_sock" version >/dev/null 2>&1; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  awk '$1=="containerd" {f=1} END {exit !f}' "$(pids_file)" 2>/dev/null && stop_component containerd
  # Shims of this containerd (their command line names its socket).
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "-address $ctrd_sock" && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
  if [ -d "$runc_root" ]; then
    local r c
    for r in "$runc_root"/*/; do
      [ -d "$r" ] || continue
      for c in $(runc --root "$r" list -q 2>/dev/null); do runc --root "$r" delete --force "$c" >/dev/null 2>&1 || true; done
    done
  fi
  # Mounts under the cluster directory (overlay rootfs, shm, pod netns, volumes), deepest first.
  local m
  for _ in 1 2 3; do
    m=$(awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-)
    [ -n "$m" ] || break
    while read -r p; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done <<<"$m"
  done
  # The kubelet links container logs from the fixed /var/log/containers.
  if [ -d /var/log/containers ]; then
    for p in /var/log/containers/*; do
      [ -L "$p" ] && case $(readlink "$p") in "$dir"/*) rm -f "$p" ;; esac
    done
    rmdir /var/log/containers 2>/dev/null || true
  fi
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
}

# Everything `up` made, in order: node, components, network, slot.
teardown() {
  if [ -d "$dir/node" ]; then node_down; fi
  stop_all
  if slot_owned; then net_down_quiet; ip netns del "vllm-s$slot-probe" 2>/dev/null || true; fi
  slot_release
}
