//! Leader election with two operator processes on the local cluster (issue 6):
//! only the leader writes; when it is killed (SIGKILL) the other takes over
//! once the lease expires and converges the change made meanwhile; when it is
//! stopped (SIGTERM) it releases the lease, so the other takes over sooner.
//! Takeover times are printed (`--nocapture`), and appended to
//! `$VLLM_FAULTS_REPORT` when set (see `hack/faults.sh`). Neither process may
//! log a secret value.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        coordination::v1::Lease,
        core::v1::{PersistentVolume, PersistentVolumeClaim, Secret},
    },
    serde_json::{self, json},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use testkit::TestNamespace;
use testkit::process::{Process, free_local_addr, http_get};
use vllmservice_api::VLLMService;
use vllmservice_controller::rbac;

const BIN: &str = env!("CARGO_BIN_EXE_vllmservice-operator");
/// Generous bounds: these are convergence checks, not performance assertions.
const WAIT: Duration = Duration::from_secs(60);
const LEASE_SECONDS: u64 = 6;

/// One operator process; killed (SIGKILL) when dropped.
struct OperatorProcess {
    name: String,
    metrics: String,
    process: Process,
}

impl OperatorProcess {
    fn start(name: &str, ns: &str, lease: &str) -> OperatorProcess {
        Self::start_as(name, ns, lease, testkit::cluster().kubeconfig())
    }

