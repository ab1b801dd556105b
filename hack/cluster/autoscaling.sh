# The autoscaling pipeline beside the local control plane (sourced by cluster.sh;
# `cluster.sh autoscaling` starts it): a Prometheus server that scrapes the vLLM
# (simulator) pods on the real node, and KEDA's operator and metrics API server,
# all built once per machine from their Go modules (hack/tools/prometheus.sh,
# hack/tools/keda.sh) and run as host processes recorded in the cluster's pids
# file, so `cluster.sh down` stops them with the rest. docs/autoscaling.md
# describes the wiring.
#
# State in $dir/autoscaling/: certificates (pki/), prometheus.yml, Prometheus'
# TSDB, file_sd targets (targets/*.json: tests add scrape targets there, e.g. an
# activation signal), rule files (rules/*.yaml, loaded on POST /-/reload), and
# `env`, which tells tests where everything listens:
#   PROMETHEUS_URL=http://127.0.0.1:PORT
#   PROMETHEUS_TARGETS_DIR=... PROMETHEUS_RULES_DIR=...

autoscaling_dir() { echo "$dir/autoscaling"; }

# Certificates for KEDA: the operator's gRPC metrics service and the adapter (its
# client, and the aggregated API server) share one key pair with serverAuth and
# clientAuth, as KEDA's own certificate manager makes it (ca.crt, tls.crt, tls.key
# in one directory). The names are those KEDA's chart uses, plus 127.0.0.1.
keda_pki() {
  local pki; pki=$(autoscaling_dir)/pki
  [ -f "$pki/tls.crt" ] && return 0
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/O=KEDAORG/CN=KEDA" 2>/dev/null
    cat >tls.cnf <<'EOF'
[v3]
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:keda-operator.keda.svc,DNS:keda-operator.keda.svc.cluster.local,DNS:keda-metrics-apiserver.keda.svc,DNS:keda-metrics-apiserver.keda.svc.cluster.local
extendedKeyUsage=serverAuth,clientAuth
EOF
    openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/O=KEDAORG/CN=keda-operator" 2>/dev/null
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt \
      -days 3650 -extfile tls.cnf -extensions v3 2>/dev/null
  ) || die "creating KEDA's certificates with openssl failed in $pki"
}

