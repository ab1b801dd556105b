//! The binary under exactly the RBAC it ships, in watch-namespace mode
//! (`vllmservice-operator rbac --watch-namespace NS`, applied with kubectl),
//! with leader election:
//!
//! - with every rule it leads, brings a VLLMService to Available, answers
//!   `/readyz` "ok" (and a second replica "ok: follower, …"), releases the Lease
//!   on SIGTERM, and never gets a 403;
//! - for every verb of `rbac::LEADER_ELECTION_RULES` (data-driven), with that one
//!   verb taken away, the API server refuses it (the refusal, which names the
//!   verb, is in the log), so each Lease verb is needed. (The controller's own
//!   verbs are proven in crates/operator/tests/rbac.rs.)
//! - `/readyz` is 503 with a reason while the API server cannot be reached;
//!   `/healthz` is 200 meanwhile;
//! - with a list of namespaces (`rbac --watch-namespace A,B`), services in each
//!   become Available, and the operator's identity can neither list pods nor
//!   read a pod's log in any other namespace.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use serde_json::json;
use testkit::TestNamespace;
use testkit::process::{Process, free_local_addr, http_get};
use vllmservice_api::VLLMService;
use vllmservice_controller::rbac::{self, Rule};

const BIN: &str = env!("CARGO_BIN_EXE_vllmservice-operator");
const WAIT: Duration = Duration::from_secs(60);

/// One operator process with its log; killed when dropped.
struct Operator {
    /// /healthz and /readyz.
    addr: String,
    /// /metrics (plain: --metrics-insecure).
    metrics: String,
    process: Process,
}

impl Operator {
    fn start(name: &str, kubeconfig: &std::path::Path, ns: &str, lease: &str) -> Operator {
        Self::start_watching(name, kubeconfig, ns, ns, lease)
    }

    /// An operator with its Lease in `ns`, watching `watch` (comma-separated).
    fn start_watching(
        name: &str,
        kubeconfig: &std::path::Path,
        ns: &str,
        watch: &str,
        lease: &str,
    ) -> Operator {
        let (addr, metrics) = (free_local_addr(), free_local_addr());
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--watch-namespace", watch])
            .args(["--leader-election-namespace", ns])
            .args(["--leader-election-lease-name", lease])
            .args(["--leader-election-lease-duration-seconds", "6"])
            .args(["--leader-election-renew-grace-seconds", "2"])
            .args(["--metrics-addr", &metrics, "--metrics-insecure"])
            .args(["--health-addr", &addr])
            .args(["--instance", name])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info");
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("least-privilege-{ns}-{name}.log"));
        Operator {
            addr,
            metrics,
            process: Process::spawn(cmd, log),
        }
    }

    fn log(&self) -> String {
        self.process.log()
    }

    /// (status, body) of `GET path` (/metrics on its metrics address, the
    /// probes on the health address), None while nothing answers.
    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let addr = if path == "/metrics" {
            &self.metrics
        } else {
            &self.addr
        };
        http_get(addr, path).await
    }

    fn terminate(&self) {
        self.process.terminate()
    }

    async fn exited(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.process.exited(timeout).await
    }
}

