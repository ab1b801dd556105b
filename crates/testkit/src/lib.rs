//! Test support: a real local control plane (see `hack/cluster/cluster.sh`),
//! started once per test run and shared, a fresh namespace per test, and
//! small polling helpers. A test never skips because the cluster is missing:
//! when the cluster cannot start, the test fails with the component's log tail.

pub mod load;
pub mod metrics_pipeline;
pub mod pod_security;
pub mod process;

pub use metrics_pipeline::{Pipeline, Signal, autoscaling};

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{Mutex, OnceLock},
    time::Duration,
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{DeleteParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// The repository root (the workspace this crate lives in).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root exists")
}

/// A path relative to the repository root.
pub fn repo_path(relative: &str) -> PathBuf {
    repo_root().join(relative)
}

/// `hack/tools/helm.sh` (helm, built from its Go module once per machine),
/// run from the repository root; the caller adds the arguments (and, for a
/// cluster, `KUBECONFIG`).
pub fn helm() -> Command {
    let mut cmd = Command::new(repo_path("hack/tools/helm.sh"));
    cmd.current_dir(repo_root());
    cmd
}

/// The local cluster every test of this run shares.
pub struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Cluster {
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The cluster's state directory (`VLLM_CLUSTER_DIR`, by default `target/cluster`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `kubectl` against this cluster.
    pub fn kubectl(&self) -> Command {
        kubectl_command(&self.kubeconfig)
    }
}

/// `kubectl` against the cluster of a kubeconfig file.
fn kubectl_command(kubeconfig: &Path) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.env("KUBECONFIG", kubeconfig);
    cmd
}

/// Runs `kubectl` against the cluster of `kubeconfig`; panics with stderr
/// unless it succeeded; returns stdout.
fn kubectl_ok_on(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl_command(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts the local cluster (or reuses the one already running for this
/// checkout) once per process. `cluster.sh up` is idempotent and serialised by
/// a file lock, so concurrent test binaries share one cluster.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let script = repo_root().join("hack/cluster/cluster.sh");
        let out = Command::new(&script)
            .arg("up")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the local cluster did not start ({}):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = std::env::var_os("VLLM_CLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/cluster"));
        Cluster {
            kubeconfig: dir.join("kubeconfig"),
            dir,
        }
    })
}

/// A client for the shared cluster. Each test gets its own client because a
/// client is bound to the async runtime that created it.
pub async fn client() -> Client {
    client_for(cluster().kubeconfig()).await
}

/// A client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Client {
    Client::try_from(config_for(kubeconfig).await).expect("client from kubeconfig")
}

/// The client configuration of the shared cluster (to build a client with layers).
pub async fn config() -> Config {
    config_for(cluster().kubeconfig()).await
}

/// The client configuration of a kubeconfig file.
pub async fn config_for(kubeconfig: &Path) -> Config {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig")
}

/// Runs kubectl against the shared cluster and returns its output.
pub fn kubectl(args: &[&str]) -> Output {
    cluster()
        .kubectl()
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// Runs kubectl, feeding `stdin`, and returns its output.
pub fn kubectl_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = cluster()
        .kubectl()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("kubectl finishes")
}

/// Like [`kubectl`], but panics with stderr unless kubectl succeeded; returns stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    kubectl_ok_on(cluster().kubeconfig(), args)
}

/// Applies every CRD under `config/crd/` (server-side) and waits until they
/// are established. Safe to call from many tests at once.
pub fn install_crds() {
    static DONE: Mutex<bool> = Mutex::new(false);
    once_per_process(&DONE, || install_crds_on(cluster().kubeconfig()));
}

/// This project's CRDs and the optional ones it works with (Gateway API,
/// Prometheus Operator, KEDA), once per test process: what a test on the shared
/// cluster may assume, whichever test runs first.
pub fn install_all_crds() {
    install_crds();
    install_gateway_api_crds();
    install_prometheus_crds();
    install_keda_crds();
}

fn install_crds_on(kubeconfig: &Path) {
    let dir = repo_root().join("config/crd");
    let dir = dir.to_str().expect("utf-8 path");
    kubectl_ok_on(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=testkit",
            "-f",
            dir,
        ],
    );
    wait_established(kubeconfig, &[dir]);
}

