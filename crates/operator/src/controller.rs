//! The controller runtime around the reconcile pipeline: what is watched, how
//! events map to VLLMServices, concurrency, and the per-object retry policy.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{Future, StreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{PersistentVolumeClaim, Pod, Service},
};
use kube::{
    Api, Client, ResourceExt,
    core::{DeserializeGuard, PartialObjectMeta},
    runtime::{
        Controller,
        controller::{self, Action},
        events::{Recorder, Reporter},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use vllmservice_api::VLLMService;

use crate::{error::Error, metrics::Metrics, names, reconcile};

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
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub resync: Duration,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<ObjectRef<DeserializeGuard<VLLMService>>, u32>>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, opts: &Options) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: opts.reporter.clone(),
                instance: opts.instance.clone(),
            },
        );
        Context {
            client,
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

/// Runs the controller until `shutdown` completes.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ctx = Arc::new(Context::new(client.clone(), metrics, &opts));
    let apis = ScopedApis(client.clone(), opts.namespace.clone());
    let services: Api<DeserializeGuard<VLLMService>> = apis.api();
    let managed = watcher::Config::default().labels(&names::managed_selector());

    let controller = Controller::new(services, watcher::Config::default().any_semantic());
    let store = controller.store();
    // Pods and PVCs are only mapped to VLLMServices: metadata is all we need.
    let pods = apis.api::<PartialObjectMeta<Pod>>();
    let pvcs = apis.api::<PartialObjectMeta<PersistentVolumeClaim>>();
    controller
        .owns(apis.api::<Deployment>(), managed.clone())
        .owns(apis.api::<Service>(), managed.clone())
        .watches(pods, managed, |pod| {
            let ns = pod.namespace()?;
            names::instance_of(pod.labels()).map(|n| ObjectRef::new(n).within(&ns))
        })
        .watches(pvcs, watcher::Config::default(), move |pvc| {
            services_using_pvc(&store, &pvc)
        })
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .graceful_shutdown_on(shutdown)
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
    let result = reconcile::reconcile(&obj, &ctx).await;
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
