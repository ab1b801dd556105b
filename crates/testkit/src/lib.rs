//! Test support: a real local control plane (see `hack/cluster/cluster.sh`),
//! started once per test run and shared, a fresh namespace per test, and
//! small polling helpers. A test never skips because the cluster is missing:
//! when the cluster cannot start, the test fails with the component's log tail.

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
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

/// The local cluster every test of this run shares.
pub struct Cluster {
    kubeconfig: PathBuf,
}

impl Cluster {
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `kubectl` against this cluster.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }
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
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Applies every CRD under `config/crd/` (server-side) and waits until they
/// are established. Safe to call from many tests at once.
pub fn install_crds() {
    let dir = repo_root().join("config/crd");
    let dir = dir.to_str().expect("utf-8 path");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=testkit",
        "-f",
        dir,
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        dir,
    ]);
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