/// `kubectl wait --for=condition=Established` on the CRDs in `paths`, again
/// while it fails only because a CRD just created has no status conditions yet
/// (".status.conditions accessor error").
fn wait_established(kubeconfig: &Path, paths: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    for path in paths {
        args.extend(["-f", path]);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl_command(kubeconfig)
            .args(&args)
            .output()
            .expect("kubectl runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return;
        }
        assert!(
            stderr.contains("accessor error") && std::time::Instant::now() < deadline,
            "kubectl {} failed: {stderr}",
            args.join(" ")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Installs the Gateway API standard channel CRDs (the version pinned in
/// `hack/cluster/crds/go.mod`, from the Go module cache) on the shared cluster
/// and waits until they are established. Idempotent and safe to call from many
/// tests at once; applied once per test process.
pub fn install_gateway_api_crds() {
    static DONE: Mutex<bool> = Mutex::new(false);
    once_per_process(&DONE, || {
        install_third_party_crds_on(cluster().kubeconfig(), ThirdParty::GatewayApi)
    });
}

/// Installs the Prometheus Operator `ServiceMonitor` and `PrometheusRule` CRDs
/// (pinned in `hack/cluster/crds/go.mod`) on the shared cluster and waits until
/// they are established. Idempotent and safe to call from many tests at once;
/// applied once per test process.
pub fn install_prometheus_crds() {
    static DONE: Mutex<bool> = Mutex::new(false);
    once_per_process(&DONE, || {
        install_third_party_crds_on(cluster().kubeconfig(), ThirdParty::Prometheus)
    });
}

/// Installs KEDA's CRDs (`ScaledObject` and the five others its operator
/// watches; pinned in `hack/cluster/crds/go.mod`) on the shared cluster and
/// waits until they are established. Idempotent; applied once per test process.
/// (The CRDs alone: [`autoscaling`] also runs KEDA.)
pub fn install_keda_crds() {
    static DONE: Mutex<bool> = Mutex::new(false);
    once_per_process(&DONE, || {
        install_third_party_crds_on(cluster().kubeconfig(), ThirdParty::Keda)
    });
}

/// Runs `install` unless it already succeeded in this process; concurrent
/// callers wait for the one running it.
fn once_per_process(done: &Mutex<bool>, install: impl FnOnce()) {
    let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
    if !*done {
        install();
        *done = true;
    }
}

/// The third-party CRD sets `hack/cluster/crds.sh` knows.
#[derive(Clone, Copy, Debug)]
enum ThirdParty {
    GatewayApi,
    Prometheus,
    Keda,
}

impl ThirdParty {
    fn crds_sh_arg(self) -> &'static str {
        match self {
            ThirdParty::GatewayApi => "gateway",
            ThirdParty::Prometheus => "prometheus",
            ThirdParty::Keda => "keda",
        }
    }
}

/// The CRD manifests of `which`, as paths in the Go module cache.
fn third_party_crd_files(which: ThirdParty) -> Vec<String> {
    let script = repo_root().join("hack/cluster/crds.sh");
    let out = Command::new(&script)
        .arg(which.crds_sh_arg())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {} failed: {}",
        script.display(),
        which.crds_sh_arg(),
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    assert!(!files.is_empty(), "{} printed no files", script.display());
    files
}

/// Applies the CRDs of `which` (server-side) on the cluster of `kubeconfig` and
/// waits until they are established. Retries a few times, because concurrent
/// first applies of the same object (other test processes) can conflict.
fn install_third_party_crds_on(kubeconfig: &Path, which: ThirdParty) {
    let files = third_party_crd_files(which);
    let with_files = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        for f in &files {
            v.push("-f".into());
            v.push(f.clone());
        }
        v
    };
    let apply = with_files(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=testkit",
    ]);
    let mut last = String::new();
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(500 * attempt));
        }
        let out = kubectl_command(kubeconfig)
            .args(&apply)
            .output()
            .expect("kubectl runs");
        if out.status.success() {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            wait_established(kubeconfig, &files);
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    panic!("installing the {which:?} CRDs failed: {last}");
}

