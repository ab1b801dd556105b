//! The local cluster's real node (hack/cluster/node.sh, docs/local-cluster.md):
//! a pod with a GPU limit runs there from a locally built image, becomes Ready
//! only when its HTTP readiness probe passes, is reachable from the host through
//! a ClusterIP Service, has logs, reaches the API server through the
//! `kubernetes` Service, and `cluster.sh down` leaves nothing behind. A node
//! component that cannot start fails `up` with one line naming it and its log,
//! and leaves nothing behind either.
//!
//! Each test runs a cluster of its own (VLLM_CLUSTER_DIR=target/cluster-<name>),
//! beside the shared one: cluster.sh gives every running cluster directory its
//! own slot of addresses, network namespace and veth names.

use std::{
    collections::BTreeSet,
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use testkit::repo_root;

struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let c = Cluster {
            dir: repo_root().join("target").join(format!("cluster-{name}")),
        };
        let _ = c.sh(&["down"], &[]);
        c
    }

    fn sh(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(repo_root().join("hack/cluster/cluster.sh"));
        cmd.args(args)
            .env("VLLM_CLUSTER_DIR", &self.dir)
            .env("VLLM_CLUSTER_NODES", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("cluster.sh runs")
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn kubectl_stdin(&self, args: &[&str], stdin: &str) {
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn slot(&self) -> String {
        std::fs::read_to_string(self.dir.join("slot"))
            .expect("a running cluster records its slot")
            .trim()
            .to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.sh(&["down"], &[]);
    }
}

fn sh(script: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", script])
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The host's iptables rules (all tables, without counters): the cluster adds none.
fn host_iptables() -> BTreeSet<String> {
    sh("iptables-save 2>/dev/null; ip6tables-save 2>/dev/null")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            // Chain lines carry counters: ":KUBE-X - [0:0]".
            l.split(" [").next().unwrap_or(l).to_string()
        })
        .collect()
}

/// What identifies the slot's network namespace and host veth while they exist.
fn net_identity(slot: &str) -> (Option<String>, Option<String>) {
    let ns = std::fs::metadata(format!("/run/netns/vllm-s{slot}"))
        .ok()
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino().to_string()
        });
    let link = std::fs::read_to_string(format!("/sys/class/net/vllm{slot}-h/ifindex"))
        .ok()
        .map(|s| s.trim().to_string());
    (ns, link)
}