    /// Started with the credentials of `kubeconfig`.
    fn start_as(name: &str, ns: &str, lease: &str, kubeconfig: &Path) -> OperatorProcess {
        let metrics = free_local_addr();
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--watch-namespace", ns])
            .args(["--leader-election-namespace", ns])
            .args(["--leader-election-lease-name", lease])
            .args([
                "--leader-election-lease-duration-seconds",
                &LEASE_SECONDS.to_string(),
            ])
            .args(["--leader-election-renew-grace-seconds", "3"])
            .args(["--metrics-addr", &metrics, "--metrics-insecure"])
            .args(["--health-addr", &free_local_addr()])
            .args(["--instance", name])
            .env("KUBECONFIG", kubeconfig)
            // Debug logs too: more places a secret could slip into.
            .env("RUST_LOG", "info,vllmservice_controller=debug");
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("leader-election-{ns}-{name}.log"));
        OperatorProcess {
            name: name.into(),
            metrics,
            process: Process::spawn(cmd, log),
        }
    }

    /// The body of `/metrics`, once the process serves it.
    async fn scrape(&self) -> Option<String> {
        let (code, body) = http_get(&self.metrics, "/metrics").await?;
        (code == 200).then_some(body)
    }

    /// `vllmservice_operator_leader` (None while /metrics is not served).
    async fn leader(&self) -> Option<i64> {
        let body = self.scrape().await?;
        body.lines()
            .find_map(|l| l.strip_prefix("vllmservice_operator_leader "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// `vllmservice_operator_reconciles_in_flight`: 0 once no reconcile (and none of its
    /// writes) is under way.
    async fn reconciles_in_flight(&self) -> Option<i64> {
        let body = self.scrape().await?;
        body.lines()
            .find_map(|l| l.strip_prefix("vllmservice_operator_reconciles_in_flight "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Every `vllmservice_operator_write_requests_total` series, summed.
    async fn writes(&self) -> Option<(u64, Vec<String>)> {
        let body = self.scrape().await?;
        let series: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("vllmservice_operator_write_requests_total{"))
            .map(str::to_owned)
            .collect();
        let total = series
            .iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
        Some((total, series))
    }

    fn log_text(&self) -> String {
        self.process.log()
    }

    fn log_tail(&self) -> String {
        self.process.log_tail(30)
    }

    /// Sends SIGTERM (graceful shutdown).
    fn terminate(&self) {
        self.process.terminate()
    }

    /// Waits up to `timeout` for the process to exit; its exit status.
    async fn exited(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.process.exited(timeout).await
    }
}

/// Polls `check` every 100 ms until it returns Some, or fails after `timeout`
/// with `what` and the processes' log tails.
async fn wait<T, F, Fut>(what: &str, procs: &[&OperatorProcess], mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = procs
                .iter()
                .map(|p| {
                    format!(
                        "--- {} ({}):\n{}",
                        p.name,
                        p.process.log_path().display(),
                        p.log_tail()
                    )
                })
                .collect();
            panic!(
                "timed out after {WAIT:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a test works with: a namespace with a bound PVC and a Secret, and the
/// secret-looking values that must never be logged.
struct Setup {
    client: Client,
    ns: TestNamespace,
    lease: String,
    secret_value: String,
    literal_value: String,
}

impl Setup {
    async fn new(prefix: &str) -> Setup {
        testkit::install_crds();
        let client = testkit::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let name = ns.name.clone();
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-models")},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                     "storageClassName": "static-models", "hostPath": {"path": "/data/models"},
                     "persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"namespace": name, "name": "models"}}
        }))
        .unwrap();
        Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "models"},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                     "resources": {"requests": {"storage": "10Gi"}}}
        }))
        .unwrap();
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &name)
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
        let secret_value = format!("hf_FROMSECRET{}", testkit::random_suffix());
        let literal_value = format!("hf_LITERAL{}", testkit::random_suffix());
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "hf"}, "stringData": {"token": secret_value}
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), &name)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Setup {
            client,
            lease: format!("leader-{}", testkit::random_suffix()),
            ns,
            secret_value,
            literal_value,
        }
    }

    fn services(&self) -> Api<VLLMService> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    async fn create_service(&self, name: &str) {
        let vs: VLLMService = serde_json::from_value(json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": name},
            "spec": {
                "image": "vllm/vllm-openai:v0.11.0",
                "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
                "modelName": "qwen2.5-1.5b-instruct",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "storage": {"pvcName": "models", "mountPath": "/data/models"},
                "env": [
                    {"name": "HF_TOKEN", "value": self.literal_value},
                    {"name": "HUGGING_FACE_HUB_TOKEN",
                     "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
                ]
            }
        }))
        .unwrap();
        self.services()
            .create(&PostParams::default(), &vs)
            .await
            .unwrap();
    }

    /// Some(()) when the VLLMService is Available at its generation with `ready` ("2/2").
    async fn available(&self, name: &str, ready: &str) -> Option<()> {
        let vs = self.services().get(name).await.ok()?;
        let st = vs.status.as_ref()?;
        let available = st
            .conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        (available
            && st.observed_generation == vs.metadata.generation
            && st.ready.as_deref() == Some(ready))
        .then_some(())
    }

    async fn deployment_replicas(&self, name: &str) -> Option<i32> {
        Api::<Deployment>::namespaced(self.client.clone(), &self.ns.name)
            .get(name)
            .await
            .ok()?
            .spec?
            .replicas
    }

    async fn lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), &self.ns.name)
            .get(&self.lease)
            .await
            .ok()?
            .spec?
            .holder_identity
    }

    /// Neither process logged a secret value.
    fn assert_no_secret_in_logs(&self, procs: &[&OperatorProcess]) {
        for p in procs {
            let log = p.log_text();
            assert!(!log.is_empty(), "{} logged nothing", p.name);
            for (what, value) in [
                ("the Secret's value", &self.secret_value),
                ("the literal HF_TOKEN", &self.literal_value),
            ] {
                assert!(
                    !log.contains(value.as_str()),
                    "{} logged {what} ({})",
                    p.name,
                    p.process.log_path().display()
                );
            }
        }
    }
}