/// A local cluster of one test's own, for tests that need a cluster state the
/// shared one cannot promise (for example no Gateway API CRDs). Started fresh
/// by [`PrivateCluster::start`] in `target/cluster-<name>` and stopped when
/// dropped. Each costs a control plane's start (tens of seconds), so use them
/// sparingly, and give each a distinct name.
pub struct PrivateCluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl PrivateCluster {
    /// Starts a fresh cluster with its state in `<repo>/target/cluster-<name>`
    /// (a leftover one of the same name is stopped first).
    pub fn start(name: &str) -> PrivateCluster {
        let dir = repo_root().join("target").join(format!("cluster-{name}"));
        let cluster = PrivateCluster {
            kubeconfig: dir.join("kubeconfig"),
            dir,
        };
        // A leftover of a killed run may still be healthy, with whatever a
        // previous test installed: never reuse it.
        let _ = cluster.cluster_sh("down");
        let out = cluster
            .cluster_sh("up")
            .unwrap_or_else(|e| panic!("cannot run hack/cluster/cluster.sh: {e}"));
        assert!(
            out.status.success(),
            "the private cluster {name} did not start:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    fn cluster_sh(&self, command: &str) -> std::io::Result<Output> {
        Command::new(repo_root().join("hack/cluster/cluster.sh"))
            .arg(command)
            .env("VLLM_CLUSTER_DIR", &self.dir)
            // Kwok nodes only: no test of a private cluster runs real pods.
            .env("VLLM_CLUSTER_REAL_NODES", "0")
            .output()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `kubectl` against this cluster.
    pub fn kubectl(&self) -> Command {
        kubectl_command(&self.kubeconfig)
    }

    /// A client for this cluster (bound to the calling test's runtime).
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig).await
    }

    /// Applies this project's CRDs (`config/crd/`) and waits until they are established.
    pub fn install_crds(&self) {
        install_crds_on(&self.kubeconfig);
    }

    /// Installs the Gateway API standard channel CRDs; see [`install_gateway_api_crds`].
    pub fn install_gateway_api_crds(&self) {
        install_third_party_crds_on(&self.kubeconfig, ThirdParty::GatewayApi);
    }

    /// Installs the ServiceMonitor and PrometheusRule CRDs; see [`install_prometheus_crds`].
    pub fn install_prometheus_crds(&self) {
        install_third_party_crds_on(&self.kubeconfig, ThirdParty::Prometheus);
    }

    /// Installs KEDA's CRDs; see [`install_keda_crds`].
    pub fn install_keda_crds(&self) {
        install_third_party_crds_on(&self.kubeconfig, ThirdParty::Keda);
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        // Never panic here: Drop may run while a failing test unwinds.
        match self.cluster_sh("down") {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "stopping the private cluster in {} failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("cannot run hack/cluster/cluster.sh down: {e}"),
        }
    }
}

/// A namespace of its own for one test; deleted when dropped.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// Creates a fresh namespace named `<prefix>-<random suffix>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", random_suffix());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"vllm-operator.test/namespace": "true"}}
        }))
        .expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        wait_for_default_service_account(&name);
        TestNamespace { name }
    }

    /// Deletes the namespace now and waits until it is gone.
    pub async fn delete_and_wait(self, client: &Client) {
        let api = Api::<Namespace>::all(client.clone());
        let _ = api.delete(&self.name, &DeleteParams::default()).await;
        eventually(Duration::from_secs(60), || async {
            api.get_opt(&self.name).await.ok().flatten().is_none()
        })
        .await
        .unwrap_or_else(|_| panic!("namespace {} was not deleted", self.name));
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await; kubectl deletes without blocking the test's runtime for long.
        let _ = cluster()
            .kubectl()
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .output();
    }
}

fn wait_for_default_service_account(ns: &str) {
    for _ in 0..100 {
        let out = kubectl(&["-n", ns, "get", "serviceaccount", "default"]);
        if out.status.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("namespace {ns} got no default ServiceAccount: is kube-controller-manager running?");
}

/// A short random suffix for object names (from the clock and the process id;
/// names only need to differ between concurrently running tests).
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()));
    format!("{:08x}", n as u32)
}

/// Polls `check` every 100 ms until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> Result<(), Elapsed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Elapsed(timeout));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `get` every 100 ms until it returns `Some`, or fails after `timeout`
/// with `what` and the last value seen, so a failing test says what it waited for.
pub async fn wait_until<T, F, Fut>(timeout: Duration, what: &str, mut get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = get().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The error of [`eventually`].
#[derive(Debug)]
pub struct Elapsed(pub Duration);

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "condition not met within {:?}", self.0)
    }
}