/// Polls `check` every 100 ms until Some, or panics after `WAIT` with `what`
/// and the log of `p`.
async fn wait<T, Fut>(what: &str, p: &Operator, mut check: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log {}:\n{}",
            p.process.log_path().display(),
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kubectl_apply_json(objects: &[serde_json::Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let out = testkit::kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace with the operator's ServiceAccount, the watch-namespace RBAC of
/// `vllmservice-operator rbac --namespace NS --watch-namespace NS[,MORE…]` (its
/// Lease Role replaced by one with `lease_rules`), and a kubeconfig with the
/// ServiceAccount's token.
struct Setup {
    client: Client,
    ns: TestNamespace,
    /// Watched besides `ns`.
    more: Vec<TestNamespace>,
    kubeconfig: PathBuf,
}

impl Setup {
    async fn new(prefix: &str, lease_rules: &[Rule]) -> Setup {
        Self::watching(prefix, lease_rules, 0).await
    }

    /// With `more` namespaces watched besides the operator's own.
    async fn watching(prefix: &str, lease_rules: &[Rule], more: usize) -> Setup {
        testkit::install_crds();
        let client = testkit::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let mut others = Vec::new();
        for _ in 0..more {
            others.push(TestNamespace::new(&client, prefix).await);
        }
        let watch = std::iter::once(&ns)
            .chain(&others)
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": rbac::SERVICE_ACCOUNT_NAME}}))
                .unwrap();
        Api::<ServiceAccount>::namespaced(client.clone(), &ns.name)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap();
        // Exactly what the binary prints for this mode.
        let printed = Command::new(BIN)
            .args(["rbac", "--namespace", &ns.name, "--watch-namespace", &watch])
            .output()
            .unwrap();
        assert!(printed.status.success());
        let yaml = String::from_utf8(printed.stdout).unwrap();
        let out = testkit::kubectl_stdin(&["apply", "-f", "-"], &yaml);
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if lease_rules != rbac::LEADER_ELECTION_RULES {
            let role = rbac::role(rbac::LEADER_ELECTION_ROLE_NAME, &ns.name, lease_rules);
            let mut role = serde_json::to_value(role).unwrap();
            role["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
            role["kind"] = json!("Role");
            kubectl_apply_json(&[role]);
        }
        // The authorizer sees new bindings through an informer: wait until it does.
        let user = format!(
            "system:serviceaccount:{}:{}",
            ns.name,
            rbac::SERVICE_ACCOUNT_NAME
        );
        testkit::eventually(Duration::from_secs(30), || async {
            std::iter::once(&ns).chain(&others).all(|n| {
                testkit::kubectl(&[
                    "auth",
                    "can-i",
                    "list",
                    "vllmservices.aiinfra.example.com",
                    "-n",
                    &n.name,
                    "--as",
                    &user,
                ])
                .status
                .success()
            }) && testkit::kubectl(&[
                "auth",
                "can-i",
                "list",
                "customresourcedefinitions.apiextensions.k8s.io",
                "--as",
                &user,
            ])
            .status
            .success()
        })
        .await
        .expect("the bindings take effect");
        let kubeconfig = testkit::service_account_kubeconfig(&ns.name, rbac::SERVICE_ACCOUNT_NAME);
        Setup {
            client,
            ns,
            more: others,
            kubeconfig,
        }
    }

    async fn bound_pvc(&self) {
        self.bound_pvc_in(&self.ns.name).await
    }

    /// A claim `models` in `name`, bound to a PV of its own.
    async fn bound_pvc_in(&self, name: &str) {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-models")},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                     "storageClassName": "static-models", "hostPath": {"path": "/data/models"},
                     "persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"namespace": name, "name": "models"}}
        }))
        .unwrap();
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "models"},
            "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                     "resources": {"requests": {"storage": "10Gi"}}}
        }))
        .unwrap();
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), name)
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // The CRD ClusterRole is shared (same for every installation); its binding is not.
        let _ = testkit::kubectl(&[
            "delete",
            "clusterrolebinding",
            &format!("{}-{}", rbac::CRD_CLUSTER_ROLE_NAME, self.ns.name),
            "--wait=false",
        ]);
    }
}

/// What in a log shows a refused request (kube's and the API server's wording).
fn refusals(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden") || l.contains(" 403"))
        .collect()
}