/// Everything a cluster directory may leave behind; empty when nothing is left.
fn leftovers(
    dir: &Path,
    net: &(Option<String>, Option<String>),
    slot: &str,
    iptables_before: &BTreeSet<String>,
    container_ids: &[String],
) -> Vec<String> {
    let mut left = Vec::new();
    let d = dir.to_string_lossy().to_string();
    // Processes: a command line naming the directory, or a root/cwd inside it
    // (a container's processes have their root in a rootfs under it).
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().to_string();
        if !pid.chars().all(|c| c.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let p = entry.path();
        let cmdline = std::fs::read(p.join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let root = std::fs::read_link(p.join("root")).unwrap_or_default();
        let cwd = std::fs::read_link(p.join("cwd")).unwrap_or_default();
        // The directory as a whole path (…/cluster-realnode must not match the
        // …/cluster-realnode-faults of the test running beside this one).
        let names_dir = cmdline.contains(&format!("{d}/")) || cmdline.split(' ').any(|a| a == d);
        if names_dir || root.starts_with(dir) || cwd.starts_with(dir) {
            left.push(format!("process {pid}: {cmdline}"));
        }
    }
    for line in std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
    {
        if let Some(mp) = line.split(' ').nth(4)
            && mp.starts_with(&format!("{d}/"))
        {
            left.push(format!("mount {mp}"));
        }
    }
    let now = net_identity(slot);
    if net.0.is_some() && now.0 == net.0 {
        left.push(format!("network namespace vllm-s{slot}"));
    }
    if net.1.is_some() && now.1 == net.1 {
        left.push(format!("veth vllm{slot}-h"));
    }
    if let Ok(owner) = std::fs::read_to_string(format!("/run/vllm-operator/slots/{slot}"))
        && owner.trim() == d
    {
        left.push(format!("slot {slot} still claimed"));
    }
    let after = host_iptables();
    for r in after.difference(iptables_before) {
        left.push(format!("host iptables rule {r}"));
    }
    if let Ok(links) = std::fs::read_dir("/var/log/containers") {
        for l in links.flatten() {
            if std::fs::read_link(l.path()).is_ok_and(|t| t.starts_with(dir)) {
                left.push(format!("log link {}", l.path().display()));
            }
        }
    }
    for id in container_ids {
        let found = sh(&format!(
            "find /sys/fs/cgroup -maxdepth 6 -type d -name '*{id}*' 2>/dev/null"
        ));
        if !found.trim().is_empty() {
            left.push(format!("cgroup {}", found.trim()));
        }
    }
    left
}

fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

const POD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: realnode}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: realnode, labels: {app: web}}
spec:
  nodeSelector: {vllm.example.com/node: real}
  tolerations: [{key: vllm.example.com/node, operator: Equal, value: real, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: localhost/busybox:dev
    imagePullPolicy: Never
    command: [/bin/busybox, sh, -c, "mkdir -p /tmp/www && echo hello from the real node >/tmp/www/index.html && echo serving on 8080 && exec /bin/busybox httpd -f -v -p 8080 -h /tmp/www"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1, failureThreshold: 1}
    resources: {limits: {nvidia.com/gpu: "1"}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: realnode}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

#[test]
fn real_node_runs_a_gpu_pod_behind_a_service_and_down_leaves_nothing() {
    let iptables_before = host_iptables();
    let c = Cluster::new("realnode");
    let up = c.sh(&["up"], &[]);
    assert!(
        up.status.success(),
        "cluster.sh up failed:\n{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let slot = c.slot();
    let net = net_identity(&slot);
    assert!(
        net.0.is_some() && net.1.is_some(),
        "no netns/veth for slot {slot}"
    );

    // The node: Ready, labelled, tainted, 4 GPUs, an InternalIP in 198.18.0.0/15.
    let node = c.kubectl_ok(&[
        "get", "node", "real-node-0", "-o",
        "jsonpath={.metadata.labels.vllm\\.example\\.com/node} {.status.capacity.nvidia\\.com/gpu} {.status.allocatable.nvidia\\.com/gpu} {.spec.taints[0].key} {.status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    let f: Vec<&str> = node.split_whitespace().collect();
    assert_eq!(
        &f[..4],
        &["real", "4", "4", "vllm.example.com/node"],
        "{node}"
    );
    assert!(f[4].starts_with("198.18."), "{node}");

    c.kubectl_stdin(&["apply", "-f", "-"], POD);
    c.kubectl_ok(&[
        "-n",
        "realnode",
        "wait",
        "pod/web",
        "--for=jsonpath={.status.phase}=Running",
        "--timeout=90s",
    ]);
    // Running, but not Ready: /ready does not exist yet, so the probe fails.
    let ready = c.kubectl_ok(&[
        "-n",
        "realnode",
        "get",
        "pod",
        "web",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.spec.nodeName}",
    ]);
    assert_eq!(ready.trim(), "False real-node-0");
    c.kubectl_ok(&[
        "-n",
        "realnode",
        "exec",
        "web",
        "--",
        "/bin/busybox",
        "touch",
        "/tmp/www/ready",
    ]);
    c.kubectl_ok(&[
        "-n",
        "realnode",
        "wait",
        "pod/web",
        "--for=condition=Ready",
        "--timeout=60s",
    ]);

    // The ClusterIP from the host (kube-proxy programs it once the endpoint is ready).
    let ip = c.kubectl_ok(&[
        "-n",
        "realnode",
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert!(ip.starts_with("198.19."), "ClusterIP {ip}");
    let addr = format!("{ip}:80");
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        match http_get(&addr, "/index.html") {
            Ok(b) if b.contains("hello from the real node") => break b,
            other if Instant::now() > deadline => panic!("GET http://{addr}/: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(
        body.starts_with("HTTP/1.") && body.contains(" 200 "),
        "{body}"
    );

    let logs = c.kubectl_ok(&["-n", "realnode", "logs", "web"]);
    assert!(logs.contains("serving on 8080"), "logs: {logs}");

    // The API server through the `kubernetes` Service, from inside the pod
    // (busybox's TLS client cannot talk to Go's TLS server; a plain HTTP request
    // to the HTTPS port gets the API server's own answer to that).
    let answer = c.kubectl_ok(&[
        "-n",
        "realnode",
        "exec",
        "web",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        "printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT",
    ]);
    assert!(
        answer.contains("Client sent an HTTP request to an HTTPS server"),
        "{answer}"
    );
    let host = c.kubectl_ok(&[
        "-n",
        "realnode",
        "exec",
        "web",
        "--",
        "/bin/busybox",
        "sh",
        "-c",
        "echo $KUBERNETES_SERVICE_HOST",
    ]);
    assert!(
        host.starts_with("198.19."),
        "KUBERNETES_SERVICE_HOST={host}"
    );
    let resolv = c.kubectl_ok(&[
        "-n",
        "realnode",
        "exec",
        "web",
        "--",
        "/bin/busybox",
        "cat",
        "/etc/resolv.conf",
    ]);
    assert!(resolv.contains("nameserver 198.18."), "{resolv}");

    // The GPU capacity survives a kubelet restart (it is re-applied when the kubelet resets it).
    c.sh(&["stop-component", "kubelet"], &[]);
    let start = c.sh(&["start-component", "kubelet"], &[]);
    assert!(
        start.status.success(),
        "{}",
        String::from_utf8_lossy(&start.stderr)
    );
    c.kubectl_ok(&[
        "wait",
        "node/real-node-0",
        "--for=jsonpath={.status.capacity.nvidia\\.com/gpu}=4",
        "--timeout=60s",
    ]);

    let ids: Vec<String> = c
        .kubectl_ok(&[
            "-n",
            "realnode",
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.status.containerStatuses[*].containerID}",
        ])
        .split_whitespace()
        .map(|s| s.trim_start_matches("containerd://").to_string())
        .collect();
    assert!(!ids.is_empty());

    let down = c.sh(&["down"], &[]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    let left = leftovers(&c.dir, &net, &slot, &iptables_before, &ids);
    assert!(left.is_empty(), "left after down:\n{}", left.join("\n"));
}

#[test]
fn a_node_component_that_cannot_start_fails_up_with_one_line_and_leaves_nothing() {
    let iptables_before = host_iptables();
    let c = Cluster::new("realnode-faults");
    for (fault, env, name) in [
        (
            "containerd",
            ("VLLM_CLUSTER_FAULT", "containerd"),
            "containerd",
        ),
        ("CNI", ("VLLM_CLUSTER_CNI_BIN", "/nonexistent/cni"), "CNI"),
        ("kubelet", ("VLLM_CLUSTER_FAULT", "kubelet"), "kubelet"),
        (
            "kube-proxy",
            ("VLLM_CLUSTER_FAULT", "kube-proxy"),
            "kube-proxy",
        ),
    ] {
        let out = c.sh(&["up"], &[env]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fault}: up succeeded:\n{stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("local-cluster: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{fault}: {stderr}");
        assert!(
            errors[0].starts_with(&format!("local-cluster: error: {name} ")),
            "{fault}: {stderr}"
        );
        let log = errors[0].rsplit("; log: ").next().unwrap();
        assert!(
            Path::new(log).is_file(),
            "{fault}: no log {log}: {}",
            errors[0]
        );
        // Nothing left: not even the slot (whose addresses are not known here,
        // so every slot's namespace owned by this directory is looked for).
        let slot = std::fs::read_to_string(c.dir.join("slot")).unwrap_or_default();
        assert!(slot.is_empty(), "{fault}: slot file left: {slot}");
        let left = leftovers(&c.dir, &(None, None), "none", &iptables_before, &[]);
        assert!(
            left.is_empty(),
            "{fault}: left after a failed up:\n{}",
            left.join("\n")
        );
        let owned = sh(&format!(
            "grep -lx '{}' /run/vllm-operator/slots/* 2>/dev/null",
            c.dir.display()
        ));
        assert!(
            owned.trim().is_empty(),
            "{fault}: slot still claimed: {owned}"
        );
        // Every cluster network namespace belongs to a claimed slot (a leaked
        // one of this directory would have lost its claim).
        let orphans = sh(
            "for n in /run/netns/vllm-s*; do [ -e \"$n\" ] || continue; s=${n#/run/netns/vllm-s}; \
             case $s in *-probe) continue ;; esac; [ -f /run/vllm-operator/slots/$s ] || echo $n; done",
        );
        assert!(
            orphans.trim().is_empty(),
            "{fault}: network namespaces left: {orphans}"
        );
    }
}