impl std::error::Error for Elapsed {}

/// Writes a kubeconfig that authenticates as ServiceAccount `ns/name` (with a
/// token from the TokenRequest API) against the shared cluster, and returns
/// its path. Used to prove RBAC is enforced.
pub fn service_account_kubeconfig(ns: &str, name: &str) -> PathBuf {
    let token = kubectl_ok(&["-n", ns, "create", "token", name, "--duration=1h"]);
    let admin = std::fs::read_to_string(cluster().kubeconfig()).expect("admin kubeconfig");
    let field = |key: &str| {
        admin
            .lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("admin kubeconfig has no {key}"))
    };
    let server = field("server:");
    let ca = field("certificate-authority:");
    let path = cluster()
        .kubeconfig()
        .with_file_name(format!("sa-{ns}-{name}.kubeconfig"));
    let body = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n- name: local\n  context: {{cluster: local, user: {name}, namespace: {ns}}}\ncurrent-context: local\n",
        token.trim()
    );
    std::fs::write(&path, body).expect("write service-account kubeconfig");
    path
}

/// The shared cluster's real node (`real-node-0`, hack/cluster/node.sh), once
/// it is Ready and advertises `nvidia.com/gpu`. Panics with the reason when the
/// cluster runs without one (a test never skips).
pub fn require_real_node() -> &'static str {
    const NODE: &str = "real-node-0";
    let out = kubectl(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.allocatable.nvidia\\.com/gpu}",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "the shared cluster has no real node {NODE} ({}): start the cluster with one \
         (hack/cluster/cluster.sh up without --real-nodes 0 / VLLM_CLUSTER_REAL_NODES=0); \
         see docs/local-cluster.md",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let mut parts = text.split_whitespace();
    let (ready, gpus) = (parts.next(), parts.next());
    assert_eq!(
        ready,
        Some("True"),
        "the real node {NODE} is not Ready ({text:?}); see target/cluster/logs/kubelet.log"
    );
    assert!(
        gpus.is_some_and(|g| g != "0"),
        "the real node {NODE} advertises no nvidia.com/gpu ({text:?}); see target/cluster/logs/gpu-advertiser.log"
    );
    // A node under pressure taints itself and refuses every pod: say so, not "unschedulable".
    let out = kubectl(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={range .status.conditions[?(@.status==\"True\")]}{.type}: {.message}{\"\\n\"}{end}",
    ]);
    let pressure: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("Pressure"))
        .map(str::to_owned)
        .collect();
    assert!(
        pressure.is_empty(),
        "the real node {NODE} is under pressure and refuses pods ({}); free disk or memory \
         on this machine (`df -h`), the kubelet lifts it within minutes",
        pressure.join("; ")
    );
    NODE
}

/// A copy of the fake model (`config/samples/fake-model`) at
/// `<dir>/<model>/config.json`, world-readable and -writable so that only a
/// read-only mount stops a container's writes. Returns `<dir>` (for a hostPath
/// PersistentVolume; the kubelet shares the host's mount namespace).
pub fn fake_model_dir(dir: &Path, model: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let target = dir.join(model);
    std::fs::create_dir_all(&target).expect("model directory");
    std::fs::copy(
        repo_root().join("config/samples/fake-model/config.json"),
        target.join("config.json"),
    )
    .expect("copy the fake model");
    for (p, mode) in [
        (dir.to_path_buf(), 0o777),
        (target.clone(), 0o777),
        (target.join("config.json"), 0o644),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    dir.to_path_buf()
}

/// One HTTP/1.1 request to `addr` (`ip:port`), with `Connection: close`;
/// returns the status code and the body (de-chunked). For ClusterIPs and
/// pod IPs of the local cluster, reachable from the host.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    json_body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = json_body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let (head, rest) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    if !chunked {
        return Ok((status, rest.to_string()));
    }
    let mut out = String::new();
    let mut rest = rest;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("bad chunk size"))?;
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Ok((status, out))
}

/// The stdout of a command's `out`put; panics naming `what`, with its output, unless it succeeded.
pub fn stdout_of(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
