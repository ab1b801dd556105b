//! An operator running in-process against the local cluster, scoped to one
//! fresh namespace, with its write counter readable by the test.

#![allow(dead_code)] // each test binary uses a different part of this module

pub mod hub;
pub mod requests;
pub mod sim;

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use testkit::TestNamespace;
use tokio::{sync::oneshot, task::JoinHandle};
use vllmservice_api::VLLMService;
use vllmservice_controller::{runtime, runtime::metrics::Metrics};

pub const WAIT: Duration = Duration::from_secs(60);

pub struct Operator {
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), runtime::WatchEnded>>>,
}

impl Operator {
    /// Starts the controller on the shared cluster, watching only `ns`.
    pub async fn start(ns: &str) -> Operator {
        Operator::start_with_config(testkit::config().await, ns).await
    }

    /// Starts the controller with a given client configuration (another cluster,
    /// another identity), watching only `ns`.
    pub async fn start_with_config(config: kube::Config, ns: &str) -> Operator {
        let metrics = Arc::new(Metrics::default());
        let client =
            vllmservice_controller::runtime::metrics::counting_client(config, metrics.clone())
                .expect("operator client");
        // An admin identity: it may count the cluster's free GPUs.
        Operator::start_with(client, metrics, ns, true)
    }

    /// Starts the controller with a client the test built (e.g. with an extra
    /// tower layer, or a ServiceAccount's identity with watch-namespace RBAC),
    /// counting into `metrics`, watching only `ns`, without GPU accounting (as
    /// the binary in watch-namespace mode).
    pub fn start_with_client(client: Client, metrics: Arc<Metrics>, ns: &str) -> Operator {
        Self::start_with(client, metrics, ns, false)
    }

    /// As [`Operator::start_with_client`]; `gpu_accounting` as in
    /// [`runtime::Options`] (it needs cluster-wide node and pod reads).
    pub fn start_with(
        client: Client,
        metrics: Arc<Metrics>,
        ns: &str,
        gpu_accounting: bool,
    ) -> Operator {
        let opts = runtime::Options {
            namespaces: vec![ns.to_string()],
            gpu_accounting,
            ..runtime::Options::default()
        };
        Self::start_with_options(client, metrics, opts)
    }

    /// Starts the controller on the shared cluster (admin identity, GPU
    /// accounting on), watching only `ns`, with KEDA's ScaledObjects querying the
    /// Prometheus at `prometheus_address` (e.g. `http://127.0.0.1:PORT`) unless a
    /// spec sets `autoscaling.prometheus.serverAddress`.
    pub async fn start_with_prometheus(ns: &str, prometheus_address: &str) -> Operator {
        let metrics = Arc::new(Metrics::default());
        let client = vllmservice_controller::runtime::metrics::counting_client(
            testkit::config().await,
            metrics.clone(),
        )
        .expect("operator client");
        let opts = runtime::Options {
            namespaces: vec![ns.to_string()],
            gpu_accounting: true,
            defaults: vllmservice_controller::reconcile::build::Defaults {
                prometheus_address: prometheus_address.to_string(),
                ..Default::default()
            },
            ..runtime::Options::default()
        };
        Self::start_with_options(client, metrics, opts)
    }

