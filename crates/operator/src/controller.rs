//! The controller runtime around the reconcile pipeline: what is watched, how
//! events map to VLLMServices, concurrency, and the per-object retry policy.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Future, FutureExt, StreamExt};
use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{PersistentVolumeClaim, Pod, Service},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    core::{DeserializeGuard, PartialObjectMeta},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use tracing::Instrument;
use vllmservice_api::VLLMService;

use crate::prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor};
use crate::{error::Error, metrics::Metrics, names, optional::Apis, reconcile, route::Target};

/// Options of the controller loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many VLLMServices are reconciled at once.
    pub concurrency: u16,
    /// Re-check every object this often even without events (level-triggered safety net).
    pub resync: Duration,
    /// Name reported as the source of events.
    pub reporter: String,
    /// This replica's identity (pod name), reported with events.
    pub instance: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    pub namespace: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 16,
            resync: Duration::from_secs(300),
            reporter: names::MANAGED_BY_VALUE.to_string(),
            instance: None,
            namespace: None,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// The optional APIs installed when this controller's watches were set up.
    pub apis: Apis,
    /// The controller's cache of VLLMServices.
    pub services: Store<DeserializeGuard<VLLMService>>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub resync: Duration,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<ObjectRef<DeserializeGuard<VLLMService>>, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        opts: &Options,
        apis: Apis,
        services: Store<DeserializeGuard<VLLMService>>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: opts.reporter.clone(),
                instance: opts.instance.clone(),
            },
        );
        Context {
            client,
            apis,
            services,
            metrics,
            recorder,
            resync: opts.resync,
            failures: Mutex::default(),
        }
    }

    fn failed(&self, obj: ObjectRef<DeserializeGuard<VLLMService>>) -> u32 {
        let mut f = self.failures.lock().expect("failures lock");
        let n = f.entry(obj).or_default();
        *n = n.saturating_add(1);
        *n
    }

    fn succeeded(&self, obj: &ObjectRef<DeserializeGuard<VLLMService>>) {
        self.failures.lock().expect("failures lock").remove(obj);
    }
}

/// Exponential backoff: 1s, 2s, 4s ... capped at 256s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

/// Runs the controller until `shutdown` completes. When an optional API (Gateway
/// API, Prometheus Operator) is installed or removed, the watches are rebuilt
/// and every VLLMService is reconciled again; no restart of the process is needed.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let stopping = Arc::new(AtomicBool::new(false));
    loop {
        let apis = tokio::select! {
            apis = discover_until_ok(&client) => apis,
            _ = shutdown.clone() => return,
        };
        tracing::info!(
            gateway_api = apis.gateway,
            prometheus_operator = apis.prometheus,
            "optional APIs"
        );
        let (changed_tx, changed) = tokio::sync::oneshot::channel::<()>();
        let watch_crds = tokio::spawn({
            let client = client.clone();
            async move {
                apis_changed(client, apis).await;
                let _ = changed_tx.send(());
            }
        });
        let stop = {
            let (shutdown, stopping) = (shutdown.clone(), stopping.clone());
            async move {
                tokio::select! {
                    _ = shutdown => stopping.store(true, Ordering::SeqCst),
                    _ = changed => {}
                }
            }
        };
        run_watches(client.clone(), metrics.clone(), &opts, apis, stop).await;
        watch_crds.abort();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        tracing::info!("optional APIs changed: rebuilding watches");
    }
}