/// Starts `a`, waits until it leads, then starts `b`; creates a VLLMService and
/// waits until it is Available; checks that only `a` leads and `b` never wrote.
async fn two_replicas_one_leader(setup: &Setup) -> (OperatorProcess, OperatorProcess) {
    let ns = &setup.ns.name;
    let a = OperatorProcess::start("a", ns, &setup.lease);
    wait("a to lead", &[&a], || async {
        (a.leader().await == Some(1)).then_some(())
    })
    .await;
    let b = OperatorProcess::start("b", ns, &setup.lease);
    wait("b to serve /metrics", &[&a, &b], || async {
        b.leader().await.map(|_| ())
    })
    .await;
    setup.create_service("chat").await;
    wait("chat to be Available", &[&a, &b], || async {
        setup.available("chat", "1/1").await
    })
    .await;
    assert_eq!(a.leader().await, Some(1), "a leads");
    assert_eq!(b.leader().await, Some(0), "b does not lead");
    assert_eq!(setup.lease_holder().await.as_deref(), Some("a"));
    let (a_writes, _) = a.writes().await.unwrap();
    let (b_writes, b_series) = b.writes().await.unwrap();
    assert!(a_writes > 0, "the leader wrote nothing");
    assert_eq!(b_writes, 0, "the follower wrote: {b_series:?}");
    (a, b)
}