    /// Starts the controller with `client`, counting into `metrics`, with
    /// `opts` as given (set `opts.namespaces` to keep it to the test's namespace).
    pub fn start_with_options(
        client: Client,
        metrics: Arc<Metrics>,
        opts: runtime::Options,
    ) -> Operator {
        // VLLM_TEST_LOG=<filter> (e.g. "vllmservice_controller=debug") shows the operator's logs.
        if let Ok(filter) = std::env::var("VLLM_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(runtime::run(client, metrics.clone(), opts, async {
            let _ = stopped.await;
        }));
        Operator {
            metrics,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// True while the controller task has not ended (it ends only when stopped).
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the controller and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A test's namespace, an operator watching it, and an admin client.
pub struct Env {
    pub client: Client,
    pub ns: TestNamespace,
    pub operator: Operator,
}

impl Env {
    pub async fn new(prefix: &str) -> Env {
        Env::with_options(prefix, |_| {}).await
    }

    /// [`Env::new`] with the operator's options changed by `change` (its
    /// namespace is the test's; admin identity, GPU accounting on).
    pub async fn with_options(prefix: &str, change: impl FnOnce(&mut runtime::Options)) -> Env {
        testkit::install_all_crds();
        let client = testkit::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let metrics = Arc::new(Metrics::default());
        let operator_client = vllmservice_controller::runtime::metrics::counting_client(
            testkit::config().await,
            metrics.clone(),
        )
        .expect("operator client");
        let mut opts = runtime::Options {
            namespaces: vec![ns.name.clone()],
            gpu_accounting: true,
            ..runtime::Options::default()
        };
        change(&mut opts);
        let operator = Operator::start_with_options(operator_client, metrics, opts);
        Env {
            client,
            ns,
            operator,
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// A bound PVC named `name` (backed by a static PV made for it).
    pub async fn bound_pvc(&self, name: &str) {
        bound_pvc(&self.client, &self.ns.name, name, "/data/models").await;
    }

    /// Creates a VLLMService from JSON (namespace filled in).
    pub async fn create(&self, body: Value) -> VLLMService {
        let vs: VLLMService = serde_json::from_value(body).expect("a VLLMService");
        self.api::<VLLMService>()
            .create(&PostParams::default(), &vs)
            .await
            .expect("the API server accepts the VLLMService")
    }

    /// Merge-patches a VLLMService's spec.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.api::<VLLMService>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("patch accepted");
    }

    /// Waits until the VLLMService satisfies `check`, failing with its last status.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&VLLMService) -> bool,
    ) -> VLLMService {
        self.wait_for_within(name, what, WAIT, check).await
    }

    /// [`Env::wait_for`] with a budget of its own (a test that shares the machine
    /// with simulator pods starting beside it).
    pub async fn wait_for_within(
        &self,
        name: &str,
        what: &str,
        budget: Duration,
        check: impl Fn(&VLLMService) -> bool,
    ) -> VLLMService {
        let api = self.api::<VLLMService>();
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            let vs = api.get(name).await.expect("VLLMService exists");
            if check(&vs) {
                return vs;
            }
            if tokio::time::Instant::now() >= deadline {
                // Whether the controller still ran, and whether a reconcile hangs: a
                // status stuck at its first write has been seen without either known.
                let m = &self.operator.metrics;
                panic!(
                    "timed out waiting for {what} (the operator's reconciles: {} started, {} in \
                     flight; the controller task running: {}); last status:\n{}",
                    m.reconciles.get(),
                    m.reconciles_in_flight.get(),
                    self.operator.is_running(),
                    serde_json::to_string_pretty(&vs.status).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Env {
    /// Touches an annotation of the Service of `name` (a field the operator does
    /// not own), waits for the reconcile that the change of its child triggers, and
    /// asserts the operator sent no write at all. (Not the Deployment: a change of
    /// its annotations bumps its generation and starts a real, if empty, rollout.)
    pub async fn assert_idle_reconcile_writes_nothing(&self, name: &str) {
        let metrics = &self.operator.metrics;
        let (writes, reconciles) = metrics.quiet_counts().await;
        let before = metrics.writes_by_kind();
        self.api::<k8s_openapi::api::core::v1::Service>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
            )
            .await
            .expect("annotation patch accepted");
        testkit::wait_until(
            WAIT,
            "a reconcile after the annotation, finished",
            || async {
                (metrics.reconciles.get() > reconciles && metrics.reconciles_in_flight.get() == 0)
                    .then_some(())
            },
        )
        .await;
        assert_eq!(
            metrics.write_total(),
            writes,
            "writes after an unrelated annotation: {:?}, before it: {before:?}",
            metrics.writes_by_kind()
        );
    }
}

/// Counts of an operator's metrics once no reconcile runs.
pub trait QuietCounts {
    /// (writes, reconciles) once no reconcile is in flight.
    fn quiet_counts(&self) -> impl std::future::Future<Output = (u64, u64)>;
}

impl QuietCounts for Metrics {
    async fn quiet_counts(&self) -> (u64, u64) {
        testkit::wait_until(WAIT, "no reconcile in flight", || async {
            (self.reconciles_in_flight.get() == 0)
                .then(|| (self.write_total(), self.reconciles.get()))
        })
        .await
    }
}

/// A PVC `name` in `ns`, bound to a static hostPath PersistentVolume made for it
/// (named `<ns>-<name>`, deleted with the claim) at `host_path`.
pub async fn bound_pvc(client: &Client, ns: &str, name: &str, host_path: &str) {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{ns}-{name}")},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                 "storageClassName": "static-models", "hostPath": {"path": host_path},
                 "persistentVolumeReclaimPolicy": "Delete",
                 "claimRef": {"namespace": ns, "name": name}}
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                 "resources": {"requests": {"storage": "10Gi"}}}
    }))
    .unwrap();
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    // The PV controller binds the pair asynchronously; a service created before
    // that sees a Pending claim (PVCNotBound) and its pod is unschedulable.
    testkit::wait_until(
        WAIT,
        &format!("PersistentVolumeClaim {ns}/{name} to be Bound"),
        || {
            let pvcs = pvcs.clone();
            async move {
                let pvc = pvcs.get(name).await.ok()?;
                (pvc.status?.phase.as_deref() == Some("Bound")).then_some(())
            }
        },
    )
    .await;
}

/// The condition of `type_`, as (status, reason, message).
pub fn condition(vs: &VLLMService, type_: &str) -> Option<(String, String, String)> {
    vs.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn is_available(vs: &VLLMService) -> bool {
    condition(vs, "Available").is_some_and(|c| c.0 == "True")
        && vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
}

/// A spec that schedules on the local cluster's fake GPU nodes.
pub fn gpu_service(name: &str, pvc: &str) -> Value {
    json!({
        "apiVersion": "aiinfra.example.com/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": name},
        "spec": {
            "image": "vllm/vllm-openai:v0.11.0",
            "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
            "modelName": "qwen2.5-1.5b-instruct",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                          "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
            "storage": {"pvcName": pvc, "mountPath": "/data/models"}
        }
    })
}