# prometheus.yml: the simulator pods behind this operator's Services (port `http`,
# on the real node: kwok pods have no reachable address), with the labels the
# Prometheus Operator gives a ServiceMonitor's targets (namespace, service, pod,
# endpoint), every 2 s; file_sd targets that tests add; their rule files.
prometheus_config() { # file
  local a; a=$(autoscaling_dir)
  cat >"$1" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files:
  - $a/rules/*.yaml
scrape_configs:
  - job_name: vllm-services
    kubernetes_sd_configs:
      - role: endpointslice
        kubeconfig_file: $dir/admin.kubeconfig
    relabel_configs:
      - source_labels: [__meta_kubernetes_endpointslice_port_name]
        regex: http
        action: keep
      - source_labels: [__meta_kubernetes_endpointslice_endpoint_node_name]
        regex: real-node-.*
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_service_name]
        target_label: service
      - source_labels: [__meta_kubernetes_service_name]
        target_label: job
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_endpointslice_port_name]
        target_label: endpoint
  - job_name: test-signals
    file_sd_configs:
      - files: [$a/targets/*.json]
EOF
}

autoscaling_up() {
  healthy || die "no healthy cluster in $dir: run cluster.sh up first"
  local a prom keda_op keda_ad keda_wh k
  a=$(autoscaling_dir)
  k="kubectl --kubeconfig $dir/admin.kubeconfig"
  if grep -q '^prometheus ' "$(pids_file)"; then
    echo "local-cluster: the autoscaling pipeline already runs ($a/env)" >&2
    return 0
  fi
  local t0=$SECONDS
  prom=$("$repo/hack/tools/prometheus.sh" --build) || die "building Prometheus failed"
  { read -r keda_op; read -r keda_ad; read -r keda_wh; } < <("$repo/hack/tools/keda.sh" --build) \
    || die "building KEDA failed"
  [ -x "$keda_op" ] && [ -x "$keda_ad" ] && [ -x "$keda_wh" ] || die "hack/tools/keda.sh printed no binaries"
  rm -rf "$a/prometheus-data"; mkdir -p "$a/targets" "$a/rules" "$a/prometheus-data"
  keda_pki

  # KEDA's CRDs (all six: its operator watches every kind), from the Go module.
  local f files=()
  while read -r f; do files+=(-f "$f"); done < <("$here/crds.sh" keda)
  $k apply --server-side --force-conflicts --field-manager=local-cluster "${files[@]}" >/dev/null \
    || die "installing KEDA's CRDs failed"
  $k wait --for=condition=Established --timeout=60s "${files[@]}" >/dev/null \
    || die "KEDA's CRDs did not become established"
  $k create namespace keda --dry-run=client -o yaml | $k apply -f - >/dev/null

  local prom_port op_grpc op_metrics op_probe ad_port ad_metrics wh_port wh_metrics wh_probe
  prom_port=$(free_port); op_grpc=$(free_port); op_metrics=$(free_port)
  op_probe=$(free_port); ad_port=$(free_port); ad_metrics=$(free_port)
  wh_port=$(free_port); wh_metrics=$(free_port); wh_probe=$(free_port)

  prometheus_config "$a/prometheus.yml"
  start prometheus "$prom" --config.file "$a/prometheus.yml" \
    --storage.tsdb.path "$a/prometheus-data" --storage.tsdb.retention.time 2h \
    --web.listen-address "127.0.0.1:$prom_port" --web.enable-lifecycle
  wait_for prometheus 60 curl -sf "http://127.0.0.1:$prom_port/-/ready"

  # The operator and the adapter watch every namespace; KEDA's own objects in `keda`.
  start keda-operator env KUBECONFIG="$dir/admin.kubeconfig" WATCH_NAMESPACE="" \
    KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda \
    "$keda_op" --leader-elect=false --zap-log-level=info \
    --metrics-bind-address "127.0.0.1:$op_metrics" --health-probe-bind-address "127.0.0.1:$op_probe" \
    --metrics-service-bind-address "127.0.0.1:$op_grpc" --cert-dir "$a/pki" \
    --enable-cert-rotation=false
  wait_for keda-operator 90 curl -sf "http://127.0.0.1:$op_probe/readyz"

  start keda-adapter env KUBECONFIG="$dir/admin.kubeconfig" WATCH_NAMESPACE="" \
    KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda \
    "$keda_ad" --secure-port "$ad_port" --bind-address 127.0.0.1 \
    --cert-dir "$a/pki" --tls-cert-file "$a/pki/tls.crt" --tls-private-key-file "$a/pki/tls.key" \
    --client-ca-file "$a/pki/ca.crt" \
    --lister-kubeconfig "$dir/admin.kubeconfig" \
    --authentication-kubeconfig "$dir/admin.kubeconfig" \
    --authorization-kubeconfig "$dir/admin.kubeconfig" \
    --metrics-service-address "127.0.0.1:$op_grpc" --port "$ad_metrics"

  # The aggregation layer reaches the adapter through a Service of type
  # ExternalName (kube-apiserver runs on this host; aggregator routing is off, so
  # it dials the name and the APIService's port), verifying the certificate as
  # keda-metrics-apiserver.keda.svc against KEDA's CA.
  local ca_bundle; ca_bundle=$(base64 -w0 "$a/pki/ca.crt")
  $k apply -f - >/dev/null <<EOF || die "registering KEDA's metrics API server failed"
apiVersion: v1
kind: Service
metadata:
  name: keda-metrics-apiserver
  namespace: keda
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports:
    - name: https
      port: $ad_port
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.external.metrics.k8s.io
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: $ca_bundle
  service:
    name: keda-metrics-apiserver
    namespace: keda
    port: $ad_port
EOF
  wait_for keda-adapter 90 bash -c \
    "$k get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type==\"Available\")].status}' | grep -qx True"

  # KEDA's admission webhook for ScaledObjects (it refuses, e.g., a second autoscaler for
  # one target), called by URL; failurePolicy Fail, so nothing passes it unchecked.
  start keda-webhooks env KUBECONFIG="$dir/admin.kubeconfig" POD_NAMESPACE=keda \
    "$keda_wh" --port "$wh_port" --cert-dir "$a/pki" \
    --metrics-bind-address "127.0.0.1:$wh_metrics" --health-probe-bind-address "127.0.0.1:$wh_probe"
  wait_for keda-webhooks 90 curl -sf "http://127.0.0.1:$wh_probe/readyz"
  $k apply -f - >/dev/null <<EOF || die "registering KEDA's admission webhook failed"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: keda-admission
webhooks:
  - name: vscaledobject.kb.io
    admissionReviewVersions: [v1]
    clientConfig:
      url: https://127.0.0.1:$wh_port/validate-keda-sh-v1alpha1-scaledobject
      caBundle: $ca_bundle
    failurePolicy: Fail
    matchPolicy: Equivalent
    rules:
      - apiGroups: [keda.sh]
        apiVersions: [v1alpha1]
        operations: [CREATE, UPDATE]
        resources: [scaledobjects]
    sideEffects: None
    timeoutSeconds: 10
EOF

  cat >"$a/env" <<EOF
PROMETHEUS_URL=http://127.0.0.1:$prom_port
PROMETHEUS_TARGETS_DIR=$a/targets
PROMETHEUS_RULES_DIR=$a/rules
EOF
  echo "local-cluster: autoscaling pipeline up in $((SECONDS - t0))s: Prometheus http://127.0.0.1:$prom_port, KEDA operator, metrics API server (v1beta1.external.metrics.k8s.io) and admission webhook; $a/env" >&2
}