/// Times from `t0` until b leads, the Deployment has 2 replicas, and the
/// VLLMService is Available with 2/2.
async fn takeover(
    setup: &Setup,
    a: &OperatorProcess,
    b: &OperatorProcess,
    t0: Instant,
) -> [Duration; 3] {
    setup
        .services()
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let (mut leads, mut deployment, mut converged) = (None, None, None);
    let deadline = Instant::now() + WAIT;
    while converged.is_none() {
        if leads.is_none() && b.leader().await == Some(1) {
            leads = Some(t0.elapsed());
        }
        if deployment.is_none() && setup.deployment_replicas("chat").await == Some(2) {
            deployment = Some(t0.elapsed());
        }
        if deployment.is_some() && setup.available("chat", "2/2").await.is_some() {
            converged = Some(t0.elapsed());
        }
        if Instant::now() >= deadline {
            panic!(
                "no takeover within {WAIT:?}: b leads {leads:?}, Deployment scaled {deployment:?}\n--- a:\n{}\n--- b:\n{}",
                a.log_tail(),
                b.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    [leads.unwrap(), deployment.unwrap(), converged.unwrap()]
}

/// Prints the figures and appends a row to `$VLLM_FAULTS_REPORT` (the table of
/// `docs/reliability.md`).
fn report(scenario: &str, injected: &str, times: [Duration; 3]) {
    let [leads, deployment, converged] = times.map(|t| t.as_secs_f64());
    eprintln!(
        "leader election: {scenario}: the other replica leads after {leads:.1} s, Deployment follows the pending change after {deployment:.1} s, Available 2/2 after {converged:.1} s"
    );
    if let Ok(path) = std::env::var("VLLM_FAULTS_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
        writeln!(
            f,
            "| {scenario} | {injected}; new leader after {leads:.1} s, Deployment changed after {deployment:.1} s | 1 | yes | {converged:.1} s | 0 | 0 | 0 | 0 | 0 | 0 |"
        )
        .unwrap();
    }
}

#[tokio::test]
async fn killed_leader_is_replaced_and_the_pending_change_converges() {
    let setup = Setup::new("le-kill").await;
    let (mut a, b) = two_replicas_one_leader(&setup).await;

    let t0 = Instant::now();
    a.process.kill().expect("SIGKILL the leader");
    a.exited(Duration::from_secs(10))
        .await
        .expect("the killed leader exits");
    let times = takeover(&setup, &a, &b, t0).await;
    report(
        "L1. leader failover (SIGKILL)",
        &format!(
            "2 replicas, lease {LEASE_SECONDS} s / renew grace 3 s; the leader SIGKILLed, then replicas 1→2"
        ),
        times,
    );
    assert_eq!(setup.lease_holder().await.as_deref(), Some("b"));
    setup.assert_no_secret_in_logs(&[&a, &b]);
}

#[tokio::test]
async fn a_terminated_leader_releases_the_lease_and_the_other_takes_over() {
    let setup = Setup::new("le-term").await;
    let (mut a, b) = two_replicas_one_leader(&setup).await;

    let t0 = Instant::now();
    a.terminate();
    let status = a
        .exited(Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("a did not exit after SIGTERM:\n{}", a.log_tail()));
    let exit = t0.elapsed();
    assert!(
        status.success(),
        "a exited with {status} after SIGTERM:\n{}",
        a.log_tail()
    );
    eprintln!(
        "leader election: SIGTERM: a exited ({status}) after {:.1} s; lease holder then: {:?}",
        exit.as_secs_f64(),
        setup.lease_holder().await
    );
    let times = takeover(&setup, &a, &b, t0).await;
    report(
        "L2. leader handover (SIGTERM)",
        &format!(
            "2 replicas, lease {LEASE_SECONDS} s; the leader sent SIGTERM (exited in {:.1} s, lease released), then replicas 1→2",
            exit.as_secs_f64()
        ),
        times,
    );
    assert_eq!(setup.lease_holder().await.as_deref(), Some("b"));
    setup.assert_no_secret_in_logs(&[&a, &b]);
}

/// The namespace whose ServiceAccounts' writes kube-apiserver records in its
/// audit log (hack/cluster/cluster.sh).
const AUDITED: &str = "vllm-audited";

/// A ServiceAccount of [`AUDITED`] holding the operator's generated rules:
/// its ClusterRole, and the leader-election Role in the test's namespace, so
/// that the API server tells which process wrote; removed when dropped.
struct AuditedIdentity {
    name: String,
    kubeconfig: PathBuf,
    lease_binding: Api<RoleBinding>,
}

impl AuditedIdentity {
    async fn new(client: &Client, ns: &str, name: &str) -> AuditedIdentity {
        let _ = testkit::kubectl(&["create", "namespace", AUDITED]);
        testkit::kubectl_ok(&["-n", AUDITED, "create", "serviceaccount", name]);
        let create = PostParams::default();
        let role = format!("{AUDITED}-{name}");
        Api::<ClusterRole>::all(client.clone())
            .create(&create, &rbac::cluster_role(&role, rbac::CLUSTER_RULES))
            .await
            .unwrap();
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(
                &create,
                &rbac::cluster_role_binding(&role, &role, name, AUDITED),
            )
            .await
            .unwrap();
        let roles = Api::<Role>::namespaced(client.clone(), ns);
        let lease_role = rbac::role(&role, ns, rbac::LEADER_ELECTION_RULES);
        roles.create(&create, &lease_role).await.unwrap();
        let lease_binding = Api::<RoleBinding>::namespaced(client.clone(), ns);
        lease_binding
            .create(
                &create,
                &rbac::role_binding(&role, ns, &role, name, AUDITED),
            )
            .await
            .unwrap();
        AuditedIdentity {
            name: name.into(),
            kubeconfig: testkit::service_account_kubeconfig(AUDITED, name),
            lease_binding,
        }
    }

    fn username(&self) -> String {
        format!("system:serviceaccount:{AUDITED}:{}", self.name)
    }

    /// Takes away its rights on the Lease: it can neither renew nor read it.
    async fn cut_lease_access(&self) {
        self.lease_binding
            .delete(&format!("{AUDITED}-{}", self.name), &Default::default())
            .await
            .unwrap();
    }
}

impl Drop for AuditedIdentity {
    fn drop(&mut self) {
        let role = format!("{AUDITED}-{}", self.name);
        let _ = testkit::kubectl(&[
            "delete",
            "clusterrolebinding,clusterrole",
            &role,
            "--wait=false",
        ]);
        let _ = testkit::kubectl(&["-n", AUDITED, "delete", "serviceaccount", &self.name]);
    }
}

/// The writes kube-apiserver received from `username` at or after `since`,
/// as "verb resource/name (code)", from its audit log.
fn audited_writes(username: &str, since: SystemTime) -> Vec<String> {
    let path = testkit::cluster().dir().join("audit.log");
    let log = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading kube-apiserver's audit log {}: {e}", path.display()));
    let since = k8s_openapi::jiff::Timestamp::try_from(since).unwrap();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == username)
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .is_some_and(|t| t >= since)
        })
        .map(|e| {
            format!(
                "{} {}/{} ({})",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["resource"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"]
            )
        })
        .collect()
}

/// When kube-apiserver received `username`'s last successful write of a
/// Lease: its renewal time was set no later.
fn last_lease_renewal(username: &str) -> SystemTime {
    let path = testkit::cluster().dir().join("audit.log");
    let log = std::fs::read_to_string(&path).expect("kube-apiserver's audit log");
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == username)
        .filter(|e| e["objectRef"]["resource"] == "leases" && e["responseStatus"]["code"] == 200)
        .filter_map(|e| {
            e["requestReceivedTimestamp"]
                .as_str()?
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
        })
        .max()
        .map(SystemTime::from)
        .expect("the leader renewed its lease")
}