async fn metric(p: &Operator, prefix: &str) -> Option<f64> {
    let (code, body) = p.get("/metrics").await?;
    (code == 200).then_some(())?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// A VLLMService on the claim `models` of its namespace.
fn chat() -> VLLMService {
    serde_json::from_value(json!({
        "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
        "metadata": {"name": "chat"},
        "spec": {"image": "vllm/vllm-openai:v0.11.0",
                 "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
                 "modelName": "qwen2.5-1.5b-instruct",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                 "storage": {"pvcName": "models", "mountPath": "/data/models"}}
    }))
    .unwrap()
}

/// Waits until `chat` of `api` is Available for its generation.
async fn available(p: &Operator, api: &Api<VLLMService>) {
    wait("chat to be Available", p, || async {
        let vs = api.get("chat").await.ok()?;
        let st = vs.status?;
        (st.observed_generation == vs.metadata.generation
            && st
                .conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True"))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_watch_namespace_rbac_is_enough_with_leader_election() {
    let setup = Setup::new("lp-full", rbac::LEADER_ELECTION_RULES).await;
    let ns = setup.ns.name.clone();
    setup.bound_pvc().await;
    let lease = "leader";
    let a = Operator::start("a", &setup.kubeconfig, &ns, lease);
    wait("a to lead and be ready", &a, || async {
        let leader = metric(&a, "vllmservice_operator_leader ").await?;
        let (code, body) = a.get("/readyz").await?;
        (leader == 1.0 && code == 200 && body.trim() == "ok").then_some(())
    })
    .await;
    let b = Operator::start("b", &setup.kubeconfig, &ns, lease);
    let (code, body) = wait("b to answer /readyz", &b, || async {
        b.get("/readyz").await
    })
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("ok: follower"), "{body}");

    let api: Api<VLLMService> = Api::namespaced(setup.client.clone(), &ns);
    api.create(&PostParams::default(), &chat()).await.unwrap();
    available(&a, &api).await;
    assert_eq!(
        metric(
            &a,
            "vllmservice_operator_reconcile_errors_total{category=\"forbidden\"}"
        )
        .await,
        Some(0.0),
        "forbidden reconcile errors"
    );

    // SIGTERM releases the Lease (a patch) and the follower takes over.
    let mut a = a;
    a.terminate();
    let status = a.exited(Duration::from_secs(30)).await.expect("a exits");
    assert!(status.success(), "a: {status}\n{}", a.log());
    wait("b to lead", &b, || async {
        (metric(&b, "vllmservice_operator_leader ").await? == 1.0).then_some(())
    })
    .await;
    for p in [&a, &b] {
        let log = p.log();
        assert!(!log.is_empty());
        let refused = refusals(&log);
        assert!(
            refused.is_empty(),
            "403s under the generated RBAC: {refused:#?}"
        );
    }
    // No VLLMService outside the watched namespace was looked at: the role cannot.
    let all: Api<VLLMService> =
        Api::all(kube::Client::try_from(testkit::config_for(&setup.kubeconfig).await).unwrap());
    assert!(all.list(&ListParams::default()).await.is_err());
}

/// Namespace-list mode, under exactly the RBAC `rbac --watch-namespace A,B`
/// prints: a service in each namespace becomes Available, and the operator's
/// identity cannot list pods or read a pod's log anywhere else.
#[tokio::test]
async fn a_list_of_namespaces_is_served_and_nothing_outside_it_is_readable() {
    let setup = Setup::watching("lp-list", rbac::LEADER_ELECTION_RULES, 1).await;
    let (a_ns, b_ns) = (setup.ns.name.clone(), setup.more[0].name.clone());
    let outside = TestNamespace::new(&setup.client, "lp-outside").await;
    for ns in [&a_ns, &b_ns, &outside.name] {
        setup.bound_pvc_in(ns).await;
    }
    // Outside: a service the operator must never take up (created first, so
    // that it had the whole run to), and a pod with a log to read, were it allowed.
    let outside_api: Api<VLLMService> = Api::namespaced(setup.client.clone(), &outside.name);
    outside_api
        .create(&PostParams::default(), &chat())
        .await
        .unwrap();
    let outside_pods = Api::<Pod>::namespaced(setup.client.clone(), &outside.name);
    let victim: Pod = serde_json::from_value(json!({
        "metadata": {"name": "victim"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    outside_pods
        .create(&PostParams::default(), &victim)
        .await
        .unwrap();
    let watch = format!("{a_ns},{b_ns}");
    let p = Operator::start_watching("a", &setup.kubeconfig, &a_ns, &watch, "leader");
    for ns in [&a_ns, &b_ns] {
        let api: Api<VLLMService> = Api::namespaced(setup.client.clone(), ns);
        api.create(&PostParams::default(), &chat()).await.unwrap();
        available(&p, &api).await;
    }
    let refused = refusals(&p.log()).join("\n");
    assert!(
        refused.is_empty(),
        "403s under the generated RBAC: {refused}"
    );

    // The operator's identity, asking the API server itself.
    let own = Client::try_from(testkit::config_for(&setup.kubeconfig).await).unwrap();
    let pods_in = |ns: &str| Api::<Pod>::namespaced(own.clone(), ns);
    let forbidden =
        |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    let a_pod = pods_in(&a_ns)
        .list(&ListParams::default())
        .await
        .expect("pods listed in a watched namespace");
    assert!(!a_pod.items.is_empty(), "chat's pod in {a_ns}");
    pods_in(&b_ns)
        .list(&ListParams::default())
        .await
        .expect("pods listed in the other watched namespace");
    assert!(
        forbidden(
            pods_in(&outside.name)
                .list(&ListParams::default())
                .await
                .map(|_| ())
        ),
        "pods listed outside the watched namespaces"
    );
    assert!(
        forbidden(
            pods_in(&outside.name)
                .logs("victim", &Default::default())
                .await
                .map(|_| ())
        ),
        "a pod log read outside the watched namespaces"
    );
    assert!(
        forbidden(
            Api::<Pod>::all(own.clone())
                .list(&ListParams::default())
                .await
                .map(|_| ())
        ),
        "pods listed cluster-wide"
    );
    // The service outside was there all along: no status, no Deployment.
    let untouched = outside_api.get("chat").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        setup.client.clone(),
        &outside.name,
    );
    assert!(deployments.get_opt("chat").await.unwrap().is_none());
}

/// The Lease verbs: each one, taken away, is refused (and a replica's log names it).
#[tokio::test]
async fn every_lease_verb_is_needed() {
    let started = Instant::now();
    let mut cases = Vec::new();
    for rule in rbac::LEADER_ELECTION_RULES {
        for verb in rule.verbs {
            let verbs: Vec<&'static str> =
                rule.verbs.iter().copied().filter(|v| v != verb).collect();
            let without = vec![Rule {
                verbs: verbs.leak(),
                ..*rule
            }];
            cases.push((*verb, rule.resources[0], without));
        }
    }
    let results = futures::future::join_all(cases.into_iter().map(|(verb, resource, rules)| async move {
        let setup = Setup::new("lp-lease", &rules).await;
        let ns = setup.ns.name.clone();
        // Two replicas: the leader stops watching the Lease once it holds it, the
        // follower keeps watching it (list, watch) to take over at once.
        let a = Operator::start("a", &setup.kubeconfig, &ns, "leader");
        let b = Operator::start("b", &setup.kubeconfig, &ns, "leader");
        let wanted = format!("cannot {verb} resource \\\"{resource}\\\"");
        let wanted_plain = format!("cannot {verb} resource \"{resource}\"");
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let log = format!("{}{}", a.log(), b.log());
            if log.contains(&wanted) || log.contains(&wanted_plain) {
                let others: Vec<String> = refusals(&log)
                    .into_iter()
                    .filter(|l| !l.contains(&wanted) && !l.contains(&wanted_plain))
                    .map(str::to_owned)
                    .collect();
                return if others.is_empty() {
                    eprintln!("without {verb} {resource}: refused");
                    Ok(())
                } else {
                    Err(format!("without {verb} {resource}: other refusals: {others:#?}"))
                };
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "without {verb} {resource}: no refusal of it in 45 s (the verb looks unneeded); log:\n{log}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }))
    .await;
    eprintln!(
        "every_lease_verb_is_needed: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Nothing answers at the configured API server: the controller runs, never
/// syncs, and says so.
#[tokio::test]
async fn readyz_is_503_while_the_caches_cannot_sync() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let kubeconfig = dir.join(format!(
        "unreachable-{}.kubeconfig",
        testkit::random_suffix()
    ));
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: none\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\nusers:\n- name: none\n  user: {token: none}\ncontexts:\n- name: none\n  context: {cluster: none, user: none}\ncurrent-context: none\n",
    )
    .unwrap();
    let addr = free_local_addr();
    let log = dir.join(format!("unreachable-{}.log", addr.replace(':', "-")));
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--watch-namespace", "none", "--health-addr", &addr])
        .args(["--metrics-addr", &free_local_addr(), "--metrics-insecure"])
        .env("KUBECONFIG", &kubeconfig);
    let operator = Process::spawn(cmd, log);
    let deadline = Instant::now() + WAIT;
    let healthz = loop {
        if let Some(r) = http_get(&addr, "/healthz").await {
            break r;
        }
        assert!(Instant::now() < deadline, "no /healthz");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Several looks: it stays not ready.
    for _ in 0..5 {
        let (code, body) = http_get(&addr, "/readyz").await.unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.starts_with("not ready"), "{body}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(healthz.0, 200, "{}", healthz.1);
    drop(operator);
}