async fn discover_until_ok(client: &Client) -> Apis {
    let mut failures = 0;
    loop {
        match Apis::discover(client).await {
            Ok(apis) => return apis,
            Err(e) => {
                failures += 1;
                let delay = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?delay, "reading CRDs failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Completes when the set of installed optional APIs differs from `current`.
async fn apis_changed(client: Client, current: Apis) {
    let crds = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone());
    let mut events = watcher(crds, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(crd) = event else { continue };
        if !Apis::is_relevant(&crd.name_any()) {
            continue;
        }
        if let Ok(now) = Apis::discover(&client).await
            && now != current
        {
            return;
        }
    }
}

/// One incarnation of the controller, with the watches `apis` allows.
async fn run_watches(
    client: Client,
    metrics: Arc<Metrics>,
    opts: &Options,
    apis: Apis,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let scope = ScopedApis(client.clone(), opts.namespace.clone());
    let services: Api<DeserializeGuard<VLLMService>> = scope.api();
    let managed = watcher::Config::default().labels(&names::managed_selector());

    let mut controller = Controller::new(services, watcher::Config::default().any_semantic());
    let store = controller.store();
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        opts,
        apis,
        store.clone(),
    ));
    // Pods, PVCs and Gateways are only mapped to VLLMServices: metadata is all we need.
    let pvc_store = store.clone();
    controller = controller
        .owns(scope.api::<Deployment>(), managed.clone())
        .owns(scope.api::<Service>(), managed.clone())
        .watches(
            scope.api::<PartialObjectMeta<Pod>>(),
            managed.clone(),
            |pod| {
                let ns = pod.namespace()?;
                names::instance_of(pod.labels()).map(|n| ObjectRef::new(n).within(&ns))
            },
        )
        .watches(
            scope.api::<PartialObjectMeta<PersistentVolumeClaim>>(),
            watcher::Config::default(),
            move |pvc| services_using_pvc(&pvc_store, &pvc),
        );
    if apis.gateway {
        let gw_store = store.clone();
        controller = controller
            .owns(scope.api::<HttpRoute>(), managed.clone())
            .watches(
                scope.api::<PartialObjectMeta<Gateway>>(),
                watcher::Config::default(),
                move |gw| services_using_gateway(&gw_store, &gw),
            );
    }
    if apis.prometheus {
        controller = controller
            .owns(scope.api::<ServiceMonitor>(), managed.clone())
            .owns(scope.api::<PrometheusRule>(), managed.clone());
    }
    controller
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile_guarded, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile loop");
            }
        })
        .await;
}

/// Makes `Api`s for all namespaces or for one.
struct ScopedApis(Client, Option<String>);

impl ScopedApis {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.1 {
            Some(ns) => Api::namespaced(self.0.clone(), ns),
            None => Api::all(self.0.clone()),
        }
    }
}

fn services_using_gateway(
    store: &Store<DeserializeGuard<VLLMService>>,
    gw: &PartialObjectMeta<Gateway>,
) -> Vec<ObjectRef<DeserializeGuard<VLLMService>>> {
    let (Some(ns), name) = (gw.namespace(), gw.name_any()) else {
        return vec![];
    };
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|vs| {
            vs.spec.gateway_ref.as_ref().is_some_and(|r| {
                let t = Target::of(vs, r);
                t.namespace == ns && t.name == name
            })
        })
        .map(|vs| ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default()))
        .collect()
}

fn services_using_pvc(
    store: &Store<DeserializeGuard<VLLMService>>,
    pvc: &PartialObjectMeta<PersistentVolumeClaim>,
) -> Vec<ObjectRef<DeserializeGuard<VLLMService>>> {
    let (Some(ns), name) = (pvc.namespace(), pvc.name_any()) else {
        return vec![];
    };
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|vs| {
            vs.namespace().as_deref() == Some(ns.as_str()) && vs.spec.storage.pvc_name == name
        })
        .map(|vs| ObjectRef::new(&vs.name_any()).within(&ns))
        .collect()
}

async fn reconcile_guarded(
    obj: Arc<DeserializeGuard<VLLMService>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    ctx.metrics
        .managed_objects
        .set(ctx.services.state().len() as i64);
    // Every log line of this reconcile carries the object's namespace and name.
    let span = tracing::info_span!(
        "reconcile",
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any()
    );
    let result = match reconcile::reconcile(&obj, &ctx).instrument(span).await {
        // The namespace is being deleted: the children go with it; nothing to retry.
        Err(Error::Kube(kube::Error::Api(e)))
            if e.code == 403 && e.message.contains("being terminated") =>
        {
            Ok(Action::await_change())
        }
        other => other,
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(obj.as_ref()));
    }
    result
}

fn error_policy(obj: Arc<DeserializeGuard<VLLMService>>, err: &Error, ctx: Arc<Context>) -> Action {
    let category = err.category().as_str();
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            category: category.to_string(),
        })
        .inc();
    let failures = ctx.failed(ObjectRef::from_obj(obj.as_ref()));
    let delay = backoff(failures);
    tracing::warn!(
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any(),
        category,
        failures,
        retry_in = ?delay,
        error = %err,
        "reconcile failed"
    );
    // One event when an object starts failing, not one per retry.
    if let (1, Ok(vs)) = (failures, &obj.0) {
        let (vs, ctx) = (vs.clone(), ctx.clone());
        let note = format!("reconcile failed ({category}), retrying with backoff: {err}");
        tokio::spawn(async move {
            reconcile::publish(
                &ctx,
                &vs,
                EventType::Warning,
                "ReconcileFailed",
                &note,
                None,
            )
            .await;
        });
    }
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(40), Duration::from_secs(256));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(256));
    }
}