/// Sends `signal` (e.g. "STOP") to `p`.
fn signal(p: &OperatorProcess, signal: &str) {
    let out = Command::new("kill")
        .args([&format!("-{signal}"), &p.process.pid().to_string()])
        .output()
        .expect("run kill");
    assert!(out.status.success(), "kill -{signal}: {out:?}");
}

/// A leader that stalls (SIGSTOP, as a long pause would) while services are
/// created loses its lease to the other replica, which converges them. When
/// the stalled one resumes, its caches and queue are stale and the services it
/// has not seen yet are due: it must exit without writing (its renew deadline
/// or lease task usually stops it first; a reconcile that gets ahead meets the
/// fence, `fence` unit tests), and kube-apiserver's audit log holds no write of its
/// identity after it resumed but its lease manager's.
#[tokio::test]
async fn a_stalled_leader_that_resumes_writes_nothing() {
    let setup = Setup::new("le-stall").await;
    let ns = &setup.ns.name;
    let suffix = testkit::random_suffix();
    let a_id = AuditedIdentity::new(&setup.client, ns, &format!("stall-a-{suffix}")).await;
    let b_id = AuditedIdentity::new(&setup.client, ns, &format!("stall-b-{suffix}")).await;
    let mut a = OperatorProcess::start_as("a", ns, &setup.lease, &a_id.kubeconfig);
    wait("a to lead", &[&a], || async {
        (a.leader().await == Some(1)).then_some(())
    })
    .await;
    let b = OperatorProcess::start_as("b", ns, &setup.lease, &b_id.kubeconfig);
    wait("b to serve /metrics", &[&a, &b], || async {
        b.leader().await.map(|_| ())
    })
    .await;
    setup.create_service("chat").await;
    wait("chat to be Available", &[&a, &b], || async {
        setup.available("chat", "1/1").await
    })
    .await;
    assert!(
        !audited_writes(&a_id.username(), SystemTime::UNIX_EPOCH).is_empty(),
        "the audit log records the leader's writes"
    );
    // The fence judges a write when it starts: one started just before the stall (the
    // Available event after the status write) leaves the process after it, and no
    // client-side check can stop it. Stall the leader between reconciles, as the scenario
    // means: what it must not do is start writes from the reconciles it resumes.
    wait("a to finish its reconciles", &[&a, &b], || async {
        (a.reconciles_in_flight().await == Some(0)).then_some(())
    })
    .await;

    signal(&a, "STOP");
    const BURST: usize = 5;
    for i in 0..BURST {
        setup.create_service(&format!("burst-{i}")).await;
    }
    wait("b to lead", &[&a, &b], || async {
        (b.leader().await == Some(1)).then_some(())
    })
    .await;
    for i in 0..BURST {
        wait("b to converge the burst", &[&a, &b], || async {
            setup.available(&format!("burst-{i}"), "1/1").await
        })
        .await;
    }

    let resumed = SystemTime::now();
    signal(&a, "CONT");
    let status = a
        .exited(Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("the resumed leader did not exit:\n{}", a.log_tail()));
    assert!(!status.success(), "a exited with {status}");
    // By the lease task or by the renew deadline, whichever runs first.
    let log = a.log_text();
    assert!(
        log.contains("lost the leader lease") || log.contains("not renewed before it expired"),
        "{}",
        a.log_tail()
    );
    let after: Vec<String> = audited_writes(&a_id.username(), resumed)
        .into_iter()
        .filter(|w| !w.contains(" leases/"))
        .collect();
    assert!(
        after.is_empty(),
        "the stalled leader wrote after it resumed: {after:#?}"
    );
    assert_eq!(setup.lease_holder().await.as_deref(), Some("b"));
    setup.assert_no_secret_in_logs(&[&a, &b]);
}

/// A leader that can no longer renew its lease (its rights on the Lease are
/// taken away, as a partition of that one API would) stops writing before the
/// lease expires and exits at the expiry, while the other replica takes over
/// and converges a change made meanwhile. kube-lease-manager alone keeps
/// retrying the renewal and reporting "leading": without the renew deadline
/// this leader would go on writing beside the new one.
#[tokio::test]
async fn a_leader_that_cannot_renew_stops_writing_before_its_lease_expires() {
    let setup = Setup::new("le-renew").await;
    let ns = &setup.ns.name;
    let suffix = testkit::random_suffix();
    let a_id = AuditedIdentity::new(&setup.client, ns, &format!("renew-a-{suffix}")).await;
    let b_id = AuditedIdentity::new(&setup.client, ns, &format!("renew-b-{suffix}")).await;
    let mut a = OperatorProcess::start_as("a", ns, &setup.lease, &a_id.kubeconfig);
    wait("a to lead", &[&a], || async {
        (a.leader().await == Some(1)).then_some(())
    })
    .await;
    let b = OperatorProcess::start_as("b", ns, &setup.lease, &b_id.kubeconfig);
    setup.create_service("chat").await;
    wait("chat to be Available", &[&a, &b], || async {
        setup.available("chat", "1/1").await
    })
    .await;

    a_id.cut_lease_access().await;
    let lease = Api::<Lease>::namespaced(setup.client.clone(), ns)
        .get(&setup.lease)
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("a"));
    let cut = SystemTime::now();
    setup
        .services()
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let status = a
        .exited(WAIT)
        .await
        .unwrap_or_else(|| panic!("a leader that cannot renew kept running:\n{}", a.log_tail()));
    assert!(!status.success(), "a exited with {status}");
    assert!(
        a.log_text().contains("not renewed before it expired"),
        "{}",
        a.log_tail()
    );
    wait("b to lead and converge the change", &[&a, &b], || async {
        setup.available("chat", "2/2").await
    })
    .await;
    assert_eq!(setup.lease_holder().await.as_deref(), Some("b"));
    // Its fence closed a lease term after its last renewal, less the margin.
    let fence_point = last_lease_renewal(&a_id.username()) + Duration::from_secs(LEASE_SECONDS)
        - Duration::from_secs(1);
    let late: Vec<String> = audited_writes(&a_id.username(), fence_point)
        .into_iter()
        .filter(|w| !w.contains(" leases/"))
        .collect();
    assert!(late.is_empty(), "a wrote after its lease term: {late:#?}");
    assert!(
        !audited_writes(&b_id.username(), cut).is_empty(),
        "the audit log records the new leader's writes"
    );
    setup.assert_no_secret_in_logs(&[&a, &b]);
}
